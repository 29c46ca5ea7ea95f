"""``lucid-yolo data check | synth | convert``: inspect, generate and convert datasets.

``check`` reads a whole dataset and lists every problem with ``file:line`` (exit 1 when there is
an error, a problem ``fit`` refuses, so it can gate a pipeline; warnings alone exit 0); ``synth``
writes the synthetic shapes set the quickstart trains on; ``convert`` moves between the
Ultralytics layout and COCO json. The training package (and torch) is imported when a command
runs, not when its parser is built.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lucid_yolo.cli.errors import CliError

CONVERSIONS = ("coco", "ultralytics")
"""Targets of ``data convert --to``."""
TASKS = ("detect", "segment", "pose", "obb")
"""``--task`` choices: ``lucid_yolo.models.TASKS``, spelled out so that building the parser does
not import torch (a test keeps the two equal)."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``data`` and its ``check``, ``synth`` and ``convert`` subcommands."""
    parser = commands.add_parser(
        "data",
        help="check, generate (synth) or convert a dataset",
        description="Dataset tools: `check` lists every problem with file:line, `synth` writes "
        "the synthetic shapes set, `convert` moves between Ultralytics and COCO.",
    )
    parser.set_defaults(handler=lambda _: _usage(parser))
    actions = parser.add_subparsers(title="data commands", metavar="ACTION")
    _add_check(actions)
    _add_synth(actions)
    _add_convert(actions)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _add_check(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "check",
        help="list every problem of a dataset with file:line",
        description="Read every image header and label row of a dataset and report all problems "
        "at once: errors (what `fit` refuses) and warnings (what it reads with a note). Exit "
        "status 1 when an error was found, 0 otherwise.",
    )
    parser.add_argument(
        "path",
        help="an Ultralytics data.yaml, a COCO .json, or a DOTA folder (images/ + labelTxt/)",
    )
    parser.add_argument(
        "--task",
        choices=TASKS,
        default=None,
        help="task to read labels for (default: the YAML's; detect for COCO, obb for DOTA)",
    )
    parser.add_argument("--images-dir", default=None, help="COCO only: the images' folder")
    parser.add_argument(
        "--no-images", action="store_true", help="skip probing image headers (labels only)"
    )
    parser.add_argument(
        "--allow-unlabelled",
        action="store_true",
        help="accept a split without any label file (background only), as "
        "`fit --data.allow_unlabelled true` does",
    )
    parser.set_defaults(handler=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Print the report of ``args.path``; 1 when it has errors, else 0."""
    from lucid_yolo.train.data.check import check_dataset

    if not Path(args.path).expanduser().exists():
        raise CliError(f"{args.path!r}: no such file or folder; pass a data.yaml, .json or folder")
    report = check_dataset(
        args.path,
        task=args.task,
        images_dir=args.images_dir,
        check_images=not args.no_images,
        allow_unlabelled=args.allow_unlabelled,
    )
    print(report.format())
    return 0 if report.ok else 1


def _add_synth(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "synth",
        help="write the synthetic shapes dataset",
        description="Write a deterministic synthetic dataset of shapes (boxes, polygons, "
        "keypoints, rotated boxes) in the Ultralytics layout, with its data.yaml.",
    )
    parser.add_argument("--task", choices=TASKS, default="detect", help="default: detect")
    parser.add_argument("--out", required=True, help="output folder (created)")
    parser.add_argument("--train", type=int, default=64, help="training images (default: 64)")
    parser.add_argument("--val", type=int, default=16, help="validation images (default: 16)")
    parser.add_argument("--imgsz", type=int, default=640, help="image side, >= 64 (default: 640)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    parser.add_argument(
        "--max-objects", type=int, default=6, help="shapes per image at most (default: 6)"
    )
    parser.set_defaults(handler=run_synth)


def run_synth(args: argparse.Namespace) -> int:
    """Generate the set; prints the written data.yaml."""
    from lucid_yolo.train.data.synthetic import generate_synthetic

    if args.train < 0 or args.val < 0 or args.imgsz < 64 or args.max_objects < 1:
        raise CliError(
            f"--train {args.train!r} and --val {args.val!r} must be >= 0, --imgsz {args.imgsz!r} "
            f">= 64 and --max-objects {args.max_objects!r} >= 1"
        )
    path = generate_synthetic(
        args.out,
        task=args.task,
        num_train=args.train,
        num_val=args.val,
        imgsz=args.imgsz,
        seed=args.seed,
        max_objects=args.max_objects,
    )
    print(f"wrote {args.train} train + {args.val} val {args.task} images: {path}")
    return 0


def _add_convert(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "convert",
        help="convert between Ultralytics and COCO",
        description="`--to coco --data data.yaml` writes one COCO json per split; "
        "`--to ultralytics --split train train.json images/ --split val val.json images/` writes "
        "images/, labels/ and a data.yaml.",
    )
    parser.add_argument("--to", choices=CONVERSIONS, required=True, help="target format")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--data", default=None, help="--to coco: the Ultralytics data.yaml")
    parser.add_argument(
        "--split",
        nargs=3,
        action="append",
        metavar=("NAME", "JSON", "IMAGES_DIR"),
        default=None,
        help="--to ultralytics: a COCO split (repeat; train and val required)",
    )
    parser.add_argument(
        "--task",
        choices=TASKS,
        default=None,
        help="task of the labels (default: the YAML's; detect for COCO)",
    )
    parser.add_argument(
        "--link-images", action="store_true", help="--to ultralytics: symlink instead of copy"
    )
    parser.set_defaults(handler=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    """Convert; prints what was written."""
    from lucid_yolo.train.data.formats import coco_to_ultralytics, ultralytics_to_coco

    if args.to == "coco":
        if args.data is None or args.split:
            raise CliError("--to coco takes --data path/to/data.yaml and no --split")
        _require(args.data)
        written = ultralytics_to_coco(args.data, args.out, task=args.task)
        for split, (json_path, images_dir) in written.items():
            print(f"{split}: {json_path} (images: {images_dir})")
        return 0
    if args.data is not None or not args.split:
        raise CliError(
            "--to ultralytics takes --split NAME JSON IMAGES_DIR (for train and val), not --data"
        )
    splits: dict[str, tuple[str | Path, str | Path]] = {}
    for name, json_path, images_dir in args.split:
        _require(json_path)
        splits[name] = (json_path, images_dir)
    path = coco_to_ultralytics(
        splits, args.out, task=args.task or "detect", link_images=args.link_images
    )
    print(f"wrote {path}")
    return 0


def _require(path: str) -> None:
    if not Path(path).expanduser().is_file():
        raise CliError(f"{path!r}: no such file; check the path")


__all__ = ["CONVERSIONS", "TASKS", "add_parser", "run_check", "run_convert", "run_synth"]
