"""The naming rule between lucid-yolo and Ultralytics YOLO26 state dicts."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.models import create_model, list_models
from lucid_yolo.models.weights import layer_prefixes, reference_names


def _meta(name: str, **kwargs: object) -> object:
    with torch.device("meta"):
        return create_model(name, seed=None, **kwargs)  # type: ignore[arg-type]


def test_layer_prefixes_skip_the_parameter_free_reference_layers() -> None:
    prefixes, head = layer_prefixes(create_model("yolo26n", seed=None))
    indices = sorted(int(p.split(".")[1]) for p in prefixes.values())
    assert indices == [i for i in range(23) if i not in (11, 12, 14, 15, 18, 21)]
    assert prefixes["neck.bottom_up5"] == "model.22"
    assert head == 23


@pytest.mark.parametrize(
    ("ours", "reference"),
    [
        ("backbone.stem.0.conv.weight", "model.0.conv.weight"),
        ("backbone.stage5.3.m.0.attn.qkv.conv.weight", "model.10.m.0.attn.qkv.conv.weight"),
        ("neck.top_down4.m.0.cv3.conv.weight", "model.13.m.0.cv3.conv.weight"),
        ("head.o2m.box.out.2.box.bias", "model.23.cv2.2.2.bias"),
        ("head.o2o.cls.trunk.1.2.conv.weight", "model.23.one2one_cv3.1.1.0.conv.weight"),
        ("head.o2o.cls.out.0.cls.weight", "model.23.one2one_cv3.0.2.weight"),
    ],
)
def test_reference_names_detect(ours: str, reference: str) -> None:
    names = reference_names(create_model("yolo26n", seed=None))  # type: ignore[arg-type]
    assert names[ours] == reference


def test_reference_names_pose_outputs_are_the_keypoint_and_sigma_convs() -> None:
    names = reference_names(create_model("yolo26n-pose", kpt_shape=(4, 3), seed=None))
    assert names["head.o2o.kpt.out.1.kpt.weight"] == "model.23.one2one_cv4_kpts.1.weight"
    assert names["head.o2o.kpt.out.1.kpt_scale.weight"] == "model.23.one2one_cv4_sigma.1.weight"


def test_reference_names_segment_prototypes() -> None:
    names = reference_names(create_model("yolo26n-seg", seed=None))
    assert names["protos.refine.1.conv.weight"] == "model.23.proto.feat_refine.1.conv.weight"
    assert names["protos.semantic.2.bias"] == "model.23.proto.semseg.2.bias"


@pytest.mark.parametrize("name", list_models())
def test_reference_names_are_distinct_for_every_model(name: str) -> None:
    names = reference_names(_meta(name))  # type: ignore[arg-type]
    assert len(set(names.values())) == len(names)
