"""PackedBatch: one buffer in, the Batch collate gives out, bit for bit, for every task."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from rbox_corners import corner_array

from lucid_yolo.train.data.augment import Sample, to_targets
from lucid_yolo.train.data.augment.targets import Targets
from lucid_yolo.train.data.collate import collate, collate_packed
from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.packed_batch import ALIGNMENT, PackedBatch

N, S, K = 5, 32, 3


def _targets(task: Task, n: int, seed: int) -> Targets:
    rng = np.random.default_rng(seed)
    boxes = rng.uniform(0, S, (n, 4)).astype(np.float32)
    sample = Sample(
        image=rng.integers(0, 256, (S, S, 3), dtype=np.uint8),
        classes=rng.integers(0, 9, n).astype(np.int64),
        boxes=np.sort(boxes.reshape(n, 2, 2), axis=1).reshape(n, 4),
        polygons=[np.array([[2, 2], [20, 2], [20, 12]], dtype=np.float32)] * n,
        keypoints=rng.uniform(0, S, (n, K, 3)).astype(np.float32),
        corners=corner_array(np.tile(np.array([[11, 7, 18, 10, 0.3]], np.float32), (n, 1))),
        orig_size=(48 + seed, 64),
        scale_pad=(0.1 * (seed + 1), 1.5, 2.25),
    )
    targets = to_targets(sample, task, N, K)
    targets.image_id = 7 * seed
    return targets


def _items(task: Task) -> list[Targets]:
    items = [_targets(task, n, seed) for seed, n in enumerate((0, 2, 5))]
    for seed, item in enumerate(items):
        item.deferred_hsv = np.array([0.5, 1.25, 0.75 + seed], dtype=np.float64)
        item.deferred_flip = bool(seed % 2)
    return items


def _assert_same_batch(got: dict[str, object], want: dict[str, object]) -> None:
    assert list(got) == list(want)
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            other = got[key]
            assert isinstance(other, torch.Tensor)
            assert (other.dtype, other.shape) == (value.dtype, value.shape), key
            assert other.is_contiguous(), key
            assert torch.equal(other, value), key
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_packed_batch_unpacks_to_the_collated_batch(task: Task) -> None:
    items = _items(task)
    _assert_same_batch(dict(collate_packed(items).unpack()), dict(collate(items)))


def test_packed_batch_carries_source_shapes_beside_the_buffer() -> None:
    items = [_targets("segment", n, seed) for seed, n in enumerate((1, 2))]
    for item in items:
        item.source_shapes = [np.zeros((3, 2))] * int(item.valid.sum())
    packed = collate_packed(items)
    assert "source_shapes" in packed.extras
    unpacked = packed.unpack()
    assert [len(shapes) for shapes in unpacked["source_shapes"]] == [1, 2]
    assert list(unpacked) == list(collate(items))


def test_packed_batch_fields_start_aligned_in_one_buffer() -> None:
    packed = collate_packed(_items("pose"))
    assert all(field.offset % ALIGNMENT == 0 for field in packed.fields)
    ends = [field.offset + field.nbytes for field in packed.fields]
    assert ends == sorted(ends)
    assert ends[-1] <= packed.buffer.numel()
    base = packed.buffer.data_ptr()
    for field, view in zip(packed.fields, packed.unpack().values(), strict=False):
        assert isinstance(view, torch.Tensor)
        assert view.data_ptr() == base + field.offset


def test_packed_batch_survives_pickling_as_between_processes() -> None:
    items = _items("detect")
    packed = pickle.loads(pickle.dumps(collate_packed(items)))
    assert isinstance(packed, PackedBatch)
    _assert_same_batch(dict(packed.unpack()), dict(collate(items)))


def test_packed_batch_to_the_same_device_keeps_every_bit() -> None:
    items = _items("obb")
    moved = collate_packed(items).to("cpu")
    _assert_same_batch(dict(moved.unpack()), dict(collate(items)))


def test_packed_batch_rejects_an_empty_batch() -> None:
    with pytest.raises(ValueError, match="empty batch"):
        collate_packed([])


@pytest.mark.gpu
def test_packed_batch_pinned_and_copied_to_cuda_keeps_every_bit() -> None:
    items = _items("segment")
    pinned = collate_packed(items).pin_memory()
    assert pinned.buffer.is_pinned()
    on_device = pinned.to("cuda").unpack()
    assert on_device["images"].is_cuda
    on_host = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in on_device.items()}
    _assert_same_batch(on_host, dict(collate(items)))
