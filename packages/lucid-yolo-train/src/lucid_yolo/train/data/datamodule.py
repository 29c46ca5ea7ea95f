"""The Lightning data module: a dataset YAML, a spec or prepared labels in, Batch loaders out.

Example:
    >>> dm = YoloDataModule("data.yaml", task="detect", imgsz=640, batch_size=16)  # doctest: +SKIP
    >>> trainer.fit(model, datamodule=dm)  # doctest: +SKIP
    >>> dm = YoloDataModule("best.ckpt", source="images/")  # doctest: +SKIP
    >>> trainer.predict(model, datamodule=dm, ckpt_path="best.ckpt")  # doctest: +SKIP

Every loader yields :class:`~lucid_yolo.train.data.batch.Batch` dicts (torch types a DataLoader
by its dataset's items, here per-image ``Targets``, which :func:`.collate` stacks).
Training loaders drop the last incomplete batch, so every step sees the same batch shape (a new
shape would make the replayed step record again); evaluation loaders keep every image.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import lightning as L
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.trainer.states import TrainerFn
from torch.utils.data import DataLoader
from typing_extensions import override

from lucid_yolo.models import STRIDES
from lucid_yolo.replay import ReplayPool, Telemetry
from lucid_yolo.train.console import print_line
from lucid_yolo.train.data.augment.config import AugmentConfig
from lucid_yolo.train.data.augment.device_pixels import DevicePixels
from lucid_yolo.train.data.augment.targets import Targets
from lucid_yolo.train.data.batch import HOST_FIELDS, Batch
from lucid_yolo.train.data.cache import ImageCache
from lucid_yolo.train.data.checkpoint_spec import is_checkpoint, load_checkpoint_data
from lucid_yolo.train.data.coco_yaml import is_coco_yaml, load_coco_yaml
from lucid_yolo.train.data.collate import collate, collate_packed
from lucid_yolo.train.data.counters import FIELDS as COUNTER_FIELDS
from lucid_yolo.train.data.counters import DataCounters
from lucid_yolo.train.data.dataset import YoloDataset
from lucid_yolo.train.data.dataset_yaml import DatasetSpec, Task, load_dataset_yaml
from lucid_yolo.train.data.device_copy import beside_the_step
from lucid_yolo.train.data.disk_cache import DiskImageCache, has_disk_cache
from lucid_yolo.train.data.errors import BadInputPolicy, DatasetConfigError
from lucid_yolo.train.data.formats.ultralytics import load_split
from lucid_yolo.train.data.image_source import list_images, unlabelled
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.data.packed_batch import PackedBatch
from lucid_yolo.train.data.prepared import PreparedDataset
from lucid_yolo.train.data.repeating_loader import RepeatingLoader
from lucid_yolo.train.data.resources import (
    CacheRequest,
    available_memory,
    choose_cache,
    choose_workers,
    cpu_count,
    user_cache_dir,
)
from lucid_yolo.train.data.resumable_loader import ResumableLoader
from lucid_yolo.train.data.sampler import EpochSampler
from lucid_yolo.train.data.target_rows import choose_target_rows
from lucid_yolo.train.data.worker_signals import SigtermFilter
from lucid_yolo.train.exceptions import TrainConfigError

DEFAULT_IMGSZ = 640
PREDICT = "predict"
"""Name of the split built from ``source`` (unlabelled images)."""


class YoloDataModule(L.LightningDataModule):
    """Datasets and loaders of one YOLO dataset for fit, validate, test and predict.

    Args:
        yaml: an Ultralytics dataset YAML, a COCO description YAML (``format: coco``, see
            :mod:`.coco_yaml`), a :class:`DatasetSpec` already resolved, a
            :class:`PreparedDataset` of labels read by another loader (COCO, DOTA), or a
            ``.ckpt`` of a fit: its dataset metadata only (class names, task, keypoint layout,
            image size; :mod:`.checkpoint_spec`), no splits, for prediction from ``source``.
        source: an image file or a folder of images to predict (the ``predict`` loader); ``None``
            predicts the dataset's ``test`` split, else ``val``.
        task: the task to read labels for; ``None`` takes the YAML's (or infers it).
        imgsz: square network input size, pixels; ``None``: the checkpoint's training size when
            ``yaml`` is a checkpoint, else 640.
        batch_size: training images per batch.
        val_batch_size: evaluation batch size (validate, test, predict); ``None``:
            ``batch_size``. Evaluation then needs no more memory than a training step's
            forward, so it fits wherever training fits, and in a replayed fit it runs mostly in
            the graph pool's free scratch (``ReplayConfig.evaluate_in_pool``) instead of
            reserving its own beside it (engineering log, whole-fit speed, session 14: 1.12x
            native memory against 1.28x at twice the batch; session 39, detect at training
            batch 4 on an H100, one 3-epoch fit each: 16 here made a replayed fit's
            validation 0.09 s a pass shorter for 0.21 GiB more peak reserve, a native fit's
            0.42 s shorter at the same peak). Metrics do not depend on it (each image is
            scored on its own).
        workers: DataLoader worker processes per loader (0: load in the main process), at most
            the machine's CPU count; ``None``: one per CPU, at most 8 (:mod:`.resources`).
            Samples do not depend on it (each is seeded by its index).
        max_instances: fixed target rows per training image (Batch ``N``); more are counted and
            the largest kept. ``None``: the most instances a training sample can hold (the
            largest image's count times the mosaic's, copy-paste's and mixup's factors), at most
            100, so no instance is cut and the loss works on no more padding rows than it must;
            a fit's result does not depend on it then (:mod:`.target_rows`). Evaluation splits
            use their largest image's count (at least 1), so metrics never lose a ground-truth
            instance and a batch carries no more padding rows than it needs (a segment row holds
            a (H/4, W/4) mask).
        augment: training augmentation (``None``: the YOLO defaults of :class:`AugmentConfig`).
        cache: ``True``: decode and resize every image once into RAM (:mod:`.cache`), filled in
            ``setup``; ``"disk"``: once into a memory-mapped file under ``cache_dir``, reused by
            later runs while the images are unchanged (:mod:`.disk_cache`); ``None``: the disk
            cache when an earlier run wrote one for the unchanged images, else RAM for each
            split whose decoded images fit the smaller of ``cache_max_bytes`` and half the RAM
            available then, else no cache (:mod:`.resources`).
        cache_max_bytes: RAM budget of the cache per split, bytes.
        cache_dir: root of the disk cache (``None``: ``$XDG_CACHE_HOME/lucid-yolo/images``).
        close_mosaic: turn mosaic off for the last N training epochs (needs the trainer's
            ``max_epochs``; without a trainer mosaic stays on).
        policy: bad images or label rows: ``"fail"`` raises, ``"skip"`` warns and leaves them out.
        allow_unlabelled: train on a split in which no image has a label file (background only);
            off, such a split is an error (a missing ``labels/`` folder, most often).
        seed: base seed of the sample order and of every sample's augmentation.
        pack_batches: the training loader's workers stack each batch into one buffer
            (:mod:`.packed_batch`): one shared-memory handle, one pin and one copy to the
            device per batch instead of one per tensor; the step sees the same Batch, bit for
            bit (unpacked in :meth:`on_after_batch_transfer`). Off here, so that a loop over
            :meth:`train_dataloader` of its own gets Batch dicts; ``lucid-yolo fit`` turns it
            on (on an H100 it lowered the device's data wait of replayed fits at detect batch
            16 and 4 and segment batch 4, for at most 0.02 GiB more peak memory, and left the
            native peaks at batch 4 as they were: docs/engineering/whole-fit-speed.md,
            sessions 46-47).
        copy_stream: copy each batch to a GPU on a stream of its own, beside the step in flight
            (:mod:`.device_copy`), instead of queued behind it on the step's stream; the step
            sees the same bytes. Off by default: it may hold up to two more batches on the
            device (their memory returns only once the steps that read them are done), and on
            an H100 it saved time between steps at batch 4 only (one 3-epoch fit each way:
            docs/engineering/whole-fit-speed.md, session 44).

    Raises:
        TrainConfigError: ``batch_size``, ``workers`` or ``close_mosaic`` out of range, or
            ``imgsz`` not a positive multiple of the network's largest stride (32).
        DatasetConfigError: an unreadable dataset description or checkpoint, a task mismatch,
            or a ``source`` without images (missing, empty folder, clashing file stems).
    """

    def __init__(
        self,
        yaml: str | Path | DatasetSpec | PreparedDataset,
        *,
        source: str | Path | None = None,
        task: Task | None = None,
        imgsz: int | None = None,
        batch_size: int = 16,
        val_batch_size: int | None = None,
        workers: int | None = None,
        max_instances: int | None = None,
        augment: AugmentConfig | None = None,
        cache: CacheRequest = None,
        cache_max_bytes: int = 8 * 2**30,
        cache_dir: str | Path | None = None,
        close_mosaic: int = 10,
        policy: BadInputPolicy = "fail",
        allow_unlabelled: bool = False,
        seed: int = 0,
        pack_batches: bool = False,
        copy_stream: bool = False,
    ) -> None:
        super().__init__()
        if batch_size < 1 or (val_batch_size is not None and val_batch_size < 1):
            raise TrainConfigError(
                f"batch_size={batch_size!r} and val_batch_size={val_batch_size!r} must be >= 1"
            )
        if (workers is not None and workers < 0) or close_mosaic < 0:
            raise TrainConfigError(
                f"workers={workers!r} and close_mosaic={close_mosaic!r} must be >= 0"
            )
        stride = max(STRIDES)
        if imgsz is not None and (imgsz < stride or imgsz % stride):
            fit = max(stride, -(-imgsz // stride) * stride)
            raise TrainConfigError(
                f"imgsz={imgsz!r} is not a positive multiple of {stride}, the network's largest "
                f"stride; use imgsz={fit}"
            )
        self.spec: DatasetSpec | PreparedDataset
        # the description file read, saved in checkpoints: `validate --ckpt_path` evaluates on it
        self.dataset_file: Path | None = None
        trained_imgsz = DEFAULT_IMGSZ
        if isinstance(yaml, DatasetSpec | PreparedDataset):
            self.spec = yaml
        elif is_checkpoint(yaml):
            saved = load_checkpoint_data(yaml, type(self).__qualname__)
            self.spec, trained_imgsz = saved.spec, saved.imgsz
            self.dataset_file = saved.dataset_file
        else:
            if is_coco_yaml(yaml):
                self.spec = load_coco_yaml(yaml, task=task or "detect", policy=policy)
            else:
                self.spec = load_dataset_yaml(yaml, task=task)
            self.dataset_file = Path(yaml).expanduser().resolve()
        if task is not None and task != self.spec.task:
            raise DatasetConfigError(
                f"{self._where}: the labels are for task {self.spec.task!r}, not {task!r}; "
                "load them with the task you train"
            )
        self.source_images = None if source is None else list_images(source)
        self.imgsz = trained_imgsz if imgsz is None else imgsz
        self.batch_size = batch_size
        self.val_batch_size = val_batch_size or batch_size
        self._val_batch_reason = (
            "as asked" if val_batch_size else "the training batch; set val_batch_size to choose"
        )
        worker_choice = choose_workers(workers, cpu_count())
        self.workers = worker_choice.workers
        self._worker_line: str | None = worker_choice.reason
        self.max_instances = max_instances
        self.augment = augment or AugmentConfig()
        self.cache = cache
        self.cache_max_bytes = cache_max_bytes
        self.cache_dir = Path(cache_dir) if cache_dir is not None else user_cache_dir() / "images"
        self.close_mosaic = close_mosaic
        self.policy: BadInputPolicy = policy
        self.allow_unlabelled = allow_unlabelled
        self.seed = seed
        self.pack_batches = pack_batches
        self.copy_stream = copy_stream
        self._train_loader: ResumableLoader | None = None
        self._val_loader: RepeatingLoader | None = None
        self._train_position: dict[str, int] | None = None
        self.datasets: dict[str, YoloDataset] = {}
        self._device_pixels = DevicePixels(replay=self.augment.pixels_replayed is True)

    @property
    def task(self) -> Task:
        """The task the labels are read for."""
        return self.spec.task

    @property
    def names(self) -> tuple[str, ...]:
        """Class names, index = class id."""
        return self.spec.names

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return self.spec.num_classes

    @override
    def setup(self, stage: str) -> None:
        """Read the splits the stage needs (``fit``: train + val; ``predict``: ``source``)."""
        splits = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}.get(
            stage, (self._predict_split(),)
        )
        for split in splits:
            self._dataset(split)

    @override
    def train_dataloader(self) -> DataLoader[Targets]:
        """The training loader, its workers started when the fit is known to begin where it
        stands (:meth:`_starts_the_fit`).

        Lightning asks for it before the model summary and the sanity check when the model reads
        ``trainer.estimated_stepping_batches`` while it configures its optimizers, as
        :class:`~lucid_yolo.train.module.YoloModule` does; the workers then load the first
        batches meanwhile instead of after them (issue 11, start-up: 0.9-1.1 s from the sanity
        check's end to the first batch on the H200, session 8).
        """
        dataset = self._dataset("train")
        dataset.close_mosaic_epoch = self._close_mosaic_epoch()
        dataset.defer_pixels = self._defer_pixels()
        loader = self._loader(dataset, self.batch_size, train=True)
        if isinstance(loader, ResumableLoader):
            position, self._train_position = self._train_position, None
            if position is not None:
                loader.load_state_dict(position)
            self._train_loader = loader
            if self._starts_the_fit(loader, restored=position is not None):
                loader.start_stream()
        return loader

    @override
    def val_dataloader(self) -> DataLoader[Targets]:
        loader = self._loader(self._dataset("val"), self.val_batch_size, train=False, repeats=True)
        if isinstance(loader, RepeatingLoader):
            self._val_loader = loader
        return loader

    @override
    def test_dataloader(self) -> DataLoader[Targets]:
        return self._loader(self._dataset("test"), self.val_batch_size, train=False)

    @override
    def predict_dataloader(self) -> DataLoader[Targets]:
        return self._loader(self._dataset(self._predict_split()), self.val_batch_size, train=False)

    @override
    def teardown(self, stage: str) -> None:
        """End the training and validation loaders' worker streams when a stage ends.

        Lightning (2.6) calls it after a fit, validation, test or prediction that returns; one
        that raises (Ctrl+C included) gets :meth:`on_exception` and no ``teardown``. Not ended,
        the streams would live on with the trainer and, collected with it, cost 5 s for each
        worker (:class:`~lucid_yolo.train.data.epoch_batches.BatchStream`). A later stage that
        iterates the same loaders starts new streams.
        """
        self._end_streams()

    @override
    def on_exception(self, exception: BaseException) -> None:
        """End the loaders' worker streams when a stage raises (Ctrl+C included), so a crashed
        fit in a notebook leaves no worker behind; the exception goes on."""
        self._end_streams()

    @override
    def transfer_batch_to_device(
        self, batch: Any, device: torch.device, dataloader_idx: int
    ) -> Any:
        """Lightning's move of every field but the host ones (:data:`HOST_FIELDS`), which stay
        the very objects: its generic walk would visit and rebuild the lists of an evaluation
        batch's ``source_shapes``, about thirty calls a batch on the host of a GPU validation
        loop that is bound by it (issue 11). With ``copy_stream`` the copies run beside the
        step in flight (:func:`~lucid_yolo.train.data.device_copy.beside_the_step`)."""
        if self.copy_stream:
            return beside_the_step(device, lambda: self._move(batch, device, dataloader_idx))
        return self._move(batch, device, dataloader_idx)

    def _move(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if not isinstance(batch, dict):
            return super().transfer_batch_to_device(batch, device, dataloader_idx)
        return {
            key: value if key in HOST_FIELDS else move_data_to_device(value, device)
            for key, value in batch.items()
        }

    @override
    def on_after_batch_transfer(self, batch: Batch | PackedBatch, dataloader_idx: int) -> Batch:
        """Unpack a packed batch, then apply the HSV jitter and flips the workers left to the
        device (training batches with ``AugmentConfig.pixels_on_device``), before the step sees
        the batch."""
        if isinstance(batch, PackedBatch):
            batch = batch.unpack()
        return self._device_pixels(batch)

    def follow_replay(
        self, graphs: bool, step_pool: Callable[[torch.device], ReplayPool] | None = None
    ) -> None:
        """Replay the device's pixel work when the fit records CUDA graphs (``graphs``), unless
        ``AugmentConfig.pixels_replayed`` says otherwise: the training module calls it at its
        ``setup``, as it alone knows its replay options. A fit without graphs then records
        none here either. ``step_pool`` gives the training step's graph pool on a device: with
        graphs, the pixel graphs record there (:class:`DevicePixels`' ``pool_for``)."""
        if self.augment.pixels_replayed is None:
            self._device_pixels.replay = graphs
        self._device_pixels.pool_for = step_pool if graphs else None

    @property
    def pixels_replayed(self) -> bool:
        """Whether the device's pixel work replays from CUDA graphs (on a CUDA device)."""
        return self._device_pixels.replay

    @property
    def pixel_replay_telemetry(self) -> Telemetry:
        """The replayed pixel work's counters (all zero where it did not replay)."""
        return self._device_pixels.telemetry

    def predict_image(self, image_id: int) -> Path:
        """The file of a predicted image, by its ``Batch["image_ids"]`` entry."""
        return self._dataset(self._predict_split()).labels[image_id].image_path

    def set_epoch(self, epoch: int) -> None:
        """Select the training epoch outside a Trainer (a Trainer sets it through the sampler)."""
        self._dataset("train").set_epoch(epoch)

    def data_stats(self) -> dict[str, int]:
        """Samples produced and instances lost (by reason), every split and worker.

        Each split counts in rows of its own: the training and validation loaders' workers run
        at the same time (the validation stream loads during training), and a worker's row is
        written without a lock, so two workers of one index must never share it.
        """
        counters = [d.counters for d in self.datasets.values() if d.counters is not None]
        totals = [c.totals() for c in counters]
        return {field: sum(t[field] for t in totals) for field in COUNTER_FIELDS}

    @override
    def state_dict(self) -> dict[str, Any]:
        """Dataset metadata saved in checkpoints (class names, task, keypoint layout, size, the
        description file), and where the training loader stopped (:class:`ResumableLoader`)."""
        return {
            "dataset_file": None if self.dataset_file is None else str(self.dataset_file),
            "names": list(self.spec.names),
            "task": self.spec.task,
            "imgsz": self.imgsz,
            "kpt_shape": None if self.spec.kpt_shape is None else list(self.spec.kpt_shape),
            "flip_idx": None if self.spec.flip_idx is None else list(self.spec.flip_idx),
            "train_position": None
            if self._train_loader is None
            else self._train_loader.state_dict(),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Check a checkpoint's metadata against this dataset; keep its training position.

        Lightning restores a data module before the model's ``configure_optimizers`` asks for
        the training loader (``estimated_stepping_batches``), and that loader is the fit's, so
        the position is handed to it in :meth:`train_dataloader`. (Lightning's own restore of a
        stateful loader comes after the loader exists and never reaches it in that order.)

        Raises:
            DatasetConfigError: the checkpoint was trained on other classes or another task.
        """
        saved = (tuple(state_dict["names"]), state_dict["task"])
        if saved != (self.spec.names, self.spec.task):
            raise DatasetConfigError(
                f"checkpoint was trained for task {saved[1]!r} with classes {list(saved[0])!r}, "
                f"but {self._where} has task {self.spec.task!r} and classes "
                f"{list(self.spec.names)!r}; resume with the same dataset YAML"
            )
        self._train_position = state_dict.get("train_position")

    @property
    def _where(self) -> str:
        spec = self.spec
        return spec.source if isinstance(spec, PreparedDataset) else str(spec.yaml_path)

    def _predict_split(self) -> str:
        if self.source_images is not None:
            return PREDICT
        return "test" if "test" in self.spec.splits else "val"

    def _dataset(self, split: str) -> YoloDataset:
        if split not in self.datasets:
            if split != PREDICT and split not in self.spec.splits:
                raise DatasetConfigError(self._missing_split(split))
            self.datasets[split] = self._build(split, train=split == "train")
        return self.datasets[split]

    def _missing_split(self, split: str) -> str:
        if not self.spec.splits:
            return (
                f"{self._where}: a checkpoint holds the dataset metadata only, no `{split}` "
                "split; pass a dataset YAML to evaluate or train, or `source` images to predict"
            )
        return f"{self._where}: no `{split}` split; add `{split}: images/{split}`"

    def _build(self, split: str, *, train: bool) -> YoloDataset:
        labels: Sequence[ImageLabels]
        if split == PREDICT and self.source_images is not None:
            labels = unlabelled(self.source_images)
        elif isinstance(self.spec, PreparedDataset):
            labels = self.spec.splits[split]
        else:
            labels = load_split(
                self.spec, split, policy=self.policy, allow_unlabelled=self.allow_unlabelled
            )
        if not labels and split != PREDICT:
            raise DatasetConfigError(f"{self._where}: split {split!r} holds no image; add images")
        paths = [item.image_path for item in labels]
        choice = choose_cache(
            self.cache,
            num_images=len(labels),
            imgsz=self.imgsz,
            max_bytes=self.cache_max_bytes,
            available=available_memory(),
            disk_cache_found=self.cache is None
            and has_disk_cache(self.cache_dir, paths, self.imgsz),
        )
        largest = max((len(item) for item in labels), default=0)
        if train:
            rows = choose_target_rows(self.max_instances, largest, self.augment, self.spec.task)
            max_rows, shape = rows.rows, f"; {rows.rows} target rows per image ({rows.reason})"
        else:
            max_rows = max(1, largest)
            shape = f"; batches of {self.val_batch_size} ({self._val_batch_reason})"
        self._announce(f"{split}: {len(labels)} images, {choice.reason}{shape}")
        cache: ImageCache | DiskImageCache | None = None
        if choice.mode == "ram":
            cache = ImageCache(self.imgsz, choice.budget)
            cache.fill(paths, max(1, self.workers), f"data: {split}: caching images")
        elif choice.mode == "disk":
            cache = DiskImageCache(
                self.cache_dir,
                paths,
                self.imgsz,
                max(1, self.workers),
                f"data: {split}: writing the disk cache",
            )
            state = "reused" if cache.reused else "written"
            print_line(f"data: {split}: disk cache {state} at {cache.directory}")
        kpt_shape = self.spec.kpt_shape
        return YoloDataset(
            labels,
            task=self.spec.task,
            imgsz=self.imgsz,
            augment=self.augment if train else None,
            max_instances=max_rows,
            num_keypoints=0 if kpt_shape is None else kpt_shape[0],
            flip_idx=self.spec.flip_idx,
            seed=self.seed,
            cache=cache,
            counters=DataCounters(self.workers),
        )

    def _announce(self, line: str) -> None:
        """Print a loading decision once, the workers' with the first split."""
        if self._worker_line is not None:
            line, self._worker_line = f"{line}; {self._worker_line}", None
        print_line(f"data: {line}")

    def _starts_the_fit(self, loader: ResumableLoader, *, restored: bool) -> bool:
        """Whether a fit will first iterate ``loader`` where it stands, so its stream may start.

        It does when the loader holds the position restored from the fit's checkpoint (the
        resumed epoch's next batch, or the next epoch's first after a checkpoint at an epoch's
        end), and when a fit from scratch asks for it at the epoch its sampler is set to (a new
        loader's 0, before the first epoch). Otherwise (a checkpoint without a position, a
        loader built again at a later epoch, no fit) the stream starts when Lightning iterates,
        as a stream started here would have to start again there.
        """
        trainer = self.trainer
        if trainer is None or trainer.state.fn != TrainerFn.FITTING:
            return False
        if restored:
            return True
        return trainer.ckpt_path is None and trainer.current_epoch == loader.epoch_sampler.epoch

    def _end_streams(self) -> None:
        for loader in (self._train_loader, self._val_loader):
            if loader is not None:
                loader.end_stream()

    def _defer_pixels(self) -> bool:
        """``AugmentConfig.pixels_on_device``, by default on when the trainer trains on CUDA."""
        if self.augment.pixels_on_device is not None:
            return self.augment.pixels_on_device
        trainer = self.trainer
        return trainer is not None and trainer.strategy.root_device.type == "cuda"

    def _close_mosaic_epoch(self) -> int | None:
        trainer = self.trainer
        max_epochs = None if trainer is None else trainer.max_epochs
        if max_epochs is None or max_epochs < 0 or self.close_mosaic == 0:
            return None
        return max(0, max_epochs - self.close_mosaic)

    def _loader(
        self, dataset: YoloDataset, batch_size: int, *, train: bool, repeats: bool = False
    ) -> DataLoader[Targets]:
        # Each process of a data-parallel run loads its own shard; the trainer says which.
        trainer = self.trainer
        sampler = EpochSampler(
            len(dataset),
            shuffle=train,
            seed=self.seed,
            num_replicas=1 if trainer is None else trainer.world_size,
            rank=0 if trainer is None else trainer.global_rank,
            equal_shards=train,
        )
        if self.workers > 0:
            # OpenCV's thread pool does not survive fork(): a forked worker whose parent has
            # already run a parallel OpenCV call deadlocks on its first pool operation (seen
            # with opencv-python-headless 5.0 when the synthetic set was generated in-process).
            # Shrinking the pool in the parent before the workers fork avoids it.
            cv2.setNumThreads(1)
        # the training loader saves its position in checkpoints, so a fit resumes mid-epoch;
        # the validation loader's workers load the next pass while the model trains
        loader = ResumableLoader if train else RepeatingLoader if repeats else DataLoader
        return loader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            # Each iterator draws its workers' base seed from this generator, not from the global
            # one: a resumed fit creates its iterators at other points than the uninterrupted fit
            # (before the generators are restored, and without the validation Lightning skips
            # after a checkpoint of an epoch's last batch), so draws from the global generator
            # would leave it elsewhere than without the interruption (issue 15).
            generator=torch.Generator().manual_seed(self.seed),
            worker_init_fn=SigtermFilter(owner=os.getpid()),
            num_workers=self.workers,
            collate_fn=collate_packed if train and self.pack_batches else collate,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.workers > 0,
            drop_last=train and len(dataset) >= batch_size,
        )


__all__ = ["YoloDataModule"]
