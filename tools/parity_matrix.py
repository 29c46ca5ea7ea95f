"""The replay parity matrix: native vs replayed fits, bitwise, over task x precision x accumulation
x layout (4 x 3 x 3 x 2 = 72 cases).

Each case runs two short seeded fits on a tiny synthetic set (batch 2, 4 optimizer steps, an EMA,
a validation between steps), one native and one with every region that applies replayed
(network, segment heads, loss, update). It compares digests of the weights and buffers, the
optimizer, the GradScaler, the LR schedule, the EMA, every per-step loss and the validation
metrics, and checks each region's replay count against the count the schedule implies (a region
that silently never replays fails).

Writes one JSON file with a row per case (rewritten after every case, so a cut run keeps what it
finished) and prints a line per case. Exit status 1 if any case differs.

Example (GPU machine, from the repository root, deterministic cuBLAS)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:)
    CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 tools/parity_matrix.py --out $OUT/parity_matrix.json

``--shard 1/2`` and ``--shard 2/2`` split the cases over two commands; ``--tasks detect``,
``--precisions bf16-mixed`` and ``--accelerator cpu --limit 1`` give a quick smoke run.
``--one-region`` records the network and its loss as one region (``replay.loss_with_network``).
``--skip-passed a.json ...`` leaves out the cases that earlier runs' files record as passed, so
a run cut by a device call's limit goes on where it stopped. Give every shard the same reports
(the shards split what is left), reports of runs with the same ``--accelerator``, ``--imgsz``
and ``--segment-heads`` (a case's name does not hold them), and an ``--out`` of its own (the
run writes only its own rows).
``--extra imgsz-changed ...`` runs the extra cases of :mod:`parity_extras` instead (per task and
precision, accumulation 1, contiguous).
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import MixedPrecision

from lucid_yolo.replay import first_difference, state_digest
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.memory_format import MemoryFormat
from parity_extras import EXTRAS

TASKS = ("detect", "segment", "pose", "obb")
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")
ACCUMULATIONS = (1, 2, 3)
LAYOUTS: tuple[MemoryFormat, ...] = ("contiguous", "channels_last")
SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}
STEPS = 4
REGION_WARMUP = 1
"""Native warm-up calls of every recorder before it records (the library default)."""


@dataclass(frozen=True)
class Case:
    """One cell of the matrix."""

    task: str
    precision: str
    accumulation: int
    layout: MemoryFormat
    segment_heads: bool = True
    one_region: bool = False
    """The network and its loss as one region (``ReplayConfig.loss_with_network``; the segment
    heads then inside the network's)."""
    extra: str = ""
    """An extra case's name (:data:`parity_extras.EXTRAS`), empty for a matrix case."""

    @property
    def name(self) -> str:
        name = f"{self.task}/{self.precision}/acc{self.accumulation}/{self.layout}"
        name += "/one-region" if self.one_region else ""
        return f"{name}/{self.extra}" if self.extra else name

    def replay_config(self) -> ReplayConfig:
        """Every region that applies to the task."""
        return ReplayConfig(
            network=True,
            segment_heads=self.task == "segment" and self.segment_heads and not self.one_region,
            loss=True,
            loss_with_network=self.one_region,
            update=True,
        )


@dataclass
class Row:
    """The result of one case."""

    case: str
    bitwise: bool
    first_difference: str | None
    losses_equal: bool
    val_equal: bool
    replays: dict[str, int]
    expected_replays: dict[str, int]
    retirements: int
    seconds: float
    error: str | None = None
    first_loss_difference: int | None = None
    """0-based micro-batch of the first per-step loss that differs."""
    retired: list[str] = field(default_factory=list)
    """Each retirement as ``recorder: reason: detail``."""
    updates: int = 0
    """Optimizer updates applied by the replayed fit (GradScaler skips steps with inf
    gradients; a case with none compares no gradient at all)."""
    counts: dict[str, int] = field(default_factory=dict)
    """What an extra case's callbacks counted in the replayed fit."""
    passed: bool = field(init=False)

    def __post_init__(self) -> None:
        self.passed = (
            self.error is None
            and self.bitwise
            and self.losses_equal
            and self.val_equal
            and self.retirements == 0
            and self.replays == self.expected_replays
        )


class Record(Callback):
    """Keeps the bits of every per-step loss and of the validation metrics."""

    def __init__(self) -> None:
        self.losses: list[str] = []
        self.val: list[dict[str, str]] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *_: Any) -> None:
        self.losses.append(outputs["loss"].detach().float().cpu().numpy().tobytes().hex())

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        self.val.append({k: _bits(v) for k, v in sorted(metrics.items())})


def fit_state_digests(trainer: pl.Trainer, module: YoloModule) -> dict[str, str]:
    """Digests of everything two fits must share to be called equal (scaler only where one runs)."""
    state: dict[str, Any] = {
        "model": module.net.state_dict(),
        "ema": module.ema.state_dict(),
        "optimizer": trainer.optimizers[0].state_dict(),
        "scheduler": [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs],
    }
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    return state_digest(state)


def parity_trainer(accelerator: str, callbacks: list[Callback], **options: Any) -> pl.Trainer:
    """A one-device trainer for fits compared bit for bit: deterministic kernels, no cuDNN
    benchmark (it may pick another kernel per run), no sanity check, and nothing written or
    printed of its own; ``options`` add the schedule, precision and validation."""
    return pl.Trainer(
        accelerator=accelerator,
        devices=1,
        num_sanity_val_steps=0,
        deterministic=True,
        benchmark=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **options,
    )


def _bits(value: Any) -> str:
    return torch.as_tensor(value).detach().float().cpu().numpy().tobytes().hex()


@dataclass
class _Fit:
    digests: dict[str, str]
    losses: list[str]
    val: list[dict[str, str]]
    replays: dict[str, int]
    retirements: int
    retired: list[str]
    updates: int
    micro_batches: int
    counts: dict[str, int]


def _fit(yaml: Path, case: Case, args: argparse.Namespace, replay: bool) -> _Fit:
    pl.seed_everything(0)
    extra = EXTRAS.get(case.extra)
    options: dict[str, Any] = {
        "task": case.task,
        "imgsz": args.imgsz,
        "batch_size": 2,
        "workers": 0,
        "max_instances": 16,
        "seed": 0,
    }
    data = YoloDataModule(yaml, **options) if extra is None else extra.datamodule(yaml, **options)
    schedule: dict[str, Any] = (
        {"max_steps": STEPS, "accumulate_grad_batches": case.accumulation}
        if extra is None
        else extra.trainer_options(case.accumulation)
    )
    shape = data.spec.kpt_shape
    module = YoloModule(
        f"yolo26n{SUFFIX[case.task]}",
        num_classes=data.num_classes,
        kpt_shape=(17, 3) if shape is None else (shape[0], 3),
        warmup_epochs=0.0,
        ema_tau=3.0,
        replay=case.replay_config() if replay else ReplayConfig(),
        memory_format=case.layout,
    )
    record = Record()
    callbacks = [] if extra is None else extra.callbacks()
    trainer = parity_trainer(
        args.accelerator,
        [record, *callbacks],
        **_precision(case.precision, args.accelerator),
        val_check_interval=2,
        check_val_every_n_epoch=None,
        limit_val_batches=1,
        **schedule,
    )
    trainer.fit(module, data)
    recorders = module.replay_recorders()
    return _Fit(
        digests=fit_state_digests(trainer, module),
        losses=record.losses,
        val=record.val,
        replays={r.name: r.telemetry.replays for r in recorders},
        retirements=sum(r.telemetry.as_dict()["retirements"] for r in recorders),
        retired=[str(event) for r in recorders for event in _retire_history(r)],
        updates=int(module.ema.updates),
        micro_batches=len(record.losses),
        counts={k: v for c in callbacks if hasattr(c, "counts") for k, v in c.counts().items()},
    )


FP16_INIT_SCALE = 2.0**8
"""GradScaler's first scale in 16-mixed cases. At Lightning's 2**16 a 4-step case applied 0 or
1 updates (every other step had inf gradients and was skipped), so it compared no gradient."""


def _precision(precision: str, accelerator: str) -> dict[str, Any]:
    """The Trainer's precision options: 16-mixed on a GPU as a plugin with a smaller first scale."""
    if precision != "16-mixed" or accelerator == "cpu":
        return {"precision": precision}
    scaler = torch.amp.GradScaler("cuda", init_scale=FP16_INIT_SCALE)
    return {"plugins": [MixedPrecision("16-mixed", "cuda", scaler)]}


def _retire_history(recorder: Any) -> list[Any]:
    """A recorder's retirements (region recorders and the update keep a ``retire_log``)."""
    log = getattr(recorder, "retire_log", None)
    return list(log.history) if log is not None else []


def _first_loss_difference(a: list[str], b: list[str]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def _expected(fit: _Fit, case: Case) -> dict[str, int]:
    """Replays each region must show: every call after the warm-up one of each signature."""
    signatures = EXTRAS[case.extra].signatures if case.extra else 1
    calls = fit.micro_batches - REGION_WARMUP * signatures
    if case.one_region:
        expected = {"network+loss": calls}
    else:
        expected = {"network": calls}
        if case.task == "segment" and case.segment_heads:
            expected["segment-heads"] = calls
        expected["loss"] = calls
    # GradScaler skips the update on a step with inf gradients: count applied updates.
    expected["optimizer MuSGD"] = max(fit.updates - REGION_WARMUP, 0)
    return expected


def run_case(yaml: Path, case: Case, args: argparse.Namespace) -> Row:
    """Both fits of one case, compared."""
    begin = time.perf_counter()
    try:
        native = _fit(yaml, case, args, replay=False)
        replayed = _fit(yaml, case, args, replay=True)
    except Exception as error:  # a failing case is a row, not the end of the matrix
        return Row(case.name, False, None, False, False, {}, {}, 0, 0.0, repr(error))
    return Row(
        case=case.name,
        bitwise=first_difference(native.digests, replayed.digests) is None,
        first_difference=first_difference(native.digests, replayed.digests),
        losses_equal=native.losses == replayed.losses,
        val_equal=native.val == replayed.val and len(native.val) > 0,
        replays=replayed.replays,
        expected_replays=_expected(replayed, case),
        retirements=replayed.retirements,
        seconds=round(time.perf_counter() - begin, 1),
        first_loss_difference=_first_loss_difference(native.losses, replayed.losses),
        retired=replayed.retired,
        updates=replayed.updates,
        counts=replayed.counts,
    )


def passed_cases(reports: list[Path]) -> set[str]:
    """Names of the cases that earlier runs' files (this tool's ``--out``) record as passed.

    Raises:
        SystemExit: naming a file that is missing or not such a report, before any case runs.
    """
    passed: set[str] = set()
    for report in reports:
        try:
            rows = json.loads(report.read_text())
            passed.update(row["case"] for row in rows if row["passed"])
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise SystemExit(
                f"--skip-passed {report}: not a parity matrix report ({error!r}); give files "
                "written by this tool's --out"
            ) from error
    return passed


def _cases(args: argparse.Namespace) -> list[Case]:
    """The matrix's cases, or with ``--extra`` each extra at accumulation 1, contiguous."""
    grid = itertools.product(args.tasks, args.precisions, ACCUMULATIONS, LAYOUTS, [""])
    if args.extra:
        grid = itertools.product(args.tasks, args.precisions, [1], ["contiguous"], args.extra)
    cases = [
        Case(
            task,
            precision,
            accumulation,
            layout,
            segment_heads=args.segment_heads,
            one_region=args.one_region,
            extra=extra,
        )
        for task, precision, accumulation, layout, extra in grid
        if args.accelerator != "cpu" or precision != "16-mixed"
    ]
    passed = passed_cases(args.skip_passed)
    cases = [case for case in cases if case.name not in passed]
    index, count = (int(x) for x in args.shard.split("/"))
    cases = cases[index - 1 :: count]
    return cases[: args.limit] if args.limit else cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("parity_matrix.json"))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument(
        "--extra",
        nargs="+",
        default=[],
        choices=EXTRAS,
        help="run these extra cases (tools/parity_extras.py) instead of the matrix",
    )
    parser.add_argument("--imgsz", type=int, default=64)
    parser.add_argument("--accelerator", default="gpu")
    parser.add_argument("--shard", default="1/1", help="i/n: run every n-th case from the i-th")
    parser.add_argument("--limit", type=int, default=0, help="run at most this many cases")
    parser.add_argument(
        "--skip-passed",
        nargs="+",
        type=Path,
        default=[],
        help="leave out the cases these earlier reports (--out files) record as passed",
    )
    parser.add_argument(
        "--segment-heads",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="segment: the prototype heads as a region of their own (else inside the network's)",
    )
    parser.add_argument(
        "--one-region",
        action="store_true",
        help="the network and its loss as one region (replay.loss_with_network)",
    )
    args = parser.parse_args()
    if args.out.resolve() in {report.resolve() for report in args.skip_passed}:
        parser.error(f"--out {args.out} is one of the --skip-passed reports: write elsewhere")
    if args.accelerator == "gpu":
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        yamls = {
            task: generate_synthetic(
                Path(tmp) / task, task=task, num_train=8, num_val=2, imgsz=128, seed=0
            )
            for task in args.tasks
        }
        for case in _cases(args):
            yaml = yamls[case.task]
            if case.extra:
                yaml = EXTRAS[case.extra].prepare(yaml, Path(tmp))
            row = run_case(yaml, case, args)
            rows.append(row)
            print(json.dumps(asdict(row)), flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    failed = [r.case for r in rows if not r.passed]
    print(f"{len(rows) - len(failed)}/{len(rows)} cases bitwise; failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
