"""``lucid-yolo info MODEL``: layers, parameters and GFLOPs of a registered model.

The models package (and torch) is imported when the command runs, not when its parser is built.
"""

from __future__ import annotations

import argparse


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``info``."""
    parser = commands.add_parser(
        "info",
        help="print a model's layers, parameters and GFLOPs",
        description="Print the layer table, parameters and GFLOPs of a registered model, for "
        "training (as built) and for inference (BatchNorm folded, end-to-end branch only).",
    )
    parser.add_argument(
        "model",
        help="registered name: yolo26{n,s,m,l,x} with an optional -seg, -pose or -obb suffix",
    )
    parser.add_argument("--imgsz", type=int, default=None, help="input size (default: the task's)")
    parser.add_argument("--num-classes", type=int, default=80, help="classes (default: 80)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the summary of ``args.model``."""
    from lucid_yolo.models import create_model, model_spec, model_summary

    spec = model_spec(args.model)
    size = args.imgsz or spec.image_size
    model = create_model(args.model, num_classes=args.num_classes)
    summary = model_summary(model, size)
    print(f"{spec.name}: task {spec.task}, scale {args.model[6]}, {args.num_classes} classes")
    print(summary.format())
    return 0


__all__ = ["add_parser", "run"]
