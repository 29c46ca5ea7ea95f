"""Byte digests of training state: the yardstick of every parity claim.

Parity is a statement about bits (docs/replay-invariants.md, invariant 21), so it is checked on
the raw bytes of every tensor rather than with ``allclose``. :func:`state_digest` flattens models,
optimizers, GradScalers, LR schedulers, EMA holders, plain tensors and nested containers into
named SHA-256 digests; :func:`first_difference` names the first tensor whose bytes differ.
"""

from __future__ import annotations

import ctypes
import hashlib
import numbers
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor


@runtime_checkable
class HasStateDict(Protocol):
    """Anything with a ``state_dict()``: modules, optimizers, GradScaler, LR schedulers."""

    def state_dict(self) -> Mapping[str, object]: ...


def tensor_digest(tensor: Tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and element bytes in logical (row-major) order.

    Strides are not part of the digest: two tensors with equal elements and different layouts
    hash equal, as they compare equal bitwise element by element.

    Args:
        tensor: any dense tensor, on any device; ``(*shape)``, any dtype.
    """
    data = tensor.detach().to("cpu").contiguous()
    raw = data.reshape(-1).view(torch.uint8) if data.numel() else data.new_empty(0)
    h = hashlib.sha256()
    h.update(f"{data.dtype}|{tuple(data.shape)}|".encode())
    # ctypes rather than .numpy(): the package must work where only torch is installed.
    h.update(ctypes.string_at(raw.data_ptr(), raw.numel()) if raw.numel() else b"")
    return h.hexdigest()


def state_digest(obj: object, prefix: str = "") -> dict[str, str]:
    """Digest every tensor and scalar reachable from ``obj``, keyed by a dotted path.

    Args:
        obj: a tensor, a Python scalar, ``None``, a mapping, a sequence, or an object with a
            ``state_dict()`` (module, optimizer, GradScaler, scheduler). Module gradients are
            not part of a module's state dict: pass :func:`grads_of` for them.
        prefix: key prefix, e.g. ``"model."``.

    Returns:
        ``{path: digest}`` in traversal order; scalars are stored as their ``repr``.

    Raises:
        TypeError: for an object of a type the digest cannot see into.
    """
    out: dict[str, str] = {}
    _walk(obj, prefix.rstrip("."), out)
    return out


def grads_of(module: torch.nn.Module) -> dict[str, Tensor | None]:
    """``{parameter name: .grad}`` of a module, for digesting gradients next to weights."""
    return {name: p.grad for name, p in module.named_parameters()}


def first_difference(a: Mapping[str, str], b: Mapping[str, str]) -> str | None:
    """Return the first key whose digest differs (or that only one side has), else ``None``."""
    for key in list(a) + [k for k in b if k not in a]:
        if a.get(key) != b.get(key):
            return key
    return None


def _walk(obj: object, path: str, out: dict[str, str]) -> None:
    if isinstance(obj, Tensor):
        out[path] = tensor_digest(obj)
    elif obj is None or isinstance(obj, (bool, str, numbers.Number, torch.dtype)):
        out[path] = repr(obj)
    elif isinstance(obj, HasStateDict):
        _walk(obj.state_dict(), path, out)
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            _walk(value, f"{path}.{key}" if path else str(key), out)
    elif isinstance(obj, Sequence):
        for i, value in enumerate(obj):
            _walk(value, f"{path}.{i}" if path else str(i), out)
    else:
        raise TypeError(
            f"state_digest cannot digest {type(obj).__name__!r} at {path or '<root>'!r}: "
            "pass tensors, scalars, containers of them, or objects with state_dict()"
        )


__all__ = ["HasStateDict", "first_difference", "grads_of", "state_digest", "tensor_digest"]
