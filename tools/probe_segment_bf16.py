"""Probe: why segment loss replay differs from native under bf16 autocast (issue 12).

With the loss replayed, the segment parity matrix was bitwise in 32-true and 16-mixed and
differed in all 6 bf16-mixed cases (first difference ``model.backbone.stem.0.conv.weight``);
with the loss native, bf16 was bitwise. This probe localises the difference in three parts, each
run under a set of *variants* that change the same code on the native and the replayed side:

1. **loss**: the loss region alone, over leaf inputs holding a native network's bf16 outputs;
   per call, the loss terms (per branch) and the input gradients that differ between native and
   replayed, next to a second native run (eager against eager: any difference there is
   nondeterminism, not replay).
2. **chain**: network → segment heads → loss replayed against a native copy, plain SGD after
   every call (no Lightning); per call, differing terms, differing gradients at the network's
   outputs (tensor hooks), differing parameter gradients, and the weights after the step.
   ``chain-2`` keeps the segment heads inside the network's region; ``loss-after-native``
   replays the loss alone after a native network.
3. **matrix**: the parity matrix's case ``segment/bf16-mixed/acc1/contiguous`` with the loss
   replayed (Lightning, 4 steps), per variant: bitwise or the first difference, the first
   step whose loss differs and any retirement; ``matrix-2`` with the segment heads inside the
   network's region.

Variants: ``as-is``; ``mask-elementwise`` (the mask logits as a broadcast product and a sum, no
matrix product); ``mask-bmm`` (an explicit ``bmm``); ``select-stable`` (mask samples chosen by
a stable sort, so tied priorities keep anchor order); ``cache-on`` (autocast's weight-cast cache
on, Lightning runs it off); ``nondeterministic`` (``use_deterministic_algorithms(False)``, parts
1 and 2 only).

Writes ``$OUT/probe_segment_bf16.json`` (or ``--out``), rewritten after every experiment, and
prints a line per experiment.

Example (GPU machine, repository root)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tools
    CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 tools/probe_segment_bf16.py --parts loss chain
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import Tensor, nn

import parity_matrix
from lucid_yolo.models import YOLO26, create_model
from lucid_yolo.models.outputs import MASK_COEF, PROTOS
from lucid_yolo.replay import RegionRecorder, ReplayPool, first_difference, tensor_digest
from lucid_yolo.train import ReplayConfig, YoloDataModule
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.losses import build_loss
from lucid_yolo.train.losses.loss_base import BranchContext
from lucid_yolo.train.losses.segment_loss import SegmentationLoss, instance_mask_loss
from lucid_yolo.train.replay import NetworkReplay
from lucid_yolo.train.replay.regions import LossRegion

IMGSZ = 64
"""The matrix's input size (its synthetic set is generated at 128 px and letterboxed)."""


def _mask_terms(
    self: SegmentationLoss, assemble: str, select: str, ctx: BranchContext
) -> dict[str, Tensor]:
    """``SegmentationLoss._task_terms`` with the mask assembly and sample choice switchable."""
    coef = ctx.output(MASK_COEF)  # (B, M, A)
    protos = ctx.outputs[PROTOS]  # (B, M, h, w)
    masks = ctx.batch["masks"]
    B, M, A = coef.shape
    height, width = protos.shape[-2:]
    samples = min(self.mask_samples, A)
    priority = ctx.targets.fg * (1 + ctx.fg_weight)
    if select == "stable":
        index = priority.sort(dim=1, descending=True, stable=True).indices[:, :samples]
    else:
        index = priority.topk(samples, dim=1).indices  # (B, S)
    weight = ctx.targets.fg.gather(1, index).float()
    sample_coef = coef.gather(2, index[:, None].expand(B, M, samples))  # (B, M, S)
    if assemble == "elementwise":
        # (B, M, S, 1, 1) * (B, M, 1, h, w) summed over M -> (B, S, h, w)
        logits = (sample_coef[..., None, None] * protos[:, :, None]).sum(1)
    elif assemble == "bmm":
        # (B, S, M) @ (B, M, h*w) -> (B, S, h*w)
        logits = torch.bmm(sample_coef.transpose(1, 2), protos.flatten(2))
        logits = logits.unflatten(2, (height, width))  # type: ignore[no-untyped-call]
    else:
        logits = torch.einsum("bms,bmhw->bshw", sample_coef, protos)
    gt_index = ctx.targets.gt_index.gather(1, index)
    target = masks.gather(1, gt_index[..., None, None].expand(B, samples, height, width))
    scale = ctx.batch["images"].shape[-1] / width
    boxes = ctx.targets.boxes.gather(1, index[..., None].expand(B, samples, 4)) / scale
    mask = instance_mask_loss(logits, target.float(), boxes, weight, self.mask_normalisation)
    return {"mask": mask}


@contextlib.contextmanager
def _patched_mask(assemble: str, select: str) -> Iterator[None]:
    original = SegmentationLoss._task_terms
    SegmentationLoss._task_terms = functools.partialmethod(  # type: ignore[assignment]
        _mask_terms, assemble, select
    )
    try:
        yield
    finally:
        SegmentationLoss._task_terms = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _nondeterministic() -> Iterator[None]:
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(True)


@contextlib.contextmanager
def _lightning_cast_cache() -> Iterator[None]:
    original = MixedPrecision.autocast_context_manager

    def autocast(self: MixedPrecision) -> torch.autocast:
        dtype = torch.bfloat16 if self.precision == "bf16-mixed" else torch.half
        return torch.autocast(self.device, dtype=dtype, cache_enabled=True)

    MixedPrecision.autocast_context_manager = autocast  # type: ignore[method-assign]
    try:
        yield
    finally:
        MixedPrecision.autocast_context_manager = original  # type: ignore[method-assign]


VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "as-is": contextlib.nullcontext,
    "mask-elementwise": functools.partial(_patched_mask, "elementwise", "topk"),
    "mask-bmm": functools.partial(_patched_mask, "bmm", "topk"),
    "select-stable": functools.partial(_patched_mask, "einsum", "stable"),
    "cache-on": _lightning_cast_cache,
    "nondeterministic": _nondeterministic,
}
CACHE_ON = "cache-on"


def _deterministic() -> None:
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)


def _batches(root: Path, device: torch.device, count: int) -> list[Batch]:
    """``count`` training batches of the matrix's data (batch 2), cycling over epochs."""
    yaml = generate_synthetic(root, task="segment", num_train=8, num_val=2, imgsz=128, seed=0)
    data = YoloDataModule(
        yaml, task="segment", imgsz=IMGSZ, batch_size=2, workers=0, max_instances=16, seed=0
    )
    data.setup("fit")
    batches: list[Batch] = []
    while len(batches) < count:
        for batch in data.train_dataloader():
            moved = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()}
            batches.append(cast(Batch, moved))
            if len(batches) == count:
                break
    return batches


def _bits(values: dict[str, Tensor]) -> dict[str, str]:
    return {k: tensor_digest(v.detach()) for k, v in values.items()}


def _differ(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return [k for k in {**a, **b} if a.get(k) != b.get(k)]


def _autocast(device: torch.device, cache: bool) -> torch.autocast:
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)


def _net(device: torch.device, num_classes: int) -> YOLO26:
    return create_model("yolo26n-seg", num_classes=num_classes, seed=0).to(device)


def _num_classes(batches: list[Batch]) -> int:
    return max(int(max(b["classes"].max().item() for b in batches)) + 1, 3)


def loss_experiment(batches: list[Batch], device: torch.device, cache: bool) -> dict[str, Any]:
    """The loss region alone over leaf inputs: native, replayed and native again, per call."""
    num_classes = _num_classes(batches)
    net = _net(device, num_classes)
    criterion = build_loss("segment", num_classes, strides=net.strides).to(device)
    fraction = torch.zeros((), device=device)
    recorder: RegionRecorder | None = None
    calls = []
    for index, batch in enumerate(batches):
        with torch.no_grad(), _autocast(device, cache):
            raw = {k: v.detach() for k, v in net(batch["images"].float() / 255).items()}
        keys, fields = tuple(sorted(raw)), tuple(sorted(batch))
        runs: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
        for side in ("native", "replay", "native-again"):
            leaves = {k: v.clone().requires_grad_(True) for k, v in raw.items()}
            with _autocast(device, cache):
                if side == "replay":
                    if recorder is None:
                        region = LossRegion(criterion, keys, fields)
                        recorder = RegionRecorder(region, name="loss", pool=ReplayPool(device))
                    tensors = cast(dict[str, Tensor], batch)
                    result = recorder(
                        *(leaves[k] for k in keys), *(tensors[k] for k in fields), fraction
                    )
                    assert isinstance(result, dict)
                    total = result["total"]
                    terms = {k.removeprefix("term."): v for k, v in result.items() if k != "total"}
                else:
                    total, terms = criterion(leaves, batch, fraction)
            # replayed outputs are borrowed: digest them before the backward (invariant 14)
            values = _bits({"total": total, **terms})
            total.backward()
            grads = {k: v.grad for k, v in leaves.items() if v.grad is not None}
            runs[side] = (values, _bits(grads))
        native, replay, again = runs["native"], runs["replay"], runs["native-again"]
        calls.append(
            {
                "call": index + 1,
                "terms_differ": _differ(native[0], replay[0]),
                "grads_differ": _differ(native[1], replay[1]),
                "eager_terms_differ": _differ(native[0], again[0]),
                "eager_grads_differ": _differ(native[1], again[1]),
            }
        )
    assert recorder is not None
    return {"calls": calls, "telemetry": recorder.telemetry.as_dict()}


class _OutputGrads:
    """Digests of the gradients that reach each raw network output (tensor hooks)."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def watch(self, outputs: dict[str, Tensor]) -> None:
        for key, value in outputs.items():
            if value.requires_grad:
                value.register_hook(functools.partial(self._seen, key))  # type: ignore[no-untyped-call]

    def _seen(self, key: str, grad: Tensor) -> None:
        self.seen[key] = tensor_digest(grad)


def _digest_or_none(value: Tensor | None) -> str:
    return "none" if value is None else tensor_digest(value)


def _param_bits(net: nn.Module, grads: bool) -> dict[str, str]:
    return {n: _digest_or_none(p.grad if grads else p) for n, p in net.named_parameters()}


CHAINS = {
    "chain": ReplayConfig(network=True, segment_heads=True, loss=True),
    "chain-2": ReplayConfig(network=True, loss=True),
    "loss-after-native": ReplayConfig(loss=True),
}
"""Part 2's region sets: three regions; the segment heads inside the network's region; the loss
alone after a native network (the segment heads alone retire with ``shared-input``: the neck's
features also feed the native head)."""


def chain_experiment(
    batches: list[Batch], device: torch.device, cache: bool, config: ReplayConfig
) -> dict[str, Any]:
    """Regions replayed against a native copy, SGD after each call."""
    num_classes = _num_classes(batches)
    native = _net(device, num_classes)
    replayed = copy.deepcopy(native)
    criterion = build_loss("segment", num_classes, strides=native.strides).to(device)
    replay = NetworkReplay(replayed, "segment", config, criterion)
    optimizers = [
        torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, foreach=False)
        for net in (native, replayed)
    ]
    fraction = torch.zeros((), device=device)
    calls = []
    for index, batch in enumerate(batches):
        seen: list[tuple[dict[str, str], dict[str, str]]] = []
        for forward, loss, optimizer in (
            (native, criterion, optimizers[0]),
            (replay, replay.loss, optimizers[1]),
        ):
            optimizer.zero_grad(set_to_none=True)
            hooks = _OutputGrads()
            with _autocast(device, cache):
                outputs = forward(batch["images"].float() / 255)
                hooks.watch(outputs)
                total, terms = loss(outputs, batch, fraction)
            values = _bits({"total": total, **terms})  # borrowed outputs: before the backward
            total.backward()
            seen.append((values, hooks.seen))
            optimizer.step()
        grads_differ = _differ(_param_bits(native, True), _param_bits(replayed, True))
        calls.append(
            {
                "call": index + 1,
                "terms_differ": _differ(seen[0][0], seen[1][0]),
                "output_grads_differ": _differ(seen[0][1], seen[1][1]),
                "param_grads_differ": len(grads_differ),
                "first_param_grads": grads_differ[:6],
                "weights_first_difference": first_difference(
                    _param_bits(native, False), _param_bits(replayed, False)
                ),
            }
        )
    telemetry = {r.name: r.telemetry.as_dict() for r in replay.recorders()}
    return {"calls": calls, "telemetry": telemetry}


def matrix_experiment(yaml: Path, segment_heads: bool) -> dict[str, Any]:
    """The parity matrix's first bf16 segment case with the loss replayed."""
    case = parity_matrix.Case("segment", "bf16-mixed", 1, "contiguous", segment_heads=segment_heads)
    args = argparse.Namespace(accelerator="gpu", imgsz=IMGSZ)
    row = parity_matrix.run_case(yaml, case, args)
    return dataclasses.asdict(row)


PARTS = ("loss", *CHAINS, "matrix", "matrix-2")
"""``matrix-2``: the matrix case with the segment heads inside the network's region."""


def _experiments(parts: list[str], variants: list[str]) -> Iterator[tuple[str, str]]:
    """Variant by variant, so a run cut short has every part of the first variants."""
    for variant in variants:
        for part in parts:
            if part.startswith("matrix") and variant == "nondeterministic":
                continue  # Lightning's deterministic=True sets the flag again at fit start
            yield part, variant


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "probe_segment_bf16.json"
    )
    parser.add_argument("--parts", nargs="+", default=["loss", "chain", "matrix"], choices=PARTS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--calls", type=int, default=6, help="micro-batches of parts 1 and 2")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    _deterministic()
    report: dict[str, Any] = {"device": str(device), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        batches = _batches(Path(tmp) / "loader", device, args.calls)
        yaml = generate_synthetic(
            Path(tmp) / "matrix", task="segment", num_train=8, num_val=2, imgsz=128, seed=0
        )
        for part, variant in _experiments(args.parts, args.variants):
            key = f"{part}/{variant}"
            begin = time.perf_counter()
            cache = variant == CACHE_ON
            try:
                with VARIANTS[variant]():
                    if part == "loss":
                        report[key] = loss_experiment(batches, device, cache)
                    elif part in CHAINS:
                        report[key] = chain_experiment(batches, device, cache, CHAINS[part])
                    else:
                        report[key] = matrix_experiment(yaml, segment_heads=part == "matrix")
            except Exception as error:  # a probe reports and goes on
                report[key] = {"error": f"{type(error).__name__}: {error}"}
            report[key]["seconds"] = round(time.perf_counter() - begin, 1)
            print(key, json.dumps(report[key])[:600], flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
