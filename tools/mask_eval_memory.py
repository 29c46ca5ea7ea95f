"""Peak host memory of one segment validation batch: how evaluation scales with image size.

Builds raw one-to-one outputs that keep ``--detections`` detections per image (random boxes,
random prototypes), a batch of ``--batch`` letterboxed images of ``--source`` pixels with ten
polygon targets each, and runs :meth:`Evaluator.update` once in this fresh process; prints the
peak resident set size before and after as JSON (and writes it to ``$OUT/mask_eval_memory.json``
when ``OUT`` is set). CPU only: the numbers are host bytes.

Example::

    uv run python tools/mask_eval_memory.py --source 960 1280 --batch 4 --detections 300
"""

from __future__ import annotations

import argparse
import json
import os
import resource
from pathlib import Path

import numpy as np
import torch

from lucid_yolo.models.decode import anchor_grid
from lucid_yolo.train import Evaluator
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.geometry import SourceShape


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _batch(batch: int, imgsz: int, height: int, width: int, instances: int) -> Batch:
    scale = imgsz / max(height, width)
    pad_x, pad_y = (imgsz - round(width * scale)) // 2, (imgsz - round(height * scale)) // 2
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, [width * 0.7, height * 0.7], (batch, instances, 2))
    wh = rng.uniform(20, [width * 0.3, height * 0.3], (batch, instances, 2))
    source = np.concatenate([xy, xy + wh], axis=-1)
    boxes = torch.from_numpy(source * scale + [pad_x, pad_y, pad_x, pad_y]).float()
    polygons: list[list[SourceShape]] = [
        [np.array([[b[0], b[1]], [b[2], b[1]], [b[2], b[3]], [b[0], b[3]]]) for b in image]
        for image in source
    ]
    return Batch(
        images=torch.zeros(batch, 3, imgsz, imgsz, dtype=torch.uint8),
        classes=torch.zeros(batch, instances, dtype=torch.int64),
        valid=torch.ones(batch, instances, dtype=torch.bool),
        boxes=boxes,
        masks=torch.ones(batch, instances, imgsz // 4, imgsz // 4, dtype=torch.uint8),
        image_ids=torch.arange(batch),
        orig_sizes=torch.tensor([[height, width]] * batch),
        scale_pad=torch.tensor([[scale, pad_x, pad_y]] * batch, dtype=torch.float32),
        ignore=torch.zeros(batch, instances, dtype=torch.bool),
        source_shapes=polygons,
    )


def _outputs(batch: int, imgsz: int, detections: int) -> dict[str, torch.Tensor]:
    points, _ = anchor_grid((imgsz, imgsz), (8, 16, 32))
    A = points.shape[0]
    generator = torch.Generator().manual_seed(0)
    cls = torch.full((batch, 1, A), -9.0)
    cls[:, 0, :detections] = 2.0
    return {
        "o2o.box": torch.rand(batch, 4, A, generator=generator) * 8 + 1,
        "o2o.cls": cls,
        "o2o.mask_coef": torch.randn(batch, 32, A, generator=generator),
        "protos": torch.randn(batch, 32, imgsz // 4, imgsz // 4, generator=generator),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=int, nargs=2, default=(960, 1280), metavar=("H", "W"))
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--detections", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    height, width = args.source
    batch = _batch(args.batch, args.imgsz, height, width, instances=10)
    outputs = _outputs(args.batch, args.imgsz, args.detections)
    evaluator = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=args.detections)
    before = _peak_mib()
    evaluator.update(outputs, batch)
    result = {
        "source": [height, width],
        "batch": args.batch,
        "detections": args.detections,
        "peak_rss_before_mib": round(before, 1),
        "peak_rss_after_mib": round(_peak_mib(), 1),
        "mask_map50_95": round(evaluator.compute()["mask/mAP50-95"], 4),
    }
    print(json.dumps(result))
    if "OUT" in os.environ:
        Path(os.environ["OUT"], "mask_eval_memory.json").write_text(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
