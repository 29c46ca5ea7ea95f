"""``lucid-yolo export``: the end-to-end (NMS-free) network of a checkpoint as an ONNX file, or
its weights under Ultralytics' names.

The exported graph is the EMA network's one-to-one path with top-k selection and static shapes
(:func:`lucid_yolo.models.export_onnx`); a runtime gets final detections without any NMS node.
The ``ultralytics`` and ``safetensors`` formats write the weights as a state dict with the
reference's names (:func:`lucid_yolo.models.save_reference_weights`). The network comes from a
``fit`` checkpoint or, with ``--model.weights``, from pretrained weights.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lucid_yolo.cli.checkpoint import load_checkpoint, load_pretrained
from lucid_yolo.cli.errors import CliError
from lucid_yolo.models import export_onnx, save_reference_weights

FORMATS = ("onnx", "ultralytics", "safetensors")
"""Supported export formats."""

DEFAULT_SUFFIXES = {
    "onnx": ".onnx",
    "ultralytics": ".ultralytics.pt",
    "safetensors": ".safetensors",
}
"""What replaces the source file's suffix when ``--out`` is not given."""

STRIDE = 32


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``export``."""
    parser = commands.add_parser(
        "export",
        help="export a checkpoint's network to ONNX, or its weights under Ultralytics' names",
        description="Export the EMA network of a `lucid-yolo fit` checkpoint, end-to-end (top-k, "
        "no NMS node) with static shapes, for deployment; or its weights as a state dict with "
        "Ultralytics' names (--format ultralytics or safetensors).",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="a .ckpt written by `lucid-yolo fit`")
    source.add_argument(
        "--model.weights",
        dest="weights",
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


def run(args: argparse.Namespace) -> int:
    """Export ``args.checkpoint``; prints the written path."""
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
    if args.checkpoint is not None:
        deployed, source = load_checkpoint(args.checkpoint), Path(args.checkpoint)
    else:
        deployed, source = load_pretrained(args.weights), Path(args.weights)
    out = Path(args.out or source.with_name(source.stem + DEFAULT_SUFFIXES[args.format]))
    if args.format != "onnx":
        path = save_reference_weights(deployed.net, out)
        print(f"exported {deployed.task} weights under Ultralytics' names to {path}")
        return 0
    imgsz = args.imgsz or deployed.imgsz
    out.parent.mkdir(parents=True, exist_ok=True)
    path = export_onnx(deployed.net, out, imgsz, batch_size=args.batch_size, max_det=args.max_det)
    print(f"exported {deployed.task} model ({imgsz}x{imgsz}, batch {args.batch_size}) to {path}")
    return 0


__all__ = ["DEFAULT_SUFFIXES", "FORMATS", "add_parser", "run"]
