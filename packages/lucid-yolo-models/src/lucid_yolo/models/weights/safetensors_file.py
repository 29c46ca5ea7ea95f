"""The ``.safetensors`` format, read and written with torch alone.

A safetensors file is an 8-byte little-endian header length ``n``, ``n`` bytes of JSON mapping
each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (plus an optional
``"__metadata__"`` dict of strings), then the raw little-endian bytes of every tensor (read and
written in the host's order, little-endian on every platform torch ships for), offsets relative
to the end of the header. Nothing in it is executable, which is why it is the safe way to pass
weights around; the ``safetensors`` package is not a dependency of the models package, and the
format is simple enough to read here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import torch
from torch import Tensor

from lucid_yolo.models.exceptions import WeightsError

DTYPES: Final[dict[str, torch.dtype]] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
"""Format dtype codes and their torch dtypes."""

MAX_HEADER_BYTES: Final = 100 * 2**20
"""A header larger than this is a damaged or hostile file, not a network."""


def read_safetensors(path: Path) -> dict[str, Tensor]:
    """Read every tensor of a ``.safetensors`` file (on the CPU, in file order).

    Raises:
        WeightsError: the header is missing, too large, not JSON, or an entry's dtype, shape or
            offsets do not describe its bytes.
    """
    data = path.read_bytes()
    if len(data) < 8:
        raise WeightsError(f"{str(path)!r} is too short ({len(data)} bytes) to be safetensors")
    (header_size,) = struct.unpack("<Q", data[:8])
    if header_size > min(MAX_HEADER_BYTES, len(data) - 8):
        raise WeightsError(
            f"{str(path)!r}: header length {header_size!r} does not fit the file; it is not a "
            "safetensors file or it is truncated"
        )
    try:
        header = json.loads(data[8 : 8 + header_size])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise WeightsError(
            f"{str(path)!r}: the safetensors header is not JSON ({error})"
        ) from error
    if not isinstance(header, dict):
        raise WeightsError(f"{str(path)!r}: the safetensors header is not a JSON object")
    body = memoryview(data)[8 + header_size :]
    tensors: dict[str, Tensor] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(path, name, entry, body)
    return tensors


def _tensor(path: Path, name: str, entry: object, body: memoryview) -> Tensor:
    try:
        if not isinstance(entry, dict):
            raise TypeError(f"a {type(entry).__name__}")
        dtype = DTYPES[entry["dtype"]]
        shape = [int(s) for s in entry["shape"]]
        begin, end = (int(o) for o in entry["data_offsets"])
    except (KeyError, TypeError, ValueError) as error:
        raise WeightsError(
            f"{str(path)!r}: entry {name!r} is not a tensor description ({entry!r}); expected "
            f"dtype in {sorted(DTYPES)}, shape and data_offsets"
        ) from error
    count = 1
    for size in shape:
        count *= size
    item_size = torch.empty((), dtype=dtype).element_size()
    if not 0 <= begin <= end <= len(body) or end - begin != count * item_size:
        raise WeightsError(
            f"{str(path)!r}: entry {name!r} claims bytes [{begin}, {end}) for shape {shape!r} "
            f"{entry['dtype']}; the file is damaged"
        )
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(body[begin:end]), dtype=dtype).reshape(shape)


def write_safetensors(
    tensors: Mapping[str, Tensor], path: Path, metadata: Mapping[str, str] | None = None
) -> None:
    """Write ``tensors`` (moved to the CPU, made contiguous) as a ``.safetensors`` file.

    Raises:
        WeightsError: a tensor's dtype has no safetensors code.
    """
    codes = {dtype: code for code, dtype in DTYPES.items()}
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    chunks: list[bytearray] = []
    offset = 0
    for name, tensor in tensors.items():
        if tensor.dtype not in codes:
            raise WeightsError(
                f"{name!r} has dtype {tensor.dtype!r}, which safetensors cannot hold; convert it "
                f"to one of {sorted(str(d) for d in codes)}"
            )
        source = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        raw = bytearray(source.numel())
        if raw:
            torch.frombuffer(raw, dtype=torch.uint8).copy_(source)
        header[name] = {
            "dtype": codes[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format aligns the data to 8 bytes
    with path.open("wb") as file:
        file.write(struct.pack("<Q", len(encoded)))
        file.write(encoded)
        for chunk in chunks:
            file.write(chunk)


__all__ = ["DTYPES", "MAX_HEADER_BYTES", "read_safetensors", "write_safetensors"]
