"""YoloDataModule on a tiny synthetic set: batches, workers, Lightning epochs, metadata."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import cv2
import lightning as L
import numpy as np
import pytest
import torch
from busy_stream import copied_while_the_stream_is_busy
from quiet_trainer import quiet_cpu_trainer
from torch import Tensor

from lucid_yolo.replay import ReplayPool
from lucid_yolo.train.data.augment import AugmentConfig
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.cache import ImageCache
from lucid_yolo.train.data.collate import collate_packed
from lucid_yolo.train.data.datamodule import YoloDataModule
from lucid_yolo.train.data.dataset_yaml import load_dataset_yaml
from lucid_yolo.train.data.disk_cache import DiskImageCache
from lucid_yolo.train.data.errors import DatasetConfigError
from lucid_yolo.train.data.formats.ultralytics import load_split
from lucid_yolo.train.data.packed_batch import PackedBatch
from lucid_yolo.train.data.prepared import PreparedDataset
from lucid_yolo.train.data.resumable_loader import ResumableLoader
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.exceptions import TrainConfigError

IMGSZ = 64


@pytest.fixture(scope="module")
def pose_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pose")
    return generate_synthetic(root, task="pose", num_train=6, num_val=3, imgsz=IMGSZ)


def _module(
    data: Path | PreparedDataset, workers: int = 0, max_instances: int = 32, **kwargs: object
) -> YoloDataModule:
    return YoloDataModule(
        data,
        imgsz=IMGSZ,
        batch_size=4,
        workers=workers,
        max_instances=max_instances,
        **kwargs,  # type: ignore[arg-type]
    )


def test_datamodule_yields_train_and_val_batches(pose_yaml: Path) -> None:
    dm = _module(pose_yaml)
    dm.setup("fit")
    train = list(dm.train_dataloader())
    assert len(train) == 1
    batch = train[0]
    assert batch["images"].shape == (4, 3, IMGSZ, IMGSZ)
    assert batch["keypoints"].shape[:2] == (4, 32)
    val = list(dm.val_dataloader())
    assert [b["images"].shape[0] for b in val] == [3]
    assert dm.data_stats()["samples"] == 7


def test_datamodule_counts_each_split_in_rows_of_its_own(pose_yaml: Path) -> None:
    # train and val workers of one index run at once and write their row without a lock, so
    # the splits must not share rows (no workers here: the count is then exact)
    dm = _module(pose_yaml)
    dm.setup("fit")
    train, val = dm.datasets["train"].counters, dm.datasets["val"].counters
    assert train is not None
    assert val is not None
    assert train is not val
    list(dm.train_dataloader())
    assert (train.totals()["samples"], val.totals()["samples"]) == (4, 0)
    list(dm.val_dataloader())
    assert (train.totals()["samples"], val.totals()["samples"]) == (4, 3)
    assert dm.data_stats()["samples"] == 7


def test_datamodule_evaluation_keeps_every_instance(pose_yaml: Path) -> None:
    dm = _module(pose_yaml, max_instances=1)
    dm.setup("validate")
    most = max(len(item) for item in dm.datasets["val"].labels)
    assert most > 1
    batch = next(iter(dm.val_dataloader()))
    assert batch["valid"].shape[1] == most
    assert dm.data_stats()["overflow"] == 0


def test_datamodule_evaluation_rows_are_the_largest_image_not_the_training_cap(
    pose_yaml: Path,
) -> None:
    dm = _module(pose_yaml, max_instances=32)
    dm.setup("validate")
    most = max(len(item) for item in dm.datasets["val"].labels)
    assert most < 32
    batch = next(iter(dm.val_dataloader()))
    assert batch["valid"].shape[1] == most


def test_datamodule_workers_match_main_process(pose_yaml: Path) -> None:
    main = _module(pose_yaml, seed=5)
    pooled = _module(pose_yaml, workers=2, seed=5)
    main.setup("fit")
    pooled.setup("fit")
    a = next(iter(main.train_dataloader()))
    b = next(iter(pooled.train_dataloader()))
    assert torch.equal(a["images"], b["images"])
    assert torch.equal(a["keypoints"], b["keypoints"])


def test_datamodule_loaders_leave_the_global_generator_untouched(pose_yaml: Path) -> None:
    # a resumed fit creates its iterators at other points than the uninterrupted one (issue 15)
    dm = _module(pose_yaml)
    dm.setup("fit")
    before = torch.get_rng_state()
    for loader in (dm.train_dataloader(), dm.val_dataloader()):
        next(iter(loader))
    assert torch.equal(torch.get_rng_state(), before)


def test_datamodule_train_loader_outside_a_fit_starts_no_worker(pose_yaml: Path) -> None:
    loader = YoloDataModule(pose_yaml, imgsz=64, batch_size=2, workers=2).train_dataloader()
    assert isinstance(loader, ResumableLoader)
    assert loader.streams == 0


def test_datamodule_workers_capped_at_cpu_count(
    pose_yaml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("lucid_yolo.train.data.datamodule.cpu_count", lambda: 3)
    assert _module(pose_yaml, workers=8).workers == 3
    assert _module(pose_yaml, workers=None).workers == 3
    assert _module(pose_yaml, workers=2).workers == 2
    assert _module(pose_yaml, workers=0).workers == 0


def test_datamodule_metadata_round_trip(pose_yaml: Path) -> None:
    dm = _module(pose_yaml)
    state = dm.state_dict()
    assert state["task"] == "pose"
    assert state["names"] == list(dm.names)
    dm.load_state_dict(state)
    with pytest.raises(DatasetConfigError, match="trained for task 'detect'"):
        dm.load_state_dict({**state, "task": "detect"})


def test_datamodule_rejects_task_mismatch(pose_yaml: Path) -> None:
    with pytest.raises(DatasetConfigError, match="labels are for task 'pose', not 'detect'"):
        YoloDataModule(load_dataset_yaml(pose_yaml), task="detect")


def test_datamodule_accepts_prepared_labels(pose_yaml: Path) -> None:
    spec = load_dataset_yaml(pose_yaml)
    prepared = PreparedDataset(
        {"train": load_split(spec, "train"), "val": load_split(spec, "val")[:2]},
        names=spec.names,
        task="pose",
        kpt_shape=spec.kpt_shape,
        flip_idx=spec.flip_idx,
    )
    dm = _module(prepared)
    dm.setup("validate")
    batch = next(iter(dm.val_dataloader()))
    assert batch["images"].shape[0] == 2
    assert dm.names == spec.names


class _BatchKeeper(L.LightningModule):
    """Keeps every training batch the step receives, with its epoch; learns nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.batches: list[Batch] = []
        self.epochs: list[int] = []

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        self.batches.append(batch)
        self.epochs.append(self.current_epoch)
        return self.weight.sum() * 0

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _LateReader(_BatchKeeper):
    """Keeps a copy of every training batch, taken after the device has slept a while, and not
    the batch itself, whose buffers go back to the allocator after the step."""

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        torch.cuda._sleep(20_000_000)
        late = {k: v.clone() if isinstance(v, Tensor) else v for k, v in batch.items()}
        return super().training_step(cast(Batch, late), batch_idx)


# the batch keeper has no validation_step and runs in-process on a 2-core CI machine: Lightning's
# advice about both is expected here; Lightning 2.6 still calls a torch pytree API that torch 2.15
# deprecates
@pytest.mark.filterwarnings("ignore:`isinstance.treespec, LeafSpec.` is deprecated:FutureWarning")
@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader`:UserWarning")
@pytest.mark.filterwarnings("ignore:The 'train_dataloader' does not have many workers:UserWarning")
def test_datamodule_trainer_sets_epoch_and_closes_mosaic(pose_yaml: Path) -> None:
    dm = _module(pose_yaml, close_mosaic=1, augment=AugmentConfig(fliplr=0.0))
    model = _BatchKeeper()
    trainer = quiet_cpu_trainer(max_epochs=3, limit_val_batches=0)
    trainer.fit(model, datamodule=dm)
    assert model.epochs == [0, 1, 2]
    assert len({int(batch["images"].sum()) for batch in model.batches}) == 3
    assert dm.datasets["train"].close_mosaic_epoch == 2


@pytest.mark.filterwarnings("ignore:`isinstance.treespec, LeafSpec.` is deprecated:FutureWarning")
@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader`:UserWarning")
@pytest.mark.filterwarnings("ignore:The 'train_dataloader' does not have many workers:UserWarning")
def test_datamodule_pixels_on_device_reach_the_step_finished(pose_yaml: Path) -> None:
    def fit(pixels_on_device: bool | None) -> list[Batch]:
        dm = _module(pose_yaml, augment=AugmentConfig(pixels_on_device=pixels_on_device))
        model = _BatchKeeper()
        quiet_cpu_trainer(max_epochs=2, limit_val_batches=0).fit(model, datamodule=dm)
        assert dm.datasets["train"].defer_pixels is bool(pixels_on_device)
        return model.batches

    expected = fit(False)
    assert len(expected) == 2
    for batch, want in zip(fit(True), expected, strict=True):
        assert batch.keys() == want.keys()
        assert torch.equal(batch["images"], want["images"])
        assert torch.equal(batch["keypoints"], want["keypoints"])
    fit(None)  # on CPU the default leaves the pixels to the workers (asserted in `fit`)


@pytest.mark.parametrize(
    ("configured", "fit_graphs", "replayed"),
    [(None, True, True), (None, False, False), (True, False, True), (False, True, False)],
)
def test_datamodule_replays_device_pixels_as_configured_or_as_the_fit(
    pose_yaml: Path, configured: bool | None, fit_graphs: bool, replayed: bool
) -> None:
    dm = _module(pose_yaml, augment=AugmentConfig(pixels_replayed=configured))
    assert dm.pixels_replayed is (configured is True)

    def step_pool(device: torch.device) -> ReplayPool:
        return ReplayPool(device)

    dm.follow_replay(fit_graphs, step_pool)
    assert dm.pixels_replayed is replayed
    # the pixel graphs record in the fit's step pool only where the fit records graphs
    assert dm._device_pixels.pool_for is (step_pool if fit_graphs else None)


@pytest.mark.filterwarnings("ignore:`isinstance.treespec, LeafSpec.` is deprecated:FutureWarning")
@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader`:UserWarning")
@pytest.mark.filterwarnings("ignore:The 'train_dataloader' does not have many workers:UserWarning")
def test_datamodule_packed_batches_reach_the_step_bit_for_bit(pose_yaml: Path) -> None:
    def fit(pack_batches: bool) -> list[Batch]:
        augment = AugmentConfig(pixels_on_device=True)
        dm = _module(pose_yaml, workers=1, augment=augment, pack_batches=pack_batches)
        model = _BatchKeeper()
        quiet_cpu_trainer(max_epochs=2, limit_val_batches=0).fit(model, datamodule=dm)
        return model.batches

    expected = fit(False)
    assert len(expected) == 2
    for batch, want in zip(fit(True), expected, strict=True):
        assert list(batch) == list(want)
        for key, value in want.items():
            got = batch[key]  # type: ignore[literal-required]
            assert (got.dtype, got.shape) == (value.dtype, value.shape), key
            assert torch.equal(got, value), key


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:`isinstance.treespec, LeafSpec.` is deprecated:FutureWarning")
@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader`:UserWarning")
@pytest.mark.filterwarnings("ignore:The 'train_dataloader' does not have many workers:UserWarning")
def test_datamodule_cuda_step_sees_the_same_batch_packed_or_not_on_a_copy_stream_or_not(
    pose_yaml: Path,
) -> None:
    def fit(pack_batches: bool, copy_stream: bool = False) -> list[Batch]:
        dm = _module(pose_yaml, workers=1, pack_batches=pack_batches, copy_stream=copy_stream)
        model = _LateReader()
        L.Trainer(
            max_epochs=2,
            accelerator="cuda",
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
        ).fit(model, datamodule=dm)
        assert dm.datasets["train"].defer_pixels  # the HSV and flips ran on the device
        return model.batches

    expected = fit(False)
    assert expected[0]["images"].is_cuda
    for variant in (fit(True), fit(False, copy_stream=True), fit(True, copy_stream=True)):
        for batch, want in zip(variant, expected, strict=True):
            assert list(batch) == list(want)
            for key, value in want.items():
                got = batch[key]  # type: ignore[literal-required]
                assert (got.dtype, got.shape) == (value.dtype, value.shape)
                assert got.device == value.device
                assert torch.equal(got, value), key


def test_datamodule_packs_only_the_training_batches(pose_yaml: Path) -> None:
    dm = _module(pose_yaml, pack_batches=True)
    dm.setup("fit")
    packed = next(iter(dm.train_dataloader()))
    assert isinstance(packed, PackedBatch)
    assert isinstance(next(iter(dm.val_dataloader())), dict)


def test_datamodule_worker_loaders_shrink_opencv_pool_before_fork(pose_yaml: Path) -> None:
    before = cv2.getNumThreads()
    try:
        cv2.setNumThreads(2)
        dm = _module(pose_yaml, workers=1)
        dm.setup("validate")
        dm.val_dataloader()
        assert cv2.getNumThreads() == 1
    finally:
        cv2.setNumThreads(before)


def test_datamodule_source_predicts_letterboxed_images(pose_yaml: Path, tmp_path: Path) -> None:
    wide = tmp_path / "wide.png"
    cv2.imwrite(str(wide), np.full((32, 96, 3), 200, dtype=np.uint8))
    dm = _module(pose_yaml, source=tmp_path)
    dm.setup("predict")
    batch = next(iter(dm.predict_dataloader()))
    assert batch["images"].shape == (1, 3, IMGSZ, IMGSZ)
    assert batch["orig_sizes"].tolist() == [[32, 96]]
    assert batch["keypoints"].shape[2] == dm.spec.kpt_shape[0]  # type: ignore[index]
    assert dm.predict_image(int(batch["image_ids"][0])) == wide


def test_datamodule_without_source_predicts_the_val_split(pose_yaml: Path) -> None:
    dm = _module(pose_yaml)
    batch = next(iter(dm.predict_dataloader()))
    assert batch["images"].shape[0] == 3
    assert dm.predict_image(0) == dm.datasets["val"].labels[0].image_path


def test_datamodule_checkpoint_gives_metadata_and_image_size(
    pose_yaml: Path, tmp_path: Path
) -> None:
    trained = YoloDataModule(pose_yaml, imgsz=96)
    path = tmp_path / "m.ckpt"
    torch.save({"YoloDataModule": trained.state_dict()}, path)
    dm = YoloDataModule(path, source=pose_yaml.parent / "images" / "val")
    assert (dm.names, dm.task, dm.imgsz) == (trained.names, "pose", 96)
    assert dm.spec.kpt_shape == trained.spec.kpt_shape
    dm.load_state_dict(trained.state_dict())
    assert YoloDataModule(path, imgsz=64).imgsz == 64


def test_datamodule_checkpoint_names_the_dataset_file(pose_yaml: Path, tmp_path: Path) -> None:
    path = tmp_path / "m.ckpt"
    torch.save({"YoloDataModule": YoloDataModule(pose_yaml).state_dict()}, path)
    assert YoloDataModule(path).dataset_file == pose_yaml.resolve()


def test_datamodule_checkpoint_has_no_training_split(pose_yaml: Path, tmp_path: Path) -> None:
    path = tmp_path / "m.ckpt"
    torch.save({"YoloDataModule": YoloDataModule(pose_yaml).state_dict()}, path)
    dm = YoloDataModule(path)
    with pytest.raises(DatasetConfigError, match="metadata only, no `train` split"):
        dm.setup("fit")


def test_datamodule_source_without_images_fails_at_construction(
    pose_yaml: Path, tmp_path: Path
) -> None:
    with pytest.raises(DatasetConfigError, match="holds no image"):
        YoloDataModule(pose_yaml, source=tmp_path)


def test_datamodule_cache_changes_no_sample(pose_yaml: Path) -> None:
    cached = _module(pose_yaml, cache=True, seed=3)
    decoded = _module(pose_yaml, cache=False, seed=3)
    cached.setup("fit")
    decoded.setup("fit")
    assert cached.datasets["train"].cache is not None
    assert decoded.datasets["train"].cache is None
    for a, b in zip(cached.train_dataloader(), decoded.train_dataloader(), strict=True):
        assert torch.equal(a["images"], b["images"])
        assert torch.equal(a["keypoints"], b["keypoints"])


def test_datamodule_default_cache_follows_the_budget(
    pose_yaml: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fits = _module(pose_yaml, cache=None)
    fits.setup("validate")
    too_small = _module(pose_yaml, cache=None, cache_max_bytes=IMGSZ * IMGSZ * 3)
    too_small.setup("validate")
    assert fits.datasets["val"].cache is not None
    assert too_small.datasets["val"].cache is None
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("data: ")]
    assert lines[0].startswith("data: val: 3 images, RAM cache on")
    assert "loader workers" in lines[0]
    assert lines[1].startswith("data: val: 3 images, RAM cache off")


def test_datamodule_disk_cache_changes_no_sample(pose_yaml: Path, tmp_path: Path) -> None:
    on_disk = _module(pose_yaml, cache="disk", cache_dir=tmp_path / "images", seed=3)
    decoded = _module(pose_yaml, cache=False, seed=3)
    on_disk.setup("fit")
    decoded.setup("fit")
    assert on_disk.datasets["train"].cache is not None
    assert any((tmp_path / "images").iterdir())
    for a, b in zip(on_disk.train_dataloader(), decoded.train_dataloader(), strict=True):
        assert torch.equal(a["images"], b["images"])
        assert torch.equal(a["keypoints"], b["keypoints"])


def test_datamodule_automatic_cache_reuses_an_earlier_runs_disk_cache(
    pose_yaml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _module(pose_yaml, cache="disk", cache_dir=tmp_path / "images").setup("validate")
    capsys.readouterr()
    automatic = _module(pose_yaml, cache=None, cache_dir=tmp_path / "images")
    automatic.setup("validate")
    cache = automatic.datasets["val"].cache
    assert isinstance(cache, DiskImageCache)
    assert cache.reused
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("data: ")]
    assert lines[0].startswith("data: val: 3 images, disk cache of an earlier run reused")


def test_datamodule_automatic_cache_writes_no_disk_cache(pose_yaml: Path, tmp_path: Path) -> None:
    automatic = _module(pose_yaml, cache=None, cache_dir=tmp_path / "images")
    automatic.setup("validate")
    assert isinstance(automatic.datasets["val"].cache, ImageCache)
    assert not (tmp_path / "images").exists()


@pytest.mark.usefixtures("progress_every_item")
def test_datamodule_long_label_scan_prints_progress_on_stdout(
    pose_yaml: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _module(pose_yaml, cache=False).setup("validate")
    captured = capsys.readouterr()
    scan = [line for line in captured.out.splitlines() if "reading labels" in line]
    assert scan[0].startswith("data: val: reading labels and image headers: 1/3, ")
    assert scan[0].endswith(" left")
    assert "data: " not in captured.err


def test_datamodule_val_batch_size_defaults_to_the_training_batch(
    pose_yaml: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _module(pose_yaml)
    data.setup("validate")
    line = next(line for line in capsys.readouterr().out.splitlines() if "data: val:" in line)
    assert data.batch_size == 4
    assert data.val_dataloader().batch_size == 4
    assert "batches of 4 (the training batch; set val_batch_size to choose)" in line


def test_datamodule_val_batch_size_as_asked(
    pose_yaml: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _module(pose_yaml, val_batch_size=3)
    data.setup("validate")
    line = next(line for line in capsys.readouterr().out.splitlines() if "data: val:" in line)
    assert data.val_dataloader().batch_size == 3
    assert "batches of 3 (as asked)" in line


@pytest.mark.parametrize(("imgsz", "fit"), [(600, 608), (16, 32), (0, 32)])
def test_datamodule_refuses_an_image_size_off_the_stride_grid(
    tmp_path: Path, imgsz: int, fit: int
) -> None:
    path = generate_synthetic(tmp_path / "d", num_train=2, num_val=1, imgsz=64)
    with pytest.raises(TrainConfigError, match=rf"imgsz={imgsz} is not .* use imgsz={fit}$"):
        YoloDataModule(path, imgsz=imgsz)


@pytest.mark.parametrize("copy_stream", [False, True])
def test_datamodule_moves_a_batchs_tensors_and_keeps_its_host_fields(
    tmp_path: Path, copy_stream: bool
) -> None:
    data = generate_synthetic(tmp_path, task="segment", num_train=2, num_val=3, imgsz=IMGSZ)
    dm = _module(data, copy_stream=copy_stream)
    dm.setup("validate")
    batch = next(iter(dm.val_dataloader()))
    assert "source_shapes" in batch
    meta = torch.device("meta")
    nested = {**batch, "extra": [torch.zeros(2)]}  # anything else moves as Lightning moves it
    moved = dm.transfer_batch_to_device(nested, meta, 0)
    assert list(moved) == list(nested)
    for key, value in batch.items():
        if isinstance(value, Tensor):
            assert moved[key].device == meta, key
            assert (moved[key].dtype, moved[key].shape) == (value.dtype, value.shape), key
    assert moved["source_shapes"] is batch["source_shapes"]  # not walked, not rebuilt
    assert moved["extra"][0].device == meta
    packed = dm.transfer_batch_to_device(
        collate_packed([dm.datasets["val"][i] for i in range(2)]), meta, 0
    )
    assert isinstance(packed, PackedBatch)
    assert packed.buffer.device == meta


@pytest.mark.gpu
def test_gpu_datamodule_copy_stream_copies_beside_the_step(pose_yaml: Path) -> None:
    images = torch.randint(0, 256, (4, 3, IMGSZ, IMGSZ), dtype=torch.uint8).pin_memory()
    batch = {"images": images, "source_shapes": [(IMGSZ, IMGSZ)] * 4}
    dm = _module(pose_yaml, copy_stream=True)
    cuda = torch.device("cuda", torch.cuda.current_device())
    moved = copied_while_the_stream_is_busy(
        lambda: dm.transfer_batch_to_device(batch, cuda, 0)["images"], images
    )
    assert torch.equal(moved.cpu(), images)
