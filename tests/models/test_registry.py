"""The model registry and the create_model entry point."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.models import UnknownModelError, create_model, list_models, model_spec


def test_list_models_holds_every_task_and_scale() -> None:
    names = list_models()
    assert len(names) == 20
    assert {"yolo26n", "yolo26s-seg", "yolo26m-pose", "yolo26x-obb"} <= set(names)


def test_model_spec_obb_uses_1024_px() -> None:
    spec = model_spec("yolo26l-obb")
    assert (spec.task, spec.scale.name, spec.image_size) == ("obb", "l", 1024)


def test_create_model_unknown_name_suggests_close_match() -> None:
    with pytest.raises(UnknownModelError, match="did you mean 'yolo26n-seg'"):
        create_model("yolo26n-segm")


def test_create_model_unknown_name_without_match_lists_pattern() -> None:
    with pytest.raises(UnknownModelError, match="see list_models"):
        create_model("resnet50")


def test_create_model_same_seed_same_weights() -> None:
    first = create_model("yolo26n", num_classes=3, seed=7).state_dict()
    second = create_model("yolo26n", num_classes=3, seed=7).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_create_model_other_seed_other_weights() -> None:
    first = create_model("yolo26n", num_classes=3, seed=1).state_dict()
    second = create_model("yolo26n", num_classes=3, seed=2).state_dict()
    key = "backbone.stem.0.conv.weight"
    assert not torch.equal(first[key], second[key])


def test_create_model_leaves_global_rng_untouched() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    create_model("yolo26n", seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_create_model_o2o_head_starts_as_copy_of_o2m() -> None:
    model = create_model("yolo26n-obb", num_classes=2)
    for (name, p_o2m), (_, p_o2o) in zip(
        model.head.o2m.named_parameters(), model.head.o2o.named_parameters(), strict=True
    ):
        assert torch.equal(p_o2m, p_o2o), name
