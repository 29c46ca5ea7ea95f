"""Importing Ultralytics YOLO26 checkpoints: identification, bitwise eval outputs, mismatches."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from lucid_yolo.models import YOLO26, WeightsError, create_model, load_weights, read_weights
from lucid_yolo.models.decode import decode_dense, topk_dense
from lucid_yolo.models.geometry import normalize_xywhr
from lucid_yolo.models.weights import CLASS_DEPENDENT_PREFIXES

FIXTURES = Path(__file__).parent.parent / "fixtures"
TOOLS = Path(__file__).resolve().parents[3] / "tools"
FIXTURE_THREADS = 1
"""Intra-op threads the fixture outputs were computed with (tools/make_ultralytics_fixture.py):
CPU kernels split reductions by thread count, so bits match only at the same count."""


@pytest.fixture(autouse=True)
def fixture_threads() -> Iterator[None]:
    saved = torch.get_num_threads()
    torch.set_num_threads(FIXTURE_THREADS)
    yield
    torch.set_num_threads(saved)


TASKS = ("detect", "segment", "pose", "obb")


def _checkpoint(task: str) -> Path:
    return FIXTURES / f"ultralytics-{task}.pt"


def _imported(task: str) -> YOLO26:
    weights = read_weights(_checkpoint(task))
    model = weights.build()
    load_weights(model, weights)
    return model.eval()


def _references(task: str) -> dict[str, dict[str, torch.Tensor]]:
    """Every recorded set of the reference's eval outputs, by file: one per CPU they were
    computed on, since another vector unit rounds differently in the last bit
    (tools/make_ultralytics_fixture.py, ``--outputs-for``). Same checkpoint, same images."""
    paths = sorted(FIXTURES.glob(f"ultralytics-{task}.eval*.pt"))
    return {path.name: torch.load(path) for path in paths}


def _images(task: str) -> torch.Tensor:
    return torch.load(FIXTURES / f"ultralytics-{task}.eval.pt")["images"].float() / 255


def _raw_keys(reference: dict[str, torch.Tensor]) -> list[str]:
    return [key for key in reference if key not in ("images", "decoded")]


def _reference_of_this_cpu(task: str, outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The recorded set whose raw outputs ``outputs`` equal, bit for bit; none fails the test
    with each set's first differing key."""
    differing: dict[str, str] = {}
    for name, reference in _references(task).items():
        keys = _raw_keys(reference)
        assert len(keys) >= 4
        mismatch = [key for key in keys if not torch.equal(outputs[key], reference[key])]
        if not mismatch:
            return reference
        differing[name] = mismatch[0]
    pytest.fail(
        f"{task}: the imported outputs equal no recorded reference bit for bit (first differing "
        f"key per file: {differing}); on a CPU none was recorded on, record its set with "
        f"tools/make_ultralytics_fixture.py --outputs-for NAME, which runs the reference itself"
    )


def test_read_weights_takes_the_network_description_from_the_file() -> None:
    weights = read_weights(_checkpoint("pose"))
    assert (weights.task, weights.num_classes, weights.kpt_shape) == ("pose", 1, (4, 3))
    assert (weights.scale.depth, weights.scale.width, weights.scale.max_channels) == (
        0.5,
        0.0625,
        256,
    )


def test_read_weights_segment_prototype_count() -> None:
    assert read_weights(_checkpoint("segment")).num_masks == 8


def test_read_weights_pose_ignores_the_reference_flow() -> None:
    weights = read_weights(_checkpoint("pose"))
    assert weights.dropped
    assert all(".flow_model." in name for name in weights.dropped)


def test_read_weights_checkpoint_the_trainer_saved_mid_run() -> None:
    # The network only under "ema" ("model" is None), beside the optimizer state, the training
    # arguments and the results table (tools/make_ultralytics_fixture.py, write_trained).
    weights = read_weights(FIXTURES / "ultralytics-detect-trained.pt")
    assert (weights.task, weights.num_classes) == ("detect", 5)
    assert weights.class_names == ("circle", "square", "triangle", "star", "hexagon")
    model = weights.build()
    report = load_weights(model, weights)
    assert (report.loaded, report.dropped) == (len(model.state_dict()), ())


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.usefixtures("deterministic")
@pytest.mark.parametrize("scale", ["l", "x"])
def test_imported_large_pose_bitwise_equal_reference_on_cuda(
    scale: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pose l and x: their head became two output convs after their last comparison on CUDA.
    # The 20-variant tool's own check, at its GPU input size; Ultralytics is the peer carried
    # on the GPU machine, never a dependency.
    pytest.importorskip("ultralytics")
    monkeypatch.syspath_prepend(str(TOOLS))
    check = importlib.import_module("check_ultralytics_import")
    args = argparse.Namespace(device="cuda", imgsz=640, batch=2)
    row = check.check_variant("pose", scale, args, tmp_path)
    assert row["bitwise"], row["detail"]
    assert row["decoded_bitwise"]


def test_read_weights_carries_class_names() -> None:
    assert read_weights(_checkpoint("detect")).class_names == ("0", "1", "2")


@pytest.mark.parametrize("task", TASKS)
def test_imported_eval_outputs_bitwise_equal_reference(task: str) -> None:
    with torch.no_grad():
        outputs = _imported(task)(_images(task))
    reference = _reference_of_this_cpu(task, outputs)
    assert set(_raw_keys(reference)) <= set(outputs)


def test_recorded_reference_sets_differ_only_in_last_bits() -> None:
    # What makes several sets sound: the same checkpoint and images, outputs a rounding apart
    for task in TASKS:
        sets = list(_references(task).values())
        for other in sets[1:]:
            assert torch.equal(other["images"], sets[0]["images"])
            for key in _raw_keys(sets[0]):
                torch.testing.assert_close(other[key], sets[0][key], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("task", TASKS)
def test_imported_detections_bitwise_equal_reference(task: str) -> None:
    images = _images(task)
    with torch.no_grad():
        outputs = _imported(task)(images)
    # (B, k, 6 + extra): box, score, class, task values
    decoded = _reference_of_this_cpu(task, outputs)["decoded"]
    top = topk_dense(decode_dense(outputs, (images.shape[2], images.shape[3])), decoded.shape[1])
    assert torch.equal(top["scores"], decoded[..., 4])
    assert torch.equal(top["classes"].to(decoded.dtype), decoded[..., 5])
    if task == "obb":  # the reference keeps the raw angle; the decoder regularizes it
        rboxes = normalize_xywhr(torch.cat((decoded[..., :4], decoded[..., 6:7]), dim=-1))
        assert torch.equal(top["rboxes"], rboxes)
    else:
        assert torch.equal(top["boxes"], decoded[..., :4])
    if task == "pose":
        keypoints = decoded[..., 6:].reshape(*decoded.shape[:2], 4, 3)
        assert torch.equal(top["keypoints"], keypoints)


def test_load_weights_refuses_another_task_naming_both() -> None:
    weights = read_weights(_checkpoint("detect"))
    model = YOLO26("obb", weights.scale, num_classes=3)
    with pytest.raises(WeightsError, match=r"holds a yolo26 at .* but the model is yolo26-obb"):
        load_weights(model, weights)


def test_load_weights_refuses_another_scale_naming_both() -> None:
    weights = read_weights(_checkpoint("detect"))
    with pytest.raises(WeightsError, match=r"custom scale .* but the model is yolo26n;"):
        load_weights(create_model("yolo26n", num_classes=3), weights)


def test_load_weights_other_class_count_keeps_all_but_class_tensors() -> None:
    weights = read_weights(_checkpoint("detect"))
    model = YOLO26("detect", weights.scale, num_classes=5)
    report = load_weights(model, weights)
    assert report.reinitialised
    assert all(name.startswith(CLASS_DEPENDENT_PREFIXES) for name in report.reinitialised)
    state = model.state_dict()
    kept = [key for key in state if key not in report.reinitialised]
    assert len(kept) == report.loaded
    for key in kept:
        assert torch.equal(state[key], weights.tensors[key].to(state[key].dtype)), key
    assert "the file has 3 classes and the model 5" in report.summary()


def test_read_weights_missing_file() -> None:
    with pytest.raises(WeightsError, match=r"'nowhere\.pt' does not exist"):
        read_weights("nowhere.pt")


def test_read_weights_foreign_state_dict(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"encoder.weight": torch.zeros(3, 3)}, path)
    with pytest.raises(WeightsError, match="no class output conv"):
        read_weights(path)


def test_read_weights_lucid_yolo_state_dict(tmp_path: Path) -> None:
    model = create_model("yolo26n-obb", num_classes=2, seed=3)
    path = tmp_path / "ours.pt"
    torch.save(model.state_dict(), path)
    weights = read_weights(path)
    assert (weights.model_name, weights.num_classes) == ("yolo26n-obb", 2)
    assert all(torch.equal(weights.tensors[k], v) for k, v in model.state_dict().items())
