"""A batch as one buffer: one shared-memory handle, one pin and one copy to the device per batch.

Why (issue 11, session 7): a :class:`~lucid_yolo.train.data.batch.Batch` dict crosses from a
loader worker to the main process one tensor at a time. With torch's default sharing strategy
(``file_descriptor``) each tensor's storage travels as a file descriptor that the receiving
process fetches over its own connection to the worker; the DataLoader's pin-memory thread then
pins each tensor and Lightning copies each to the device: ten of each per detect batch, all in
Python threads of the process that also launches the replayed step. A :class:`PackedBatch` holds
every tensor field as a byte range of one ``uint8`` buffer, so a batch is one descriptor, one
pin and one copy; :meth:`PackedBatch.unpack` on the device gives back the Batch, each field a
view of the buffer with the dtype, shape and bytes :func:`~lucid_yolo.train.data.collate.collate`
gives it.

Fields start at multiples of :data:`ALIGNMENT` bytes, so every view is aligned for its dtype and
for vectorised kernels. Fields that are not arrays (``source_shapes``) travel beside the buffer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from lucid_yolo.train.data.batch import Batch

ALIGNMENT = 256
"""Bytes each field's range starts at a multiple of (CUDA's own allocations are 256-aligned)."""


@dataclass(frozen=True)
class PackedField:
    """Where one Batch field lies in the buffer.

    Attributes:
        key: the Batch key.
        dtype: the field's dtype.
        shape: the field's shape, batch dimension first.
        offset: the first byte in the buffer, a multiple of :data:`ALIGNMENT`.
    """

    key: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        """Bytes of the field."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class PackedBatch:
    """The tensor fields of one Batch in one ``uint8`` buffer, and the rest beside it.

    Build one with :meth:`stack` (in a loader worker); the DataLoader's pin-memory thread calls
    :meth:`pin_memory` and Lightning's transfer calls :meth:`to`, as for a tensor;
    :meth:`unpack` gives the Batch.

    Args:
        buffer: (bytes,) uint8, contiguous.
        fields: where each tensor field lies in ``buffer``.
        extras: Batch fields that are not tensors.
        keys: every Batch key in the order the Batch holds them.
    """

    def __init__(
        self,
        buffer: Tensor,
        fields: Sequence[PackedField],
        extras: Mapping[str, Any],
        keys: Sequence[str],
    ) -> None:
        self.buffer = buffer
        self.fields = tuple(fields)
        self.extras = dict(extras)
        self.keys = tuple(keys)

    @classmethod
    def stack(
        cls,
        columns: Mapping[str, Sequence[npt.NDArray[Any]] | Any],
    ) -> PackedBatch:
        """Stack each column's per-image arrays into its range of a new buffer.

        ``np.stack`` writes into the buffer itself, so packing costs no copy beyond the one
        collating does anyway.

        Args:
            columns: per Batch key in the Batch's order, one numpy array per image (all of one
                shape and dtype), or any other value, carried beside the buffer as it is.
        """
        arrays_of = {
            key: column for key, column in columns.items() if isinstance(column[0], np.ndarray)
        }
        extras = {key: column for key, column in columns.items() if key not in arrays_of}
        fields, offset = [], 0
        for key, arrays in arrays_of.items():
            first = arrays[0]
            dtype = torch.from_numpy(np.empty(0, first.dtype)).dtype
            field = PackedField(key, dtype, (len(arrays), *first.shape), offset)
            fields.append(field)
            offset += -(-field.nbytes // ALIGNMENT) * ALIGNMENT
        buffer = torch.empty(offset, dtype=torch.uint8)
        raw = buffer.numpy()
        for field in fields:
            arrays = arrays_of[field.key]
            out = raw[field.offset : field.offset + field.nbytes].view(arrays[0].dtype)
            np.stack(arrays, out=out.reshape(field.shape))
        return cls(buffer, fields, extras, tuple(columns))

    def pin_memory(self) -> PackedBatch:
        """The batch with its buffer in page-locked memory (the DataLoader's pin-memory thread
        calls this as it calls ``Tensor.pin_memory``)."""
        return PackedBatch(self.buffer.pin_memory(), self.fields, self.extras, self.keys)

    def to(self, device: torch.device | str) -> PackedBatch:
        """The batch with its buffer on ``device``: one copy, asynchronous to a GPU as Lightning
        copies tensors (the caching host allocator keeps a pinned source alive until it is
        done)."""
        target = torch.device(device)
        return PackedBatch(
            self.buffer.to(target, non_blocking=target.type == "cuda"),
            self.fields,
            self.extras,
            self.keys,
        )

    def unpack(self) -> Batch:
        """The Batch: each tensor field a view of the buffer, on the buffer's device."""
        views = {
            field.key: self.buffer[field.offset : field.offset + field.nbytes]
            .view(field.dtype)
            .view(field.shape)
            for field in self.fields
        }
        values = {**views, **self.extras}
        return cast(Batch, {key: values[key] for key in self.keys})


__all__ = ["ALIGNMENT", "PackedBatch", "PackedField"]
