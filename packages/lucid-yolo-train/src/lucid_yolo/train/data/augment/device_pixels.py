"""Finish on the training device the pixel augmentations the workers drew but left undone.

Why (issue 11, data wait): HSV jitter and the flip's mirror copy are about a third of a cached
detect sample's worker CPU time at 640 px (``tools/profile_augment.py``:
docs/engineering/whole-fit-speed.md), and on a GPU they cost a few table lookups per pixel. With
``AugmentConfig.pixels_on_device`` the worker draws both from the sample's own stream where the
CPU path draws them and moves the labels; the batch brings the draws (``deferred_hsv``,
``deferred_flip``) and :class:`DevicePixels` applies them right after the batch reaches the device,
before Lightning hands it to the training step. The result is the batch the CPU path makes, bit for
bit (:mod:`.hsv` says where and why), so native and replayed steps, resumes and the verifier see
the same bytes either way.

HSV maps each pixel by its own value and the flip only moves pixels, so the device may apply them
in the CPU path's order (jitter, then mirror) without a difference.

On a CUDA device the work may replay from a CUDA graph per batch shape (``replay``): eagerly it is
some thirty kernels the host launches one by one, about 2 ms of the training loop's host time a
batch on the H200 (``tools/host_split_callback.py``, session 32 of
docs/engineering/whole-fit-speed.md), which a host-bound replayed step waits for between steps;
replayed, three copies in, one graph launch and one copy out. The graph runs the same kernels on
the same bytes, so the batch is the eager one bit for bit.

Segment masks travel the same way bit-packed (``deferred_masks``): a batch of 16 at 640 px holds
(16, 100, 160, 160) 0/1 bytes, 41 MB that the workers stacked (21 ms CPU per batch in
``collate``), the main process pinned and the bus carried; packed, 5 MB. Unpacking is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import Tensor, nn

from lucid_yolo.replay import ForwardRecorder, ReplayPool, Telemetry, merge_telemetry
from lucid_yolo.train.data.augment.hsv import (
    JITTER_TABLE_BYTES,
    LOOKUP_BYTES_PER_PIXEL,
    MAX_LOOKUP_IMAGES,
    HsvTables,
    hsv_lookup,
    jitter_tables,
)
from lucid_yolo.train.data.augment.targets import MASK_STRIDE
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.exceptions import TrainConfigError

CHUNK_PIXELS = 1 << 22
"""Pixels :class:`DevicePixels` finishes at once by default: nine 640 px images (each counted with
its channel tables, :data:`TABLE_PIXELS`), whose HSV temporaries and tables come to about 47 MB
(12 bytes per pixel, :func:`hsv_lookup`, and 257 KiB an image). Smaller chunks cost time
per chunk, not per pixel: with the three-byte tables used before session 49, on the H200 a
16 x 640 px batch took 2.46 ms of device time and 2.78 ms of host time in chunks of two images,
0.90 and 0.98 ms in chunks of ten, 0.88 and 0.60 ms at once (``tools/bench_data_wait.py
--device-only --chunk-pixels N``, docs/engineering/whole-fit-speed.md)."""

TABLE_PIXELS = JITTER_TABLE_BYTES // LOOKUP_BYTES_PER_PIXEL
"""Pixels whose HSV temporaries weigh one image's channel tables; each image counts them
towards ``chunk_pixels``."""

MAX_SIGNATURES = 4
"""Graphs :class:`DevicePixels` records per device (one per batch shape, chunk size and whether
the batch has HSV gains); a further one runs eagerly. A fit has one training batch shape."""


class DevicePixels:
    """Applies a batch's deferred HSV gains and flips to its images, on the images' device.

    The images are finished in place, a few at a time (``chunk_pixels``). Why (issue 11,
    memory): natively the data path's temporaries reuse blocks the previous step's activations
    freed, but in a replayed fit those activations stay in the graph pool, so the temporaries
    add to what the fit reserves (docs/engineering/replay-memory.md, item 10). Whole-batch HSV
    held about 13 bytes per image byte (244 MiB at 16 x 640 px) with the lookup used before
    session 49 and 4 with today's, plus 257 KiB of channel tables an image; a chunk holds a
    bounded slice of that. Each pixel's result depends on that pixel's bytes and its image's
    draws alone, so chunks give the whole batch's bits
    (``tests/train/data/test_augment_device_pixels.py``).

    The conversion tables (:class:`~lucid_yolo.train.data.augment.hsv.HsvTables`, 98 MiB) are
    built at the first batch that needs them and kept for the device.

    Args:
        chunk_pixels: images are finished ``max(1, chunk_pixels // (H * W + T))`` at a time,
            where ``T`` (21,930) is the pixels whose lookup temporaries weigh what one image's
            channel tables do (:data:`~lucid_yolo.train.data.augment.hsv.JITTER_TABLE_BYTES`),
            so that many small images do not make a chunk of tables; at most
            :data:`~lucid_yolo.train.data.augment.hsv.MAX_LOOKUP_IMAGES`.
        replay: on a CUDA device, replay the work from a CUDA graph per batch shape (a
            :class:`~lucid_yolo.replay.ForwardRecorder` on the images' device). Each recording
            keeps a static copy of the images it reads and, in its pool, the finished copy it
            writes and one chunk's temporaries (about 47 MB at 640 px with the default chunk);
            the first batch of a shape runs eagerly, the second records. No effect on the
            CPU. The data module sets it as the fit replays (``AugmentConfig.pixels_replayed``).
        pool_for: the memory pool the graphs record into on a device; ``None``: a pool of
            their own. The data module gives the training step's pool when the fit replays:
            the pixel work runs between steps, when that pool's free blocks (the step's
            scratch) hold nothing, so its chunk's temporaries take them instead of a pool
            beside them (issue 11, memory: 39 of the 44 MB such a pool held at detect batch 4).

    Example:
        ``batch = DevicePixels()(batch)`` after the batch was moved to the device.
    """

    def __init__(
        self,
        chunk_pixels: int = CHUNK_PIXELS,
        *,
        replay: bool = False,
        pool_for: Callable[[torch.device], ReplayPool] | None = None,
    ) -> None:
        if chunk_pixels < 1:
            raise TrainConfigError(
                f"chunk_pixels={chunk_pixels!r} must be at least 1; the default, "
                f"{CHUNK_PIXELS}, finishes nine 640 px images at a time"
            )
        self.chunk_pixels = chunk_pixels
        self._replay = replay
        self._pool_for = pool_for
        self._regions: dict[torch.device, _FinishImages] = {}
        self._replays: dict[torch.device, ForwardRecorder] = {}

    @property
    def replay(self) -> bool:
        """Whether the work replays on a CUDA device; turned off, the graphs recorded so far and
        their pools are let go (a data module reused by a fit without graphs)."""
        return self._replay

    @replay.setter
    def replay(self, on: bool) -> None:
        self._replay = on
        if not on:
            self._replays.clear()

    @property
    def pool_for(self) -> Callable[[torch.device], ReplayPool] | None:
        """Where the graphs record (``None``: a pool of their own); changed, the graphs recorded
        so far are let go, so every later one records in the new pool."""
        return self._pool_for

    @pool_for.setter
    def pool_for(self, pool_for: Callable[[torch.device], ReplayPool] | None) -> None:
        self._pool_for = pool_for
        self._replays.clear()

    @property
    def telemetry(self) -> Telemetry:
        """The replays' counters over every device (all zero where nothing replayed)."""
        return merge_telemetry(*(recorder.telemetry for recorder in self._replays.values()))

    def __call__(self, batch: Batch) -> Batch:
        """``batch`` with its images and masks finished and the ``deferred_*`` keys removed.

        The images are written in place: the batch owns them (the copy Lightning made on the
        device). A batch without deferred work (evaluation, or pixels finished in the workers)
        is returned untouched.
        """
        gains = batch.pop("deferred_hsv", None)
        flips = batch.pop("deferred_flip", None)
        if gains is not None or flips is not None:
            self._finish_images(batch["images"], gains, flips)
        packed = batch.pop("deferred_masks", None)
        if packed is not None:
            batch["masks"] = _unpack_bits(packed, batch["images"].shape[-1] // MASK_STRIDE)
        return batch

    def _finish_images(self, images: Tensor, gains: Tensor | None, flips: Tensor | None) -> None:
        device = images.device
        region = self._regions.get(device)
        if region is None:
            region = self._regions[device] = _FinishImages()
        image_pixels = images.shape[-2] * images.shape[-1] + TABLE_PIXELS
        step = max(1, min(MAX_LOOKUP_IMAGES, self.chunk_pixels // image_pixels))
        if not (self.replay and device.type == "cuda"):
            region.finish(images, gains, flips, step, into=images)
            return
        recorder = self._replays.get(device)
        if recorder is None:
            pool = ReplayPool(device) if self._pool_for is None else self._pool_for(device)
            recorder = self._replays[device] = ForwardRecorder(
                region, name="device pixels", max_signatures=MAX_SIGNATURES, pool=pool
            )
        with torch.no_grad():
            finished = cast(Tensor, recorder(images, gains, flips, step))
        images.copy_(finished)  # borrowed: the next replay rewrites it


class _FinishImages:
    """The pixel work as a replay region: a batch's images, gains and flips and the images a
    chunk holds in, the finished images out. It holds the conversion tables its graphs read, so
    they live as long as those graphs (built at the first batch with gains, which runs eagerly
    before any recording)."""

    def __init__(self) -> None:
        self._tables: HsvTables | None = None

    def __call__(
        self, images: Tensor, gains: Tensor | None, flips: Tensor | None, step: int
    ) -> Tensor:
        finished = torch.empty_like(images)
        self.finish(images, gains, flips, step, into=finished)
        return finished

    def region_modules(self) -> tuple[nn.Module, ...]:
        """None: the work reads no parameter or buffer, only the tables held here."""
        return ()

    def finish(
        self, images: Tensor, gains: Tensor | None, flips: Tensor | None, step: int, *, into: Tensor
    ) -> None:
        """HSV, then the mirror (the CPU path's order), ``step`` images at a time into ``into``
        (which may be ``images``)."""
        for start in range(0, images.shape[0], step):
            chunk = slice(start, start + step)
            finished = images[chunk]
            if gains is not None:
                tables = self._tables_on(images.device)
                finished = hsv_lookup(finished, jitter_tables(gains[chunk]), tables)
            if flips is None:
                into[chunk] = finished
            elif gains is None:  # ``finished`` may be ``into``'s own bytes: gathered apart first
                into[chunk] = finished.gather(-1, _source_columns(flips[chunk], finished))
            else:
                columns = _source_columns(flips[chunk], finished)
                torch.gather(finished, -1, columns, out=into[chunk])

    def _tables_on(self, device: torch.device) -> HsvTables:
        if self._tables is None:
            self._tables = HsvTables.on(device)
        return self._tables


def _source_columns(flips: Tensor, images: Tensor) -> Tensor:
    """The column each output pixel reads, mirrored where ``flips`` is set: the flip as one
    gather, which writes the finished chunk in the same pass as the copy out of the lookup's
    channels-last result (a mirrored copy and a ``where`` read the chunk three times). Returned
    as an expanded view of (B, W) indices, the shape of ``images``."""
    width = images.shape[-1]
    columns = torch.arange(width, device=images.device)
    source = torch.where(flips[:, None], (width - 1) - columns, columns)
    return source[:, None, None, :].expand(images.shape)


def _unpack_bits(packed: Tensor, width: int) -> Tensor:
    """``np.packbits(..., axis=-1)`` undone: (..., ceil(width / 8)) uint8, the first pixel in
    each byte's high bit -> (..., width) uint8 0/1. One tensor of the unpacked size is
    allocated (two when ``width`` is not a multiple of 8: the trimmed copy)."""
    shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=packed.device)
    bits = (packed[..., None] >> shifts).bitwise_and_(1)  # (..., bytes, 8)
    return bits.flatten(-2)[..., :width].contiguous()


__all__ = ["MAX_SIGNATURES", "DevicePixels"]
