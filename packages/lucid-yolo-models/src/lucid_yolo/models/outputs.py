"""The raw-output contract between the networks and everything downstream.

Every YOLO26 network returns a flat ``dict[str, Tensor]`` of raw predictions (no activation, no
decoding) so that the replay binding can split it into prediction groups and the losses, decoders
and exporters can read it without knowing which task produced it. Keys are ``<branch>.<name>``:
``o2m`` is the one-to-many branch (dense training signal, NMS path), ``o2o`` the one-to-one branch
(end-to-end, NMS-free). Tensors that are shared by both branches have no prefix.

Shapes use ``B`` batch, ``A`` anchors over all levels (P3, P4, P5 concatenated in that order,
row-major within a level), ``C`` classes, ``K`` keypoints, ``M`` mask prototypes.

==================  =================  ==========================================================
key                 shape              meaning
==================  =================  ==========================================================
``o2m.box``         (B, 4, A)          edge distances (left, top, right, bottom) in stride units
``o2m.cls``         (B, C, A)          class logits
``o2o.box``         (B, 4, A)          as ``o2m.box``, one-to-one branch
``o2o.cls``         (B, C, A)          as ``o2m.cls``, one-to-one branch
``o2m.mask_coef``   (B, M, A)          segment: prototype coefficients
``o2o.mask_coef``   (B, M, A)          segment
``protos``          (B, M, H/4, W/4)   segment: mask prototypes
``semantic``        (B, C, H/8, W/8)   segment, training mode only: semantic-segmentation logits
``o2m.kpt``         (B, K*3, A)        pose: per keypoint (dx, dy, visibility logit), stride units
``o2m.kpt_scale``   (B, K*2, A)        pose: per keypoint log-scale of the Laplace density (x, y)
``o2o.kpt``         (B, K*3, A)        pose
``o2o.kpt_scale``   (B, K*2, A)        pose
``o2m.angle``       (B, 1, A)          obb: rotation, radians (any real number)
``o2o.angle``       (B, 1, A)          obb
==================  =================  ==========================================================

Decoding (see :mod:`lucid_yolo.models.decode`): anchor points sit at cell centres
``(i + 0.5, j + 0.5)`` in stride units; a box is ``(ax - l, ay - t, ax + r, ay + b) * stride``
(``xyxy`` pixels) with the raw distances used as they are; a keypoint is ``(a + d) * stride``;
an OBB angle is the raw output in radians (no squashing, the convention of the Ultralytics YOLO26
OBB head, so imported weights decode the same boxes; the decoder brings it into the long-edge range
``[-pi/4, 3pi/4)``) and its ``(l, t, r, b)`` distances are measured in the box's rotated frame.
"""

from __future__ import annotations

from typing import Final

O2M: Final = "o2m"
O2O: Final = "o2o"
BRANCHES: Final = (O2M, O2O)

BOX: Final = "box"
CLS: Final = "cls"
MASK_COEF: Final = "mask_coef"
KPT: Final = "kpt"
KPT_SCALE: Final = "kpt_scale"
ANGLE: Final = "angle"

PROTOS: Final = "protos"
SEMANTIC: Final = "semantic"


def branch_key(branch: str, name: str) -> str:
    """Return the output key of ``name`` in ``branch`` (``"o2m"`` or ``"o2o"``)."""
    if branch not in BRANCHES:
        raise ValueError(f"unknown branch {branch!r}: expected one of {BRANCHES!r}")
    return f"{branch}.{name}"


__all__ = [
    "ANGLE",
    "BOX",
    "BRANCHES",
    "CLS",
    "KPT",
    "KPT_SCALE",
    "MASK_COEF",
    "O2M",
    "O2O",
    "PROTOS",
    "SEMANTIC",
    "branch_key",
]
