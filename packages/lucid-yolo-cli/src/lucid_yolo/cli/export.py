"""``lucid-yolo export``: the end-to-end (NMS-free) network of a checkpoint as an ONNX file, or
its weights under Ultralytics' names.

The exported graph is the EMA network's one-to-one path with top-k selection and static shapes
(:func:`lucid_yolo.models.export_onnx`); a runtime gets final detections without any NMS node.
Its inputs and outputs are described in ``docs/deployment.md``. The ``ultralytics`` and
``safetensors`` formats write the weights as a state dict with the reference's names
(:func:`lucid_yolo.models.save_reference_weights`). The network comes from a ``fit`` checkpoint
(``--ckpt_path``, as in ``validate``, ``test`` and ``predict``) or, with ``--model.weights``, from
pretrained weights. The older ``--checkpoint`` still works and prints a one-line deprecation
warning; it will be removed. The models package (and torch) is imported when the command runs,
not when its parser is built.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from lucid_yolo.cli.errors import CliError

FORMATS = ("onnx", "ultralytics", "safetensors")
"""Supported export formats."""

DEFAULT_SUFFIXES = {
    "onnx": ".onnx",
    "ultralytics": ".ultralytics.pt",
    "safetensors": ".safetensors",
}
"""What replaces the source file's suffix when ``--out`` is not given."""

STRIDE = 32

ONNX_REGISTRY_LOGGER = "torch.onnx._internal.exporter._registration"
"""The logger through which torch's ONNX exporter says, once per torchvision operator, that
torchvision is not installed; the exported graph uses none of them, so the lines are hidden."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``export``."""
    parser = commands.add_parser(
        "export",
        help="export a checkpoint's network to ONNX, or its weights under Ultralytics' names",
        description="Export the EMA network of a `lucid-yolo fit` checkpoint, end-to-end (top-k, "
        "no NMS node) with static shapes, for deployment; or its weights as a state dict with "
        "Ultralytics' names (--format ultralytics or safetensors).",
    )
    parser.add_argument("--ckpt_path", default=None, help="a .ckpt written by `lucid-yolo fit`")
    parser.add_argument("--checkpoint", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--model.weights",
        dest="weights",
        default=None,
        help="pretrained weights instead of a checkpoint: an Ultralytics YOLO26 .pt, a state "
        "dict or a .safetensors file",
    )
    parser.add_argument(
        "--format",
        default="onnx",
        help=f"output format, one of: {', '.join(FORMATS)} (default: onnx)",
    )
    parser.add_argument(
        "--imgsz",
        type=int,
        default=None,
        help="square input size, a multiple of 32 (default: the checkpoint's training size)",
    )
    parser.add_argument("--batch-size", type=int, default=1, help="fixed batch size (default: 1)")
    parser.add_argument(
        "--max-det", type=int, default=300, help="detections per image (default: 300)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output file (default: the source's path with .onnx, .ultralytics.pt or .safetensors)",
    )
    parser.set_defaults(handler=run)


def checkpoint_path(args: argparse.Namespace) -> str | None:
    """``--ckpt_path``, or the deprecated ``--checkpoint`` with a warning line.

    Raises:
        CliError: no source, or more than one (``--ckpt_path``, ``--checkpoint``,
            ``--model.weights``).
    """
    given = [args.ckpt_path, args.checkpoint, args.weights]
    if sum(value is not None for value in given) != 1:
        raise CliError(
            "export needs exactly one of --ckpt_path (a .ckpt written by `lucid-yolo fit`, e.g. "
            "runs/detect/fit1/checkpoints/best.ckpt) or --model.weights"
        )
    if args.checkpoint is not None:
        print("lucid-yolo: warning: --checkpoint is deprecated; use --ckpt_path", file=sys.stderr)
        return str(args.checkpoint)
    return None if args.ckpt_path is None else str(args.ckpt_path)


def run(args: argparse.Namespace) -> int:
    """Export the checkpoint or weights; prints the written path."""
    ckpt_path = checkpoint_path(args)
    if args.format not in FORMATS:
        raise CliError(
            f"--format {args.format!r} is not supported; supported: {', '.join(FORMATS)}"
        )
    if args.imgsz is not None and (args.imgsz <= 0 or args.imgsz % STRIDE):
        raise CliError(f"--imgsz {args.imgsz!r} must be a positive multiple of {STRIDE}")
    if args.batch_size < 1 or args.max_det < 1:
        raise CliError(
            f"--batch-size {args.batch_size!r} and --max-det {args.max_det!r} must be >= 1"
        )
    from lucid_yolo.cli.checkpoint import load_checkpoint, load_pretrained
    from lucid_yolo.models import export_onnx, save_reference_weights

    if ckpt_path is not None:
        deployed, source = load_checkpoint(ckpt_path), Path(ckpt_path)
    else:
        deployed, source = load_pretrained(args.weights), Path(args.weights)
    out = Path(args.out or source.with_name(source.stem + DEFAULT_SUFFIXES[args.format]))
    if args.format != "onnx":
        path = save_reference_weights(deployed.net, out)
        print(f"exported {deployed.task} weights under Ultralytics' names to {path}")
        return 0
    imgsz = args.imgsz or deployed.imgsz
    out.parent.mkdir(parents=True, exist_ok=True)
    registry_log = logging.getLogger(ONNX_REGISTRY_LOGGER)
    level = registry_log.level
    registry_log.setLevel(logging.ERROR)
    try:
        path = export_onnx(
            deployed.net, out, imgsz, batch_size=args.batch_size, max_det=args.max_det
        )
    finally:
        registry_log.setLevel(level)
    print(f"exported {deployed.task} model ({imgsz}x{imgsz}, batch {args.batch_size}) to {path}")
    return 0


__all__ = [
    "DEFAULT_SUFFIXES",
    "FORMATS",
    "ONNX_REGISTRY_LOGGER",
    "add_parser",
    "checkpoint_path",
    "run",
]
