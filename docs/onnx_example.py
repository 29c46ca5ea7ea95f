"""Run a model exported by ``lucid-yolo export`` with onnxruntime, without lucid-yolo installed.

It prepares the image exactly as ``lucid-yolo predict`` does (the contract in
``docs/deployment.md``), maps the boxes back to the source image, clips them to it, and prints
one JSON line per detection in the format of ``predict``'s records. With ``--draw out.png`` it
also draws the boxes.

Needs ``onnxruntime``, ``numpy`` and ``opencv-python``. Example::

    uv run lucid-yolo export --ckpt_path runs/detect/fit1/checkpoints/best.ckpt
    uv run python docs/onnx_example.py runs/detect/fit1/checkpoints/best.onnx image.jpg \\
        --conf 0.25 --draw boxes.png
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

PAD_VALUE = 114
"""Grey of the letterbox border."""


def letterbox(
    bgr: npt.NDArray[np.uint8], size: int
) -> tuple[npt.NDArray[np.float32], float, int, int]:
    """An OpenCV (BGR) image as the network input.

    Returns:
        ``(input, scale, pad_x, pad_y)``: input ``(1, 3, size, size)`` float32 RGB in ``[0, 1]``;
        a source pixel ``p`` lands at ``p * scale + pad``.
    """
    height, width = bgr.shape[:2]
    scale = size / max(height, width)
    new_h, new_w = max(1, round(height * scale)), max(1, round(width * scale))
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    if (new_h, new_w) != (height, width):
        shrink = new_h < height
        interpolation = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
        rgb = cv2.resize(rgb, (new_w, new_h), interpolation=interpolation)
    pad_y, pad_x = (size - new_h) // 2, (size - new_w) // 2
    canvas = np.full((size, size, 3), PAD_VALUE, dtype=np.uint8)
    canvas[pad_y : pad_y + new_h, pad_x : pad_x + new_w] = rgb
    image = canvas.transpose(2, 0, 1)[None].astype(np.float32) / 255.0  # (1, 3, size, size)
    return image, scale, pad_x, pad_y


def detect(
    session: ort.InferenceSession, bgr: npt.NDArray[np.uint8], conf: float
) -> list[dict[str, Any]]:
    """Detections of one image, best first: ``class_id``, ``score`` and ``box`` in source pixels.

    The model's boxes are ``xyxy`` in input pixels and not clipped; here they are mapped back with
    ``(p - pad) / scale`` and clipped to the source image, as ``predict`` does.
    """
    size = int(session.get_inputs()[0].shape[-1])
    image, scale, pad_x, pad_y = letterbox(bgr, size)
    boxes, scores, classes = session.run(["boxes", "scores", "classes"], {"images": image})[:3]
    height, width = bgr.shape[:2]
    keep = scores[0] >= conf
    source = (boxes[0][keep] - np.array([pad_x, pad_y, pad_x, pad_y])) / scale
    source = np.clip(source, 0.0, [width, height, width, height])
    return [
        {"class_id": int(c), "score": round(float(s), 5), "box": np.round(b, 3).tolist()}
        for b, s, c in zip(source, scores[0][keep], classes[0][keep], strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the .onnx file written by `lucid-yolo export`")
    parser.add_argument("image", help="an image file")
    parser.add_argument("--conf", type=float, default=0.25, help="score threshold (0.25)")
    parser.add_argument("--draw", default=None, help="write the image with its boxes here")
    args = parser.parse_args()
    session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    bgr = cv2.imread(args.image, cv2.IMREAD_COLOR)
    if bgr is None:
        raise SystemExit(f"{args.image!r}: cannot read the image")
    found = detect(session, bgr, args.conf)
    for detection in found:
        print(json.dumps(detection))
    if not found:
        print(f"no detection with a score of {args.conf} or more", file=sys.stderr)
    if args.draw:
        for detection in found:
            x1, y1, x2, y2 = (round(v) for v in detection["box"])
            cv2.rectangle(bgr, (x1, y1), (x2, y2), (0, 200, 255), 1)
        cv2.imwrite(args.draw, bgr)


if __name__ == "__main__":
    main()
