"""Reading pickled ``.pt`` checkpoints without running any code they name.

An Ultralytics checkpoint is a pickled dict whose ``model`` (or ``ema``) entry is the network
object itself: unpickling it normally imports ``ultralytics`` and calls its classes. Instead, the
file is read in two steps, both without executing anything from it:

1. :func:`torch.serialization.get_unsafe_globals_in_checkpoint` lists the globals the pickle names
   beyond torch's own weights-only allowlist (tensors, storages, plain containers). Each must fall
   under :data:`STAND_IN_PREFIXES` or :data:`STAND_IN_NAMES`, the classes an Ultralytics checkpoint
   is made of (its modules, torch ``nn`` modules, numpy scalars and paths among the training
   arguments); any other name (``os.system``, ``builtins.eval`` …) refuses the file.
2. ``torch.load(weights_only=True)`` reads it with every listed global replaced by an inert
   :class:`StandIn` subclass: constructing one only records its arguments, restoring its state
   only stores the state dict. The weights-only unpickler keeps its own opcode restrictions, so
   nothing but tensors, containers and these stand-ins can come out.

The network's tensors are then collected from the stand-ins' ``_parameters``, ``_buffers`` and
``_modules`` under the names ``state_dict()`` would give them.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

import torch
from torch import Tensor

from lucid_yolo.models.exceptions import WeightsError

STAND_IN_PREFIXES: Final = ("ultralytics.", "torch.nn.modules.", "numpy.dtypes.")
"""Module prefixes whose classes a checkpoint may name: Ultralytics' networks and their torch
layers, and numpy's dtype classes (numpy scalars appear among saved metrics)."""

STAND_IN_NAMES: Final = frozenset(
    {
        "numpy.dtype",
        "numpy.ndarray",
        "numpy.core.multiarray.scalar",
        "numpy.core.multiarray._reconstruct",
        "numpy._core.multiarray.scalar",
        "numpy._core.multiarray._reconstruct",
        "pathlib.Path",
        "pathlib.PosixPath",
        "pathlib.WindowsPath",
        "types.SimpleNamespace",
        "argparse.Namespace",
    }
)
"""Single globals a checkpoint may name besides :data:`STAND_IN_PREFIXES` (numpy values and
paths in the saved training arguments and metrics)."""


class StandIn:
    """An inert replacement for a class that a checkpoint names.

    Attributes:
        qualified_name: the global the checkpoint named (set per subclass).
        call_args: positional arguments it was constructed with.
        state: what the pickle restored into it (a module's ``__dict__``), or ``None``.
    """

    qualified_name: ClassVar[str] = ""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.call_args = args
        self.state: object = None

    def __setstate__(self, state: object) -> None:
        self.state = state


@dataclass(frozen=True)
class PickledCheckpoint:
    """What a pickled checkpoint holds, as plain data.

    Attributes:
        tensors: the network's state dict as ``state_dict()`` names it (an Ultralytics network:
            ``model.<layer>.…``; a plain state dict: its own keys).
        class_names: class names by id, when the checkpoint carries them.
        config: the network's build configuration (Ultralytics' ``yaml`` dict), when present.
    """

    tensors: dict[str, Tensor]
    class_names: tuple[str, ...] | None
    config: Mapping[str, Any] | None


def _is_stand_in_allowed(name: str) -> bool:
    return name in STAND_IN_NAMES or name.startswith(STAND_IN_PREFIXES)


def _stand_in(name: str) -> type[StandIn]:
    return type(name.rsplit(".", 1)[-1], (StandIn,), {"qualified_name": name})


def read_pickled_checkpoint(path: Path) -> PickledCheckpoint:
    """Read a ``.pt`` file written by ``torch.save``: an Ultralytics checkpoint or a state dict.

    Args:
        path: the file.

    Returns:
        The network's tensors (the EMA network when the checkpoint has one, as Ultralytics
        itself prefers) and its metadata.

    Raises:
        WeightsError: the file is not a torch checkpoint, names a global outside the allowlist,
            or holds no network.
    """
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError) as error:
        raise WeightsError(
            f"{str(path)!r} is not a checkpoint written by torch.save ({error}); pass an "
            "Ultralytics .pt, a state dict saved with torch.save, or a .safetensors file"
        ) from error
    refused = sorted(name for name in names if not _is_stand_in_allowed(name))
    if refused:
        raise WeightsError(
            f"{str(path)!r} names {', '.join(repr(n) for n in refused)}, which no Ultralytics "
            "checkpoint needs; refusing to unpickle it. If you trust the file, re-save its "
            "weights as a plain state dict (torch.save(model.state_dict(), ...)) and pass that"
        )
    stand_ins: list[Callable[..., Any] | tuple[Callable[..., Any], str]] = [
        (_stand_in(name), name) for name in names
    ]
    try:
        with torch.serialization.safe_globals(stand_ins):
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError) as error:
        raise WeightsError(
            f"{str(path)!r} could not be read as weights only ({error}); re-save its weights as "
            "a plain state dict and pass that"
        ) from error
    return _checkpoint_contents(loaded, path)


def _checkpoint_contents(loaded: object, path: Path) -> PickledCheckpoint:
    if _is_state_dict(loaded):
        assert isinstance(loaded, dict)
        return PickledCheckpoint(dict(loaded), None, None)
    if isinstance(loaded, dict):
        for key in ("ema", "model"):
            entry = loaded.get(key)
            if isinstance(entry, StandIn):
                return _network_contents(entry, path)
            if entry is not None and _is_state_dict(entry):
                assert isinstance(entry, dict)
                return PickledCheckpoint(dict(entry), None, None)
    if isinstance(loaded, StandIn):
        return _network_contents(loaded, path)
    raise WeightsError(
        f"{str(path)!r} holds no network (a {type(loaded).__name__} without an 'ema' or 'model' "
        "entry); pass an Ultralytics .pt or a state dict"
    )


def _is_state_dict(value: object) -> bool:
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in value.items())
    )


def _network_contents(network: StandIn, path: Path) -> PickledCheckpoint:
    tensors: dict[str, Tensor] = {}
    _collect_tensors(network, "", tensors, path)
    state = network.state if isinstance(network.state, dict) else {}
    names = state.get("names")
    class_names = (
        tuple(str(names[i]) for i in sorted(names))
        if isinstance(names, dict) and all(isinstance(i, int) for i in names)
        else None
    )
    config = state.get("yaml")
    return PickledCheckpoint(tensors, class_names, config if isinstance(config, dict) else None)


def _collect_tensors(module: StandIn, prefix: str, out: dict[str, Tensor], path: Path) -> None:
    """Walk a pickled ``nn.Module`` tree in ``state_dict()`` order: parameters, persistent
    buffers, then submodules."""
    state = module.state
    if not isinstance(state, dict):
        raise WeightsError(
            f"{str(path)!r}: {module.qualified_name!r} at {prefix or 'the top'!r} carries no "
            "module state; the checkpoint is damaged or not a network"
        )
    transient = state.get("_non_persistent_buffers_set") or set()
    tensors = [*state.get("_parameters", {}).items()]
    tensors += [(k, v) for k, v in state.get("_buffers", {}).items() if k not in transient]
    for name, tensor in tensors:
        if tensor is None:
            continue
        if not isinstance(tensor, Tensor):
            raise WeightsError(
                f"{str(path)!r}: {prefix + name!r} is a {type(tensor).__name__}, not a tensor"
            )
        out[prefix + name] = tensor.detach()
    for name, child in state.get("_modules", {}).items():
        if child is None:
            continue
        if not isinstance(child, StandIn):
            raise WeightsError(
                f"{str(path)!r}: submodule {prefix + name!r} is a {type(child).__name__}, "
                "not a module"
            )
        _collect_tensors(child, f"{prefix}{name}.", out, path)


__all__ = [
    "STAND_IN_NAMES",
    "STAND_IN_PREFIXES",
    "PickledCheckpoint",
    "StandIn",
    "read_pickled_checkpoint",
]
