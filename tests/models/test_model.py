"""The YOLO26 network: output contract, gradients, modes and layouts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from lucid_yolo.models import TASKS, YOLO26, ModelConfigError, create_model, outputs
from lucid_yolo.models.registry import TASK_SUFFIXES
from lucid_yolo.models.scales import SCALES

IMAGE_SIZE = 64
NUM_ANCHORS = 8 * 8 + 4 * 4 + 2 * 2


def expected_shapes(task: str, C: int, K: int = 17, M: int = 32) -> dict[str, tuple[int, ...]]:
    B, A, S = 2, NUM_ANCHORS, IMAGE_SIZE
    per_branch: dict[str, tuple[int, ...]] = {"box": (B, 4, A), "cls": (B, C, A)}
    shared: dict[str, tuple[int, ...]] = {}
    if task == "segment":
        per_branch["mask_coef"] = (B, M, A)
        shared = {"protos": (B, M, S // 4, S // 4), "semantic": (B, C, S // 8, S // 8)}
    elif task == "pose":
        per_branch |= {"kpt": (B, 3 * K, A), "kpt_scale": (B, 2 * K, A)}
    elif task == "obb":
        per_branch["angle"] = (B, 1, A)
    result = {outputs.branch_key(b, k): v for b in outputs.BRANCHES for k, v in per_branch.items()}
    return result | shared


@pytest.mark.parametrize("task", TASKS)
def test_yolo26_forward_backward_match_output_contract(task: str, images: Tensor) -> None:
    model = create_model(f"yolo26n{TASK_SUFFIXES[task]}", num_classes=3)
    result = model(images)
    assert {k: tuple(v.shape) for k, v in result.items()} == expected_shapes(task, 3)
    torch.stack([t.float().square().mean() for t in result.values()]).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert missing == []


@pytest.mark.parametrize("scale", ["s", "m", "l", "x"])
@pytest.mark.parametrize("task", TASKS)
def test_yolo26_larger_scales_match_output_contract(task: str, scale: str) -> None:
    # Shapes only (meta device): the larger scales share the nano code paths, and running their
    # numerics on the CPU runner would cost most of the suite's time budget. Meta tensors have
    # no values, so any .item(), nonzero or value-dependent branch would raise here: the
    # training forward is free of host syncs.
    with torch.device("meta"):
        model = create_model(f"yolo26{scale}{TASK_SUFFIXES[task]}", num_classes=3, seed=None)
        result = model(torch.empty(2, 3, IMAGE_SIZE, IMAGE_SIZE))
    assert {k: tuple(v.shape) for k, v in result.items()} == expected_shapes(task, 3)
    torch.stack([t.float().square().mean() for t in result.values()]).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_yolo26_o2o_loss_trains_only_its_head(images: Tensor) -> None:
    model = create_model("yolo26n", num_classes=3)
    result = model(images)
    (result["o2o.box"].sum() + result["o2o.cls"].sum()).backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None}
    assert with_grad
    assert all(n.startswith("head.o2o.") for n in with_grad)


def test_yolo26_eval_drops_semantic_output(images: Tensor) -> None:
    model = create_model("yolo26n-seg", num_classes=3).eval()
    with torch.no_grad():
        result = model(images)
    assert outputs.SEMANTIC not in result
    assert outputs.PROTOS in result


def test_yolo26_channels_last_matches_contiguous(
    images: Tensor, calibrate: Callable[[nn.Module], nn.Module]
) -> None:
    images = images[:, :, :32, :32]
    model = calibrate(create_model("yolo26n-pose", num_classes=2))
    with torch.no_grad():
        reference = model(images)
        model = model.to(memory_format=torch.channels_last)
        result = model(images.contiguous(memory_format=torch.channels_last))
    for key, tensor in reference.items():
        torch.testing.assert_close(result[key], tensor, rtol=1e-4, atol=1e-4)


def test_yolo26_pose_keypoint_count_is_configurable(images: Tensor) -> None:
    model = create_model("yolo26n-pose", num_classes=1, kpt_shape=(5, 3))
    result = model(images)
    assert result["o2m.kpt"].shape == (2, 15, NUM_ANCHORS)
    assert result["o2o.kpt_scale"].shape == (2, 10, NUM_ANCHORS)


def test_yolo26_class_bias_prior_is_small_probability() -> None:
    model = create_model("yolo26n", num_classes=80)
    probabilities = model(torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE))["o2o.cls"].sigmoid()
    assert probabilities.max() < 0.05


def test_yolo26_strides() -> None:
    assert create_model("yolo26n").strides == (8, 16, 32)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_classes": 0}, "num_classes=0"),
        ({"kpt_shape": (17, 2)}, r"kpt_shape=\(17, 2\)"),
        ({"num_masks": 0}, "num_masks=0"),
    ],
)
def test_yolo26_rejects_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ModelConfigError, match=match):
        YOLO26("pose", SCALES["n"], **kwargs)  # type: ignore[arg-type]


def test_yolo26_rejects_unknown_task() -> None:
    with pytest.raises(ModelConfigError, match="unknown task 'classify'"):
        YOLO26("classify", SCALES["n"])  # type: ignore[arg-type]
