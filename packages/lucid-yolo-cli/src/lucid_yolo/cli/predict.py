"""``lucid-yolo predict``: run a checkpoint on images and write JSON (and PNG overlays).

Each image takes the validation path of the data pipeline (decode as RGB, resize the long side,
letterbox onto a grey square), the EMA network runs in eval mode, and
:meth:`lucid_yolo.train.Evaluator.predictions` decodes the one-to-one branch (top-k, no NMS) and
maps every geometry back through the letterbox to source pixels, exactly as validation scores it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import torch

from lucid_yolo.cli.checkpoint import Deployed, load_checkpoint
from lucid_yolo.cli.errors import CliError
from lucid_yolo.cli.prediction_output import detections, draw, record
from lucid_yolo.train import Evaluator
from lucid_yolo.train.data.augment.letterbox import letterbox
from lucid_yolo.train.data.augment.sample import Sample
from lucid_yolo.train.data.augment.targets import to_targets
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.cache import load_image
from lucid_yolo.train.data.collate import collate
from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.image_probe import IMAGE_SUFFIXES

STRIDE = 32


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``predict``."""
    parser = commands.add_parser(
        "predict",
        help="run a checkpoint on images; JSON records and optional overlays",
        description="Run the EMA network of a `lucid-yolo fit` checkpoint on an image or a "
        "folder of images. Writes OUT/<image stem>.json per image (boxes xyxy in source pixels, "
        "scores, class ids and names, COCO RLE masks, keypoints, rotated boxes) and, with --draw, "
        "OUT/<image stem>.png overlays.",
    )
    parser.add_argument("--checkpoint", required=True, help="a .ckpt written by `lucid-yolo fit`")
    parser.add_argument("--source", required=True, help="an image file or a folder of images")
    parser.add_argument(
        "--imgsz",
        type=int,
        default=None,
        help="network input size, a multiple of 32 (default: the checkpoint's training size)",
    )
    parser.add_argument(
        "--conf", type=float, default=0.25, help="score threshold in [0, 1] (default: 0.25)"
    )
    parser.add_argument(
        "--max-det", type=int, default=300, help="detections per image at most (default: 300)"
    )
    parser.add_argument("--batch-size", type=int, default=8, help="images per batch (default: 8)")
    parser.add_argument(
        "--device", default=None, help="torch device (default: cuda when available, else cpu)"
    )
    parser.add_argument(
        "--out", default="runs/predict", help="output folder (default: %(default)s)"
    )
    parser.add_argument("--draw", action="store_true", help="also write PNG overlays")
    parser.set_defaults(handler=run)


def list_sources(source: str) -> list[Path]:
    """The images of ``source``: the file itself, or a folder's images (not recursive), sorted.

    Raises:
        CliError: nothing there, no image in the folder, or two images share a file stem
            (their outputs would overwrite each other).
    """
    path = Path(source).expanduser()
    if path.is_file():
        images = [path]
    elif path.is_dir():
        images = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not images:
            raise CliError(
                f"--source {source!r} holds no image ({', '.join(sorted(IMAGE_SUFFIXES))})"
            )
    else:
        raise CliError(f"--source {source!r}: no such file or folder; check the path")
    stems = [p.stem for p in images]
    clash = sorted({s for s in stems if stems.count(s) > 1})
    if clash:
        raise CliError(
            f"--source {source!r}: images {clash!r} share a name with different suffixes; their "
            "outputs would collide, predict them separately"
        )
    return images


def letterboxed(images: list[Path], imgsz: int, task: Task, first_id: int) -> Batch:
    """Load and letterbox ``images`` the way validation does.

    Returns:
        A Batch with ``images`` (B, 3, imgsz, imgsz) uint8 RGB, ``scale_pad``, ``orig_sizes`` and
        ``image_ids`` (``first_id`` onwards); no target rows.
    """
    items = []
    for offset, path in enumerate(images):
        image, orig_size = load_image(path, imgsz)
        sample = Sample(
            image=image,
            classes=np.zeros(0, dtype=np.int64),
            boxes=np.zeros((0, 4), dtype=np.float32),
            image_id=first_id + offset,
            orig_size=orig_size,
            scale_pad=(image.shape[0] / orig_size[0], 0.0, 0.0),
        )
        items.append(to_targets(letterbox(sample, imgsz), task, max_instances=0))
    return collate(items)


def _batches(images: list[Path], size: int) -> Iterator[tuple[int, list[Path]]]:
    for start in range(0, len(images), size):
        yield start, images[start : start + size]


def run(args: argparse.Namespace) -> int:
    """Predict every image of ``args.source``; prints where the outputs went."""
    if not 0.0 <= args.conf <= 1.0:
        raise CliError(f"--conf {args.conf!r} must be in [0, 1]")
    if args.imgsz is not None and (args.imgsz <= 0 or args.imgsz % STRIDE):
        raise CliError(f"--imgsz {args.imgsz!r} must be a positive multiple of {STRIDE}")
    if args.batch_size < 1 or args.max_det < 1:
        raise CliError(
            f"--batch-size {args.batch_size!r} and --max-det {args.max_det!r} must be >= 1"
        )
    images = list_sources(args.source)
    deployed = load_checkpoint(args.checkpoint)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    imgsz = args.imgsz or deployed.imgsz
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    count = _predict(deployed, images, imgsz, device, args, out)
    print(f"predicted {len(images)} image(s), {count} detection(s): {out}")
    return 0


def _predict(
    deployed: Deployed,
    images: list[Path],
    imgsz: int,
    device: torch.device,
    args: argparse.Namespace,
    out: Path,
) -> int:
    net = deployed.net.to(device)
    evaluator = Evaluator(
        deployed.task,
        strides=net.strides,
        conf=args.conf,
        max_det=args.max_det,
    )
    total = 0
    for start, paths in _batches(images, args.batch_size):
        batch = letterboxed(paths, imgsz, deployed.task, start)
        with torch.inference_mode():
            raw = net(batch["images"].to(device).float().div_(255.0))
            # decoding and un-letterboxing are cheap: do them where the batch already is
            per_image = evaluator.predictions({k: v.cpu() for k, v in raw.items()}, batch)
        for path, predictions, size in zip(paths, per_image, batch["orig_sizes"], strict=True):
            height, width = (int(v) for v in size)
            found = detections(predictions, deployed.names)
            total += len(found)
            document = record(path, (height, width), found)
            (out / f"{path.stem}.json").write_text(json.dumps(document) + "\n", encoding="utf-8")
            if args.draw:
                source = np.asarray(cv2.imread(str(path), cv2.IMREAD_COLOR), dtype=np.uint8)
                cv2.imwrite(
                    str(out / f"{path.stem}.png"), draw(source, predictions, deployed.names)
                )
    return total


__all__ = ["add_parser", "letterboxed", "list_sources", "run"]
