"""Parameter and FLOP counts against the published YOLO26 table."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from lucid_yolo.models import ModelConfigError, create_model, model_spec, model_summary

# name: (params M, GFLOPs) of the published inference models; OBB at 1024 px, others at 640 px.
PUBLISHED = {
    "yolo26n": (2.4, 5.4),
    "yolo26s": (9.5, 20.7),
    "yolo26m": (20.4, 68.2),
    "yolo26l": (24.8, 86.4),
    "yolo26x": (55.7, 193.9),
    "yolo26n-seg": (2.7, 9.3),
    "yolo26s-seg": (10.4, 34.5),
    "yolo26m-seg": (23.6, 121.7),
    "yolo26l-seg": (28.0, 140.1),
    "yolo26x-seg": (62.8, 314.0),
    "yolo26n-pose": (2.9, 7.5),
    "yolo26s-pose": (10.4, 23.9),
    "yolo26m-pose": (21.5, 73.1),
    "yolo26l-pose": (25.9, 91.3),
    "yolo26x-pose": (57.6, 201.7),
    "yolo26n-obb": (2.4, 14.8),
    "yolo26s-obb": (9.8, 56.7),
    "yolo26m-obb": (21.2, 184.9),
    "yolo26l-obb": (25.6, 232.4),
    "yolo26x-obb": (57.6, 520.1),
}
# The published tables were measured on COCO (80 classes), COCO-pose (1) and DOTA (15).
DATASET_CLASSES = {"detect": 80, "segment": 80, "pose": 1, "obb": 15}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_model_summary_matches_published_table(name: str) -> None:
    spec = model_spec(name)
    with torch.device("meta"):
        model = create_model(name, num_classes=DATASET_CLASSES[spec.task], seed=None)
    summary = model_summary(model, spec.image_size)
    params, gflops = PUBLISHED[name]
    assert summary.infer_params / 1e6 == pytest.approx(params, rel=0.03)
    assert summary.infer_gflops == pytest.approx(gflops, rel=0.03)


@pytest.mark.parametrize(
    ("name", "params"),
    [("yolo26n-seg", 3_126_280), ("yolo26x-seg", 70_693_800), ("yolo26n-obb", 2_715_614)],
)
def test_model_summary_training_params_match_published_build(name: str, params: int) -> None:
    # Published build logs of the 80-class training models give exact totals.
    with torch.device("meta"):
        model = create_model(name, seed=None)
    assert model_summary(model, 640).train_params == params


def test_model_summary_flops_agree_with_torch_flop_counter() -> None:
    model = create_model("yolo26n-seg", num_classes=3)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.zeros(1, 3, 96, 96))
    summary = model_summary(model, 96)
    assert summary.train_gflops == pytest.approx(counter.get_total_flops() / 1e9, rel=1e-9)


@pytest.mark.parametrize("name", ["yolo26n", "yolo26n-seg", "yolo26n-pose", "yolo26n-obb"])
def test_model_summary_scaled_count_equals_full_size_forward(name: str) -> None:
    # the summary counts at 32 px and scales; a full-size forward on the meta device is the truth
    size = model_spec(name).image_size
    with torch.device("meta"):
        model = create_model(name, num_classes=7, seed=None)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.empty(1, 3, size, size, device="meta"))
    summary = model_summary(model, size)
    assert summary.train_gflops == pytest.approx(counter.get_total_flops() / 1e9, rel=1e-9)


def test_model_summary_rejects_size_off_the_stride_grid() -> None:
    with pytest.raises(ModelConfigError, match=r"image_size=600 is not a positive multiple of 32"):
        model_summary(create_model("yolo26n"), 600)


def test_model_summary_inference_drops_o2m_head_and_semantic() -> None:
    summary = model_summary(create_model("yolo26n-seg"), 640)
    dropped = {row.name for row in summary.layers if row.training_only}
    assert dropped == {"head.o2m.box", "head.o2m.cls", "head.o2m.mask_coef", "protos.semantic"}
    assert summary.infer_params < summary.train_params


def test_model_summary_leaves_model_on_its_device() -> None:
    model = create_model("yolo26n")
    model_summary(model, 64)
    assert next(model.parameters()).device.type == "cpu"


def test_model_summary_leaves_weights_and_batchnorm_statistics_unchanged() -> None:
    model = create_model("yolo26n").train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model_summary(model, 64)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_model_summary_puts_every_module_mode_back_and_keeps_no_hook() -> None:
    model = create_model("yolo26n-seg").eval()
    model.head.o2m.train()  # a mixed state: only the one-to-many head in training mode
    modes = [m.training for m in model.modules()]
    hooks = [len(m._forward_hooks) for m in model.modules()]
    summary = model_summary(model, 64)
    assert [m.training for m in model.modules()] == modes
    assert [len(m._forward_hooks) for m in model.modules()] == hooks
    # counted in training mode whatever the mode it came in: the o2m head is counted
    assert model_summary(model.train(), 64) == summary


def test_model_summary_counts_on_one_cpu_thread_and_puts_the_count_back() -> None:
    model = create_model("yolo26n", num_classes=80)
    threads: list[int] = []
    # the summary's forward is the model's own (its weights swapped), so the model's hook fires
    model.register_forward_hook(lambda *_: threads.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model_summary(model, 640)
        assert threads == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_model_summary_format_reports_both_counts() -> None:
    text = model_summary(create_model("yolo26n"), 640).format()
    assert "training:" in text
    assert "inference: 2,4" in text
    assert "backbone.stage5" in text


@pytest.mark.gpu
def test_model_summary_of_a_cuda_model_equals_the_cpu_models() -> None:
    model = create_model("yolo26n-seg", num_classes=3)
    on_cpu = model_summary(model, 640)
    assert model_summary(model.cuda(), 640) == on_cpu
