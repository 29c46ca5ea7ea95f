"""DevicePixels: batches whose pixel passes were left to the device equal the CPU path's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lucid_yolo.replay import ReplayPool
from lucid_yolo.train.data.augment import AugmentConfig, DevicePixels, HsvTables, hsv_on_device
from lucid_yolo.train.data.augment.device_pixels import TABLE_PIXELS
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.collate import collate
from lucid_yolo.train.data.dataset import YoloDataset
from lucid_yolo.train.data.dataset_yaml import Task, load_dataset_yaml
from lucid_yolo.train.data.formats.ultralytics import load_split
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.exceptions import TrainConfigError

IMGSZ = 96
IMAGE_PIXELS = IMGSZ * IMGSZ + TABLE_PIXELS
"""What one image counts towards ``chunk_pixels`` (its pixels and its channel tables)."""
ITEMS = [(epoch, index) for epoch in range(2) for index in range(6)]


def _pair(root: Path, task: Task, augment: AugmentConfig) -> tuple[YoloDataset, YoloDataset]:
    """The same training set twice: pixels finished in the worker, and left to the device."""
    spec = load_dataset_yaml(
        generate_synthetic(root, task=task, num_train=6, num_val=0, imgsz=IMGSZ, max_objects=4)
    )
    k = 0 if spec.kpt_shape is None else spec.kpt_shape[0]
    options = {
        "task": task,
        "imgsz": IMGSZ,
        "augment": augment,
        "max_instances": 40,
        "num_keypoints": k,
        "flip_idx": spec.flip_idx,
    }
    labels = load_split(spec, "train")
    cpu = YoloDataset(labels, **options)  # type: ignore[arg-type]
    return cpu, YoloDataset(labels, defer_pixels=True, **options)  # type: ignore[arg-type]


def _assert_batches_equal(actual: Batch, expected: Batch) -> None:
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        assert isinstance(value, torch.Tensor), key
        assert torch.equal(actual[key], value), key  # type: ignore[literal-required]


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_device_pixels_batch_equals_the_cpu_batch(tmp_path: Path, task: Task) -> None:
    cpu, deferred = _pair(tmp_path, task, AugmentConfig(mixup=0.3))
    batch = collate([deferred[item] for item in ITEMS])
    assert batch["deferred_flip"].any()
    assert not batch["deferred_flip"].all()
    _assert_batches_equal(DevicePixels()(batch), collate([cpu[item] for item in ITEMS]))


def test_device_pixels_labels_flip_in_the_worker(tmp_path: Path) -> None:
    cpu, deferred = _pair(tmp_path, "detect", AugmentConfig())
    flipped = [item for item in ITEMS if deferred[item].deferred_flip]
    assert flipped
    for item in flipped:
        assert (deferred[item].boxes == cpu[item].boxes).all()
        assert not (deferred[item].image == cpu[item].image).all()


@pytest.mark.parametrize("images_per_chunk", [1, 5])
def test_device_pixels_in_chunks_equal_the_whole_batch_bitwise(
    tmp_path: Path, images_per_chunk: int
) -> None:
    _, deferred = _pair(tmp_path, "detect", AugmentConfig())
    batch = collate([deferred[item] for item in ITEMS])
    images, gains, flips = batch["images"], batch["deferred_hsv"], batch["deferred_flip"]
    jittered = hsv_on_device(images, gains, HsvTables.on(images.device))
    whole = torch.where(flips[:, None, None, None], jittered.flip(-1), jittered)
    pixels = DevicePixels(chunk_pixels=images_per_chunk * IMAGE_PIXELS)
    assert torch.equal(pixels(batch)["images"], whole)


@pytest.mark.parametrize("images_per_chunk", [1, 3])
def test_device_pixels_flips_alone_in_chunks_mirror_each_drawn_image(
    tmp_path: Path, images_per_chunk: int
) -> None:
    _, deferred = _pair(tmp_path, "detect", AugmentConfig(hsv_h=0, hsv_s=0, hsv_v=0))
    batch = collate([deferred[item] for item in ITEMS])
    images, flips = batch["images"].clone(), batch["deferred_flip"]
    assert flips.any()
    assert not flips.all()
    mirrored = torch.where(flips[:, None, None, None], images.flip(-1), images)
    pixels = DevicePixels(chunk_pixels=images_per_chunk * IMAGE_PIXELS)
    assert torch.equal(pixels(batch)["images"], mirrored)


def test_device_pixels_finish_the_images_in_place(tmp_path: Path) -> None:
    _, deferred = _pair(tmp_path, "detect", AugmentConfig())
    batch = collate([deferred[item] for item in ITEMS])
    images = batch["images"]
    assert DevicePixels()(batch)["images"] is images


def test_device_pixels_reject_an_empty_chunk() -> None:
    with pytest.raises(TrainConfigError, match=r"chunk_pixels=0 must be at least 1"):
        DevicePixels(chunk_pixels=0)


def test_device_pixels_without_hsv_flips_only(tmp_path: Path) -> None:
    cpu, deferred = _pair(tmp_path, "detect", AugmentConfig(hsv_h=0, hsv_s=0, hsv_v=0))
    batch = collate([deferred[item] for item in ITEMS])
    assert "deferred_hsv" not in batch
    assert batch["deferred_flip"].any()
    assert not batch["deferred_flip"].all()
    _assert_batches_equal(DevicePixels()(batch), collate([cpu[item] for item in ITEMS]))


def test_device_pixels_segment_masks_travel_bit_packed(tmp_path: Path) -> None:
    _, deferred = _pair(tmp_path, "segment", AugmentConfig())
    batch = collate([deferred[item] for item in ITEMS])
    assert "masks" not in batch
    assert batch["deferred_masks"].shape == (len(ITEMS), 40, IMGSZ // 4, IMGSZ // 32)


def test_device_pixels_unpack_masks_of_any_width() -> None:
    masks = np.random.default_rng(0).integers(0, 2, (2, 3, 13, 13), dtype=np.uint8)
    batch = Batch(  # type: ignore[typeddict-item]
        images=torch.zeros((2, 3, 52, 52), dtype=torch.uint8),
        deferred_masks=torch.from_numpy(np.packbits(masks, axis=-1)),
    )
    assert torch.equal(DevicePixels()(batch)["masks"], torch.from_numpy(masks))


def test_device_pixels_leave_a_finished_batch_untouched(tmp_path: Path) -> None:
    cpu, _ = _pair(tmp_path, "detect", AugmentConfig())
    batch = collate([cpu[item] for item in ITEMS])
    images = batch["images"]
    assert DevicePixels()(batch)["images"] is images


@pytest.mark.gpu
def test_device_pixels_on_cuda_equal_the_cpu_batch(tmp_path: Path) -> None:
    cpu, deferred = _pair(tmp_path, "segment", AugmentConfig())
    batch = collate([deferred[item] for item in ITEMS])
    on_device = Batch(**{k: v.cuda() for k, v in batch.items()})  # type: ignore[typeddict-item]
    finished = DevicePixels()(on_device)
    _assert_batches_equal(
        Batch(**{k: v.cpu() for k, v in finished.items()}),  # type: ignore[typeddict-item]
        collate([cpu[item] for item in ITEMS]),
    )


@pytest.mark.gpu
def test_device_pixels_on_cuda_hold_a_chunk_not_the_batch() -> None:
    # whole-batch HSV and flips held about 13x the batch's bytes (docs: replay-memory.md)
    def deferred(size: int) -> Batch:
        rng = np.random.default_rng(size)
        return Batch(  # type: ignore[typeddict-item]
            images=torch.from_numpy(rng.integers(0, 256, (size, 3, 640, 640), np.uint8)).cuda(),
            deferred_hsv=torch.from_numpy(rng.uniform(0.5, 1.5, (size, 3))).cuda(),
            deferred_flip=torch.from_numpy(rng.random(size) < 0.5).cuda(),
        )

    pixels = DevicePixels(chunk_pixels=2 * 640 * 640)
    pixels(deferred(1))  # builds the tables
    batch = deferred(8)
    images = batch["images"]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    pixels(batch)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - before < 4 * images.nbytes


def test_device_pixels_on_the_cpu_never_replay(tmp_path: Path) -> None:
    cpu, deferred = _pair(tmp_path, "detect", AugmentConfig())
    pixels = DevicePixels(replay=True)
    for _ in range(3):
        batch = collate([deferred[item] for item in ITEMS])
        _assert_batches_equal(pixels(batch), collate([cpu[item] for item in ITEMS]))
    assert (pixels.telemetry.recordings, pixels.telemetry.replays) == (0, 0)


def _deferred_cuda(size: int, seed: int, *, gains: bool = True) -> Batch:
    rng = np.random.default_rng(seed)
    batch = Batch(  # type: ignore[typeddict-item]
        images=torch.from_numpy(rng.integers(0, 256, (size, 3, 64, 96), np.uint8)).cuda(),
        deferred_flip=torch.from_numpy(rng.random(size) < 0.5).cuda(),
    )
    if gains:
        batch["deferred_hsv"] = torch.from_numpy(rng.uniform(0.5, 1.5, (size, 3))).cuda()
    return batch


@pytest.mark.gpu
@pytest.mark.parametrize("images_per_chunk", [2, 10])
@pytest.mark.parametrize("gains", [True, False])
def test_device_pixels_replayed_equal_the_eager_pass_bitwise(
    images_per_chunk: int, gains: bool
) -> None:
    chunk_pixels = images_per_chunk * 64 * 96
    replayed = DevicePixels(chunk_pixels, replay=True)
    eager = DevicePixels(chunk_pixels, replay=False)
    for seed in range(5):
        batch = _deferred_cuda(5, seed, gains=gains)
        images = batch["images"]
        expected = eager(_deferred_cuda(5, seed, gains=gains))["images"]
        finished = replayed(batch)["images"]
        assert finished is images  # finished in place, as the eager pass does
        assert torch.equal(finished, expected), seed
    telemetry = replayed.telemetry
    # the shape's first batch runs eagerly, the second records, then each replays
    assert (telemetry.recordings, telemetry.replays) == (1, 4)
    assert eager.telemetry.recordings == 0


@pytest.mark.gpu
def test_device_pixels_replay_a_graph_per_shape_chunk_and_kind_of_batch() -> None:
    replayed, eager = DevicePixels(replay=True), DevicePixels()
    # (images, HSV gains or flips only, images a chunk holds)
    plan = [(5, True, 10), (3, True, 10), (5, False, 10), (5, True, 10), (3, True, 10)]
    plan += [(5, False, 10), (5, True, 10), (3, False, 10), (5, True, 2), (5, True, 2)]
    for seed, (size, gains, per_chunk) in enumerate(plan):
        replayed.chunk_pixels = eager.chunk_pixels = per_chunk * 64 * 96
        expected = eager(_deferred_cuda(size, seed, gains=gains))["images"]
        finished = replayed(_deferred_cuda(size, seed, gains=gains))["images"]
        assert torch.equal(finished, expected), seed
    telemetry = replayed.telemetry.as_dict()
    # each kind's first batch runs eagerly, its second records and replays, later ones replay
    assert (telemetry["recordings"], telemetry["replays"]) == (4, 5), telemetry
    assert telemetry["native.warm-up"] == 5, telemetry
    assert telemetry["retirements"] == 0, telemetry
    replayed.replay = False  # the graphs and their pools are let go
    assert replayed.telemetry.as_dict()["recordings"] == 0


@pytest.mark.gpu
def test_device_pixels_record_in_the_pool_they_are_given() -> None:
    pool = ReplayPool("cuda")
    replayed = DevicePixels(replay=True, pool_for=lambda device: pool)
    eager = DevicePixels()
    for seed in range(3):
        expected = eager(_deferred_cuda(5, seed))["images"]
        assert torch.equal(replayed(_deferred_cuda(5, seed))["images"], expected), seed
    assert (replayed.telemetry.recordings, replayed.telemetry.replays) == (1, 2)
    assert pool.holds_graphs
    replayed.pool_for = None  # another pool: the graphs recorded so far are let go
    assert replayed.telemetry.recordings == 0
