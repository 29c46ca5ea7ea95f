"""``lucid-yolo export``: the end-to-end (NMS-free) network of a checkpoint as an ONNX file.

The exported graph is the EMA network's one-to-one path with top-k selection and static shapes
(:func:`lucid_yolo.models.export_onnx`); a runtime gets final detections without any NMS node.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lucid_yolo.cli.checkpoint import load_checkpoint
from lucid_yolo.cli.errors import CliError
from lucid_yolo.models import export_onnx

FORMATS = ("onnx",)
"""Supported export formats."""

STRIDE = 32


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``export``."""
    parser = commands.add_parser(
        "export",
        help="export a checkpoint's network to ONNX",
        description="Export the EMA network of a `lucid-yolo fit` checkpoint, end-to-end (top-k, "
        "no NMS node) with static shapes, for deployment.",
    )
    parser.add_argument("--checkpoint", required=True, help="a .ckpt written by `lucid-yolo fit`")
    parser.add_argument(
        "--format", default="onnx", help=f"output format, one of: {', '.join(FORMATS)}"
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
        "--out", default=None, help="output file (default: the checkpoint's path with .onnx)"
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
    deployed = load_checkpoint(args.checkpoint)
    imgsz = args.imgsz or deployed.imgsz
    out = Path(args.out) if args.out else Path(args.checkpoint).with_suffix(".onnx")
    out.parent.mkdir(parents=True, exist_ok=True)
    path = export_onnx(deployed.net, out, imgsz, batch_size=args.batch_size, max_det=args.max_det)
    print(f"exported {deployed.task} model ({imgsz}x{imgsz}, batch {args.batch_size}) to {path}")
    return 0


__all__ = ["FORMATS", "add_parser", "run"]
