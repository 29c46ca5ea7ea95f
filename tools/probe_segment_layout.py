"""Probe: why segment x channels_last replay differs from native (issue 12, parity matrix).

The parity matrix found the segment model with ``channels_last`` weights not bitwise equal to
native in 32-true and bf16-mixed (first difference ``model.protos.semantic.2.weight`` in fp32),
while every contiguous case and every other task was. This probe narrows it down without an
optimizer, so nothing but one forward+backward is compared:

1. **grads**: per region setting (network + segment heads, network alone, segment heads alone)
   and layout, three micro-batches through a fresh native net and a replayed copy; after each
   backward, the parameters whose gradients differ (the first call is the native warm-up, the
   second records and replays, the third replays).
2. **boundaries**: strides of the gradients that arrive natively at each region output (a hook
   per output) next to the strides of the replay's static gradient buffers for the same output.
   A captured backward reads its buffer with the buffer's layout; a reduction over a gradient
   (a conv's bias gradient, ``grad.sum((0, 2, 3))``) then runs in another order than natively.
3. **conv**: the semantic head's last 1x1 conv backward with the same gradient values in the
   native layout and in ``channels_last``: equal weight and bias gradients or not.

Writes ``$OUT/probe_segment_layout.json`` (or ``--out``) and prints one line per finding.

Example (GPU machine, repository root)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:)
    CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 tools/probe_segment_layout.py --out $OUT/probe.json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from lucid_yolo.models import YOLO26, create_model
from lucid_yolo.replay import tensor_digest
from lucid_yolo.replay._grad_layout import GradLayouts
from lucid_yolo.train import ReplayConfig, YoloDataModule
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.losses import build_loss
from lucid_yolo.train.replay import NetworkReplay

SETTINGS = {
    "network+segment_heads": ReplayConfig(network=True, segment_heads=True),
    "network": ReplayConfig(network=True),
    "segment_heads": ReplayConfig(segment_heads=True),
}


def _deterministic() -> None:
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def _batches(root: Path, device: torch.device, count: int) -> list[Batch]:
    yaml = generate_synthetic(root, task="segment", num_train=8, num_val=2, imgsz=128, seed=0)
    data = YoloDataModule(
        yaml, task="segment", imgsz=128, batch_size=2, workers=0, max_instances=16, seed=0
    )
    data.setup("fit")
    loader: Iterator[Any] = iter(data.train_dataloader())
    batches: list[Batch] = []
    for _ in range(count):
        batch = next(loader)
        batches.append(
            cast(Batch, {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()})
        )
    return batches


def _layout(t: Tensor) -> dict[str, Any]:
    return {
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "offset": t.storage_offset(),
        "contiguous": t.is_contiguous(),
        "channels_last": t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last),
        "dtype": str(t.dtype),
    }


def _grads(net: nn.Module) -> dict[str, str]:
    return {
        n: "none" if p.grad is None else tensor_digest(p.grad) for n, p in net.named_parameters()
    }


def _net(layout: str, device: torch.device, num_classes: int) -> YOLO26:
    net = create_model("yolo26n-seg", num_classes=num_classes, seed=0).to(device)
    if layout == "channels_last":
        net = net.to(memory_format=torch.channels_last)
    return net


def _step(forward: Any, criterion: nn.Module, batch: Batch, precision: str) -> dict[str, Tensor]:
    images = batch["images"].float().div_(255.0)
    autocast = precision == "bf16-mixed"
    with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=autocast):
        outputs = forward(images)
        total, _ = criterion(outputs, batch, torch.zeros((), device=images.device))
    total.backward()
    return dict(outputs)


class _GradLayouts:
    """Records the layout of the first gradient that reaches each watched native tensor."""

    def __init__(self, found: dict[str, Any]) -> None:
        self.found = found
        self.handles: list[Any] = []

    def watch(self, name: str, tensor: Tensor) -> None:
        if tensor.requires_grad:
            self.handles.append(
                tensor.register_hook(  # type: ignore[no-untyped-call]  # torch stub gap
                    functools.partial(self._seen, name)
                )
            )

    def _seen(self, name: str, grad: Tensor) -> None:
        self.found.setdefault(name, _layout(grad))

    def outputs(self, outputs: dict[str, Tensor]) -> None:
        for key, value in outputs.items():
            self.watch(f"native.{key}", value)

    def features(self, module: nn.Module, inputs: Any, outputs: Any) -> None:
        for level, value in enumerate(outputs):
            self.watch(f"native.features.p{level + 3}", value)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def grads_experiment(
    batches: list[Batch], layout: str, precision: str, setting: str, device: torch.device
) -> dict[str, Any]:
    """Native vs replayed gradients over the micro-batches (no optimizer step)."""
    num_classes = int(batches[0]["classes"].max().item()) + 1
    native = _net(layout, device, max(num_classes, 3))
    replayed = copy.deepcopy(native)
    criterion = build_loss("segment", max(num_classes, 3), strides=(8, 16, 32)).to(device)
    replay = NetworkReplay(replayed, "segment", SETTINGS[setting], criterion)
    steps = []
    boundary: dict[str, Any] = {}
    watch = _GradLayouts(boundary)
    for index, batch in enumerate(batches):
        for net in (native, replayed):
            net.zero_grad(set_to_none=True)
        features_hook = native.neck.register_forward_hook(watch.features)

        def forward(images: Tensor) -> dict[str, Tensor]:
            outputs: dict[str, Tensor] = native(images)
            watch.outputs(outputs)
            return outputs

        _step(forward, criterion, batch, precision)
        features_hook.remove()
        watch.remove()
        _step(replay, criterion, batch, precision)
        a, b = _grads(native), _grads(replayed)
        differing = [name for name in a if a[name] != b[name]]
        steps.append({"call": index + 1, "differing": differing[:12], "count": len(differing)})
    for recorder in replay.recorders():
        for recording in recorder._recordings.values():  # a probe may read the internals
            keys = recording.layout.keys
            for i, static in recording.static_grad_outputs.items():
                boundary[f"static.{recorder.name}.{keys[i]}"] = _layout(static)
    telemetry = {r.name: r.telemetry.as_dict()["replays"] for r in replay.recorders()}
    return {"steps": steps, "boundary": boundary, "replays": telemetry}


def conv_experiment(batches: list[Batch], device: torch.device) -> dict[str, Any]:
    """The semantic head's last conv backward with one gradient in two layouts."""
    net = _net("channels_last", device, 3)
    images = batches[0]["images"].float().div_(255.0)
    with torch.no_grad():
        features = net.features(images)
        protos = net.protos
        assert protos is not None
        fused = features[0]
        for refine, x in zip(protos.refine, features[1:], strict=True):
            fused = fused + nn.functional.interpolate(refine(x), size=fused.shape[-2:])
        hidden = protos.semantic[1](protos.semantic[0](fused))
    conv = protos.semantic[2]
    assert isinstance(conv, nn.Conv2d)
    assert conv.bias is not None
    grad = torch.randn(conv(hidden).shape, device=device, generator=None)
    results = {}
    for name, g in (
        ("contiguous", grad.contiguous()),
        ("channels_last", grad.contiguous(memory_format=torch.channels_last)),
    ):
        conv.zero_grad(set_to_none=True)
        x = hidden.detach().requires_grad_(True)
        conv(x).backward(g)
        assert conv.weight.grad is not None
        assert conv.bias.grad is not None
        assert x.grad is not None
        results[name] = {
            "weight": tensor_digest(conv.weight.grad),
            "bias": tensor_digest(conv.bias.grad),
            "input": tensor_digest(x.grad),
        }
    same = {
        k: results["contiguous"][k] == results["channels_last"][k]
        for k in ("weight", "bias", "input")
    }
    return {"equal": same}


def _experiments(precisions: list[str]) -> Iterator[tuple[str, str, str, str]]:
    """Per precision: both regions replayed over channels_last weights with the static
    gradient buffers laid out both ways (``learned`` from the native warm-up, and ``output``,
    the output's own layout as before); then each region alone, learned."""
    for precision in precisions:
        for buffers in ("learned", "output"):
            yield precision, buffers, "channels_last", "network+segment_heads"
        yield precision, "learned", "channels_last", "network"
        yield precision, "learned", "channels_last", "segment_heads"


@contextlib.contextmanager
def _static_buffers(kind: str) -> Iterator[None]:
    """``output``: the replay's static gradient buffers as ``zeros_like(output)`` (the layout
    before the buffers learned the native one)."""
    if kind == "learned":
        yield
        return
    original = GradLayouts.static_buffer
    GradLayouts.static_buffer = lambda self, key, index, output: torch.zeros_like(output)  # type: ignore[method-assign]
    try:
        yield
    finally:
        GradLayouts.static_buffer = original  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "probe_segment_layout.json"
    )
    parser.add_argument("--precisions", nargs="+", default=["32-true"])
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    _deterministic()
    torch.manual_seed(0)
    report: dict[str, Any] = {"device": str(device), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        batches = _batches(Path(tmp), device, 3)
        report["conv"] = conv_experiment(batches, device)
        print(f"conv: {report['conv']}", flush=True)
        for precision, buffers, layout, setting in _experiments(args.precisions):
            key = f"{precision}/{buffers}/{layout}/{setting}"
            try:
                with _static_buffers(buffers):
                    report[key] = grads_experiment(batches, layout, precision, setting, device)
            except Exception as error:  # a probe reports and goes on
                report[key] = {"error": f"{type(error).__name__}: {error}"}
            row = report[key]
            steps = row.get("steps", [])
            print(
                key,
                [(s["call"], s["count"], s["differing"][:2]) for s in steps],
                row.get("replays", row.get("error")),
                flush=True,
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
