"""lucid_yolo.models: YOLO26-class networks in plain PyTorch."""

from lucid_yolo.models import outputs
from lucid_yolo.models.anchors import distances_to_xyxy, make_anchors, xyxy_to_distances

__all__ = [
    # anchors
    "distances_to_xyxy",
    "make_anchors",
    "xyxy_to_distances",
    # output contract
    "outputs",
]
