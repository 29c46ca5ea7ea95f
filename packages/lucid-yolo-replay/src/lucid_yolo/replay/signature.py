"""Signatures: everything that must match for a recorded graph to stand in for a native call.

A CUDA graph replays fixed kernels on fixed addresses with every Python scalar baked in, and it
checks nothing at replay (docs/replay-invariants.md, "What fails silently at replay"). The
recorder therefore keys each recording on a :class:`Signature` built before every call, and
separately checks a :class:`Binding` of the region's identity (parameters, forward methods,
hooks) whose change cannot be fixed by recording again and retires the recorder (invariants 7-12
of that page).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter, call, is_, itemgetter, methodcaller
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor, nn

from lucid_yolo.replay._getters import IS_SET, REQUIRES_GRAD
from lucid_yolo.replay.retire import RetireReason

Scalar = bool | int | float | str | None
"""Non-tensor arguments a region may take: they are baked into the recording, so keyed on."""

_SCALAR_TYPES = (bool, int, float, str, type(None))
_GLOBAL_HOOK_DICTS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)


@dataclass(frozen=True)
class TensorSpec:
    """What a static buffer must match: never a pointer alone (invariant 7)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool

    @classmethod
    def of(cls, tensor: Tensor) -> TensorSpec:
        """Spec of ``tensor`` (any shape, dtype, device)."""
        return cls(
            tuple(tensor.shape), tensor.stride(), tensor.dtype, tensor.device, tensor.requires_grad
        )

    def empty(self) -> Tensor:
        """A fresh uninitialised tensor with exactly this shape, stride, dtype and device."""
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=self.device)


@dataclass(frozen=True)
class Signature:
    """The per-call key of a recording.

    Attributes:
        inputs: a :class:`TensorSpec` per tensor argument, the value itself per scalar argument.
        autocast: ``(enabled, dtype, cache_enabled)`` of autocast on the region's device type
            (invariant 8; nothing checks autocast at replay).
        training: every submodule's ``training`` flag, in ``modules()`` order (invariant 9).
        requires_grad: every parameter's ``requires_grad``.
        scalars: every submodule's public scalar attributes (BN momentum/eps, dropout ``p`` ...),
            which a graph bakes in (invariant 12).
        backend: TF32, reduced-precision reduction, cuDNN, determinism and SDPA flags, baked at
            capture (invariant 12).
    """

    inputs: tuple[TensorSpec | Scalar, ...]
    autocast: tuple[bool, torch.dtype, bool]
    training: tuple[bool, ...]
    requires_grad: tuple[bool, ...]
    scalars: tuple[object, ...]
    backend: tuple[object, ...]


class UnsupportedInputError(TypeError):
    """An argument the recorder cannot key on; the call runs native (``unsupported-input``)."""


def input_specs(args: Sequence[object]) -> tuple[TensorSpec | Scalar, ...]:
    """Key of the positional arguments of a call.

    Raises:
        UnsupportedInputError: for an argument that is neither a tensor nor a Python scalar.
    """
    specs: list[TensorSpec | Scalar] = []
    for i, arg in enumerate(args):
        if isinstance(arg, Tensor):
            specs.append(TensorSpec.of(arg))
        elif isinstance(arg, _SCALAR_TYPES):
            specs.append(arg)
        else:
            raise UnsupportedInputError(
                f"argument {i} is a {type(arg).__name__!r}: a replayed region takes tensors and "
                "Python scalars only; pass containers as separate tensor arguments"
            )
    return tuple(specs)


def backend_flags() -> tuple[object, ...]:
    """Global numerics flags that a graph bakes in at capture."""
    cuda, cudnn = torch.backends.cuda, torch.backends.cudnn
    return (
        cuda.matmul.allow_tf32,
        cuda.matmul.allow_fp16_reduced_precision_reduction,
        cuda.matmul.allow_bf16_reduced_precision_reduction,
        getattr(cuda.matmul, "fp32_precision", None),
        torch.get_float32_matmul_precision(),
        cudnn.enabled,
        cudnn.allow_tf32,
        cudnn.benchmark,
        cudnn.deterministic,
        getattr(cudnn, "fp32_precision", None),
        torch.are_deterministic_algorithms_enabled(),
        *(_call_flag(cuda, name) for name in _SDPA_FLAGS),
    )


_SDPA_FLAGS = ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled")


def _call_flag(namespace: object, name: str) -> bool:
    getter: Callable[[], bool] = getattr(namespace, name)
    return getter()


def autocast_state(device_type: str) -> tuple[bool, torch.dtype, bool]:
    """``(enabled, dtype, cache_enabled)`` of autocast for ``device_type`` (``"cuda"``...)."""
    return (
        torch.is_autocast_enabled(device_type),
        torch.get_autocast_dtype(device_type),
        torch.is_autocast_cache_enabled(),
    )


def _scalar_attrs(module: nn.Module) -> tuple[str, ...]:
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or name == "training":
            continue
        if isinstance(value, _SCALAR_TYPES) or (
            isinstance(value, tuple) and all(isinstance(v, _SCALAR_TYPES) for v in value)
        ):
            names.append(name)
    return tuple(sorted(names))


_HOOK_REGISTRIES = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")
_OPTIONAL_HOOK_REGISTRY = methodcaller("get", "_backward_pre_hooks")
_TENSOR_HOOKS = (attrgetter("_backward_hooks"), attrgetter("_post_accumulate_grad_hooks"))
_INSTANCE_FORWARD = methodcaller("get", "forward")
_CLASS_FORWARD = attrgetter("forward")
_TRAINING = itemgetter("training")


def _any_hooks(dicts: Sequence[dict[str, Any]]) -> bool:
    """Whether any module (given by its ``__dict__``) has a hook; a C-level pass per registry."""
    return any(any(map(itemgetter(name), dicts)) for name in _HOOK_REGISTRIES) or any(
        map(_OPTIONAL_HOOK_REGISTRY, dicts)
    )


def _has_hooks(registry: dict[str, Any]) -> bool:
    return _any_hooks((registry,))


def _any_tensor_hooks(tensors: Sequence[Tensor]) -> bool:
    """Whether any of ``tensors`` has a tensor or post-accumulate-grad hook."""
    return any(any(map(get, tensors)) for get in _TENSOR_HOOKS)


def _has_tensor_hooks(tensor: Tensor) -> bool:
    return _any_tensor_hooks((tensor,))


def _global_hook_count() -> int:
    registry = nn.modules.module
    return sum(len(getattr(registry, name, ())) for name in _GLOBAL_HOOK_DICTS)


def _same_objects(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(map(is_, a, b))


class _Registries(NamedTuple):
    """Every submodule's registered parameters and buffers (``None`` slots left out) and
    children, each flattened into one list, plus how many children each module holds.

    Flat lists compared by identity in one C-level pass tell the same as comparing module by
    module, and a few hundred modules then cost microseconds instead of a Python loop.
    """

    parameters: list[Tensor]
    buffers: list[Tensor]
    children: list[nn.Module | None]
    child_counts: tuple[int, ...]

    @classmethod
    def of(cls, dicts: Sequence[dict[str, Any]]) -> _Registries:
        def entries(name: str) -> list[Any]:
            return list(chain.from_iterable(map(dict.values, map(itemgetter(name), dicts))))

        children = list(map(itemgetter("_modules"), dicts))
        return cls(
            parameters=list(filter(IS_SET, entries("_parameters"))),
            buffers=list(filter(IS_SET, entries("_buffers"))),
            children=list(chain.from_iterable(map(dict.values, children))),
            child_counts=tuple(map(len, children)),
        )

    def same_tensors(self, other: _Registries) -> bool:
        return _same_objects(self.parameters, other.parameters) and _same_objects(
            self.buffers, other.buffers
        )

    def same_children(self, other: _Registries) -> bool:
        return self.child_counts == other.child_counts and _same_objects(
            self.children, other.children
        )

    def child_ids(self) -> list[tuple[int, ...]]:
        """Per module, the ids of its children."""
        children = iter(self.children)
        return [tuple(id(next(children)) for _ in range(n)) for n in self.child_counts]


class Binding:
    """The identity of a region at recording time; a change retires the recorder.

    Captures, once: the submodules and each one's children (a replaced child is a replaced
    forward), their parameters and buffers (object identity and storage address, invariant 10),
    their ``forward`` (class attribute and any instance override, invariant 11) and the names of
    their scalar attributes. :meth:`check` compares on every call and :meth:`signature` builds
    the per-call :class:`Signature`; both read the modules' ``__dict__`` registries directly, in
    C-level passes (``map`` over getters), because going through ``Module.parameters()`` or a
    Python loop per module costs milliseconds per call on a few hundred modules, and a replayed
    step at small batch is bound by the host's work.

    Args:
        modules: the modules whose parameters and buffers the region reads.
    """

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        self.submodules: tuple[nn.Module, ...] = tuple(
            dict.fromkeys(sub for m in modules for sub in m.modules())
        )
        self._dicts: tuple[dict[str, Any], ...] = tuple(vars(m) for m in self.submodules)
        self._registries = _Registries.of(self._dicts)
        self.parameters: tuple[nn.Parameter, ...] = tuple(
            dict.fromkeys(cast(list[nn.Parameter], self._registries.parameters))
        )
        self.buffers: tuple[Tensor, ...] = tuple(self._registries.buffers)
        self._tensors = (*self.parameters, *self.buffers)
        self._storage = self._addresses()
        self._class_forwards = self._class_forward_ids()
        self._instance_forwards = self._instance_forward_ids()
        scalar_names = tuple(map(_scalar_attrs, self.submodules))
        self._scalar_dicts = tuple(
            d for d, names in zip(self._dicts, scalar_names, strict=True) if names
        )
        self._scalar_getters = tuple(itemgetter(*names) for names in scalar_names if names)

    def _addresses(self) -> tuple[int, ...]:
        return tuple(map(Tensor.data_ptr, self._tensors))

    def _class_forward_ids(self) -> tuple[int, ...]:
        return tuple(map(id, map(_CLASS_FORWARD, map(type, self.submodules))))

    def _instance_forward_ids(self) -> tuple[int, ...]:
        return tuple(map(id, map(_INSTANCE_FORWARD, self._dicts)))

    def check(self) -> tuple[RetireReason, str] | None:
        """Return why the region can no longer replay, or ``None`` when it still can."""
        registries = _Registries.of(self._dicts)
        if not registries.same_tensors(self._registries):
            return RetireReason.PARAMETER_REPLACED, (
                "a parameter or buffer object was replaced (load_state_dict(assign=True), "
                "to(), re-registration); build a new recorder after changing the module"
            )
        if self._addresses() != self._storage:
            return RetireReason.PARAMETER_REPLACED, (
                "a parameter's storage moved (`.data =` assignment or resize); update values "
                "in place with copy_() instead"
            )
        class_forwards, instance_forwards = self._class_forward_ids(), self._instance_forward_ids()
        if class_forwards != self._class_forwards or instance_forwards != self._instance_forwards:
            altered = [
                type(m).__name__
                for m, now, then, own, was in zip(
                    self.submodules,
                    class_forwards,
                    self._class_forwards,
                    instance_forwards,
                    self._instance_forwards,
                    strict=True,
                )
                if (now, own) != (then, was)
            ]
            return RetireReason.FORWARD_ALTERED, (
                f"forward of {altered[:3]!r} was replaced; the graph would run the old code"
            )
        if not registries.same_children(self._registries):
            replaced = [
                type(m).__name__
                for m, now, then in zip(
                    self.submodules,
                    registries.child_ids(),
                    self._registries.child_ids(),
                    strict=True,
                )
                if now != then
            ]
            return RetireReason.FORWARD_ALTERED, (
                f"a submodule of {replaced[:3]!r} was replaced by another module (e.g. "
                "SyncBatchNorm.convert_sync_batchnorm); the graph would run the old one: build a "
                "new recorder after changing the module tree"
            )
        if _global_hook_count() or _any_hooks(self._dicts):
            pairs = zip(self.submodules, self._dicts, strict=True)
            hooked = [type(m).__name__ for m, d in pairs if _has_hooks(d)]
            where = f"on {hooked[:3]!r}" if hooked else "registered globally"
            return RetireReason.MODULE_HOOKS, (
                f"module hooks {where} would not fire at replay; remove them or run native"
            )
        if _any_tensor_hooks(self.parameters):
            hooked_params = [i for i, p in enumerate(self.parameters) if _has_tensor_hooks(p)]
            return RetireReason.PARAMETER_HOOKS, (
                f"parameters {hooked_params[:3]!r} carry tensor or post-accumulate-grad hooks, "
                "which the replayed backward cannot call"
            )
        return None

    def signature(self, args: Sequence[object], device_type: str) -> Signature:
        """The :class:`Signature` of a call with positional ``args``.

        Raises:
            UnsupportedInputError: for an argument that is neither a tensor nor a scalar.
        """
        return Signature(
            inputs=input_specs(args),
            autocast=autocast_state(device_type),
            training=tuple(map(_TRAINING, self._dicts)),
            requires_grad=tuple(map(REQUIRES_GRAD, self.parameters)),
            scalars=tuple(map(call, self._scalar_getters, self._scalar_dicts)),
            backend=backend_flags(),
        )


__all__ = [
    "Binding",
    "Scalar",
    "Signature",
    "TensorSpec",
    "UnsupportedInputError",
    "autocast_state",
    "backend_flags",
    "input_specs",
]
