"""MuSGD: Muon-style orthogonalised momentum for matrices blended with SGD, plain SGD for vectors.

YOLO26 trains with MuSGD, a hybrid of SGD with Nesterov momentum (the YOLO default for years) and
Muon (K. Jordan et al., 2024), whose orthogonalised updates move every singular direction of a
weight matrix equally. This module is our own formulation of that idea; the rule for one step of a
parameter ``p`` with gradient ``g`` and momentum buffer ``m`` (state, zero at construction) is::

    m ← μ·m + g
    d ← μ·m + g                       (Nesterov; d ← m without it)
    vectors (ndim < 2):   u ← d
    matrices (ndim ≥ 2):  u ← w_muon · s · NS(reshape(d, (out, in·k·k))) + w_sgd · d
    p ← p · (1 − lr·λ) − lr · u       (decoupled weight decay λ, applied to the pre-step weights)

``NS`` is the 5-step quintic Newton–Schulz orthogonalisation (:mod:`.newton_schulz`) and
``s = max(1, rows/cols)^0.5`` the shape factor of Muon's reference implementation: it keeps the
per-entry size of the orthogonal update of a tall matrix (more outputs than fan-in) comparable to
that of a wide one. The blend ``u = w_muon·muon_dir + w_sgd·sgd_dir`` (defaults 0.5/0.5) keeps the
SGD term, which reacts to the gradient's magnitude, next to the Muon term, which only sees its
direction. Depthwise conv weights ``(C, 1, k, k)`` are matrices too: tall ``C × k²`` ones.

Cost: the orthogonalisation is about 9.5 GFLOP per step for yolo26n (docs/engineering/musgd-ema.md),
about 17 GFLOP once padded into stacks (below, CUDA only by default): negligible on a GPU, a
large part of a CPU step (0.4-1.1 s on one core, padded or not). On a
GPU the cost is the number of kernels: about 20 per stack (norm, 5 iterations of 3 products with
their scalings fused, shape factor), 6 stacks for yolo26n.

Graph safety (docs/replay-invariants.md, invariant 15): the native ``step`` is the
exact op sequence a CUDA-graph update replay records, so

- every numeric hyperparameter of a group (``lr``, ``momentum``, ``weight_decay``, ``muon_weight``,
  ``sgd_weight``) is a 0-dim float32 tensor on the group's device; schedules change it in place
  (``group["lr"].fill_(v)``) and a recorded graph sees the new value;
- the padded stacks' gather indices and per-matrix shape factors are device tensors made at
  construction (:class:`.shape_buckets.ShapeBuckets`);
- momentum buffers are created at construction, so the first step allocates no state;
- ``step`` has no ``.item()``, no ``nonzero`` and no Python branch on tensor values; the only
  branches are structural (``nesterov``, which parameters have a gradient, parameter shapes);
- every elementwise op rounds once (no ``alpha=``, ``addcmul`` or ``lerp``), so the foreach,
  per-tensor, eager and graphed paths give the same bits;
- ``load_state_dict`` copies into the live tensors instead of replacing them, so addresses recorded
  in a graph stay valid after a checkpoint restore.

Matrices of all groups are orthogonalised together: transposed to wide, zero-padded into a few
stacks of equal shape (chosen at construction so that the padded FLOPs stay within
``ns_max_flop_ratio`` of the unpadded ones; on CUDA 6 stacks instead of 41 shapes for yolo26n),
one batched Newton–Schulz call per stack. Padding changes the rounding, not the math
(:mod:`.shape_buckets`); native and graphed steps run the same code and give the same bits.
Padding pays where a step's cost is its kernel launches (CUDA); on a CPU the cost is the FLOPs
and launches are cheap, so there matrices share a stack only with their own shape
(:data:`PADDED_FLOP_RATIOS`).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, overload

import torch
from torch import Tensor
from torch.optim.optimizer import Optimizer, ParamsT

from lucid_yolo.train.host_copy import HostCopies
from lucid_yolo.train.optim.errors import OptimizerConfigError, OptimizerStateError
from lucid_yolo.train.optim.shape_buckets import ShapeBuckets

__all__ = ["HYPERPARAMETERS", "NS_DTYPES", "PADDED_FLOP_RATIOS", "MuSGD"]

HYPERPARAMETERS: tuple[str, ...] = ("lr", "momentum", "weight_decay", "muon_weight", "sgd_weight")
"""Param-group keys held as 0-dim float32 device tensors (change them in place, never rebind)."""

_BatchKey = tuple[torch.dtype, torch.device]
"""Matrices of one dtype and device are orthogonalised together."""

PADDED_FLOP_RATIOS: dict[str, float] = {"cuda": 2.0}
"""``ns_max_flop_ratio`` by device type when MuSGD is given none; 1.0 (equal shapes only) for
any other type. On CUDA a yolo26n step's orthogonalisation is launch-bound: 6 padded stacks at
1.7-1.9x the unpadded FLOPs replace 41 per-shape calls (docs/engineering/musgd-ema.md, session
7). On one CPU core it is FLOP-bound: yolo26n's took 0.70-1.06 s a step padded and 0.37-0.43 s
unpadded (``tools/bench_orthogonalise_cpu.py``; docs/engineering/musgd-ema.md, session 39)."""

NS_DTYPES: dict[str, torch.dtype] = {"cuda": torch.bfloat16}
"""``ns_dtype`` by device type when MuSGD is given none; float32 for any other type. On CUDA the
orthogonalisation in float32 was 1.34 of a replayed yolo26n update's 2.46 ms a step and bfloat16
cuts it to 0.45 ms (H100; docs/engineering/whole-fit-speed.md, session 36), and bfloat16 passed a
non-inferiority check set before its fits ran (three seeds each way, detect batch 16, the
synthetic set; session 45); Muon's authors and the reference trainer iterate in bfloat16 too.
On a CPU bfloat16 products are slow (some 4 s a yolo26n update) and float32 is what the CPU
suite's recorded values hold."""


@dataclass
class _GroupPlan:
    """Parameters of one group that have a gradient this step, with their update directions."""

    vector_params: list[Tensor] = field(default_factory=list)
    vector_dirs: list[Tensor] = field(default_factory=list)
    matrix_params: list[Tensor] = field(default_factory=list)
    matrix_dirs: list[Tensor] = field(default_factory=list)
    matrix_orth: list[Tensor] = field(default_factory=list)


@dataclass(frozen=True)
class _MatrixBatch:
    """Every matrix parameter of one dtype and device, in group order, and their padded stacks."""

    params: list[Tensor]
    buckets: ShapeBuckets
    ns_dtype: torch.dtype


def _device_scalar(value: object, name: str, device: torch.device) -> Tensor:
    """Validate one hyperparameter and return it as a fresh 0-dim float32 tensor on ``device``."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise OptimizerConfigError(
                f"{name} must be a number or a 1-element tensor, got shape {tuple(value.shape)!r}"
            )
        number = float(value.detach().cpu())
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        raise OptimizerConfigError(f"{name} must be a number, got {value!r}")
    if not number >= 0.0 or number == float("inf"):
        raise OptimizerConfigError(f"{name} must be finite and >= 0, got {number!r}")
    if name == "momentum" and number >= 1.0:
        raise OptimizerConfigError(f"momentum must be in [0, 1), got {number!r}")
    return torch.tensor(number, dtype=torch.float32, device=device)


class MuSGD(Optimizer):
    """Muon-style orthogonalised momentum for matrices, SGD for vectors; capturable native step.

    Args:
        params: parameters or param-group dicts (see :func:`param_groups`). Every group must hold
            parameters of a single device; build the optimiser after moving the model there.
        lr: learning rate.
        momentum: momentum factor ``μ`` of the shared buffer.
        weight_decay: decoupled weight decay ``λ`` (scaled by ``lr``).
        nesterov: use the Nesterov direction ``μ·m + g`` instead of ``m``.
        muon_weight: weight ``w_muon`` of the orthogonalised direction for matrices.
        sgd_weight: weight ``w_sgd`` of the SGD direction for matrices.
        ns_steps: Newton–Schulz iterations.
        ns_dtype: compute dtype of the orthogonalisation. ``None``: by the matrices' device
            (:data:`NS_DTYPES`: bfloat16 on CUDA, float32 elsewhere).
        ns_max_flop_ratio: matrices of different shapes share a zero-padded Newton–Schulz stack
            as long as the padded FLOPs stay within this multiple of the unpadded ones (2.0: a
            handful of stacks, twice the FLOPs); 1.0 stacks only equal shapes. ``None``: by the
            matrices' device (:data:`PADDED_FLOP_RATIOS`: 2.0 on CUDA, 1.0 elsewhere).

    Raises:
        OptimizerConfigError: for a negative or non-finite hyperparameter, ``momentum >= 1``,
            ``ns_steps < 0``, ``ns_max_flop_ratio < 1``, an empty group or a group spanning
            devices.

    Example:
        >>> from lucid_yolo.train.optim import MuSGD, param_groups
        >>> net = torch.nn.Conv2d(3, 8, 3)
        >>> opt = MuSGD(param_groups(net, weight_decay=5e-4), lr=0.01)
        >>> opt.param_groups[0]["lr"].fill_(0.005)  # a schedule writes in place
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 0.01,
        momentum: float = 0.937,
        weight_decay: float = 0.0,
        *,
        nesterov: bool = True,
        muon_weight: float = 0.5,
        sgd_weight: float = 0.5,
        ns_steps: int = 5,
        ns_dtype: torch.dtype | None = None,
        ns_max_flop_ratio: float | None = None,
    ) -> None:
        if ns_steps < 0:
            raise OptimizerConfigError(f"ns_steps must be >= 0, got {ns_steps!r}")
        if ns_dtype is not None and not ns_dtype.is_floating_point:
            raise OptimizerConfigError(f"ns_dtype must be a floating dtype, got {ns_dtype!r}")
        if ns_max_flop_ratio is not None and not 1.0 <= ns_max_flop_ratio < float("inf"):
            raise OptimizerConfigError(
                f"ns_max_flop_ratio must be finite and >= 1.0 (1.0 stacks only equal shapes), "
                f"got {ns_max_flop_ratio!r}"
            )
        self.ns_steps = ns_steps
        self.ns_dtype = ns_dtype
        self.ns_max_flop_ratio = ns_max_flop_ratio
        self.update_runner: Callable[[], None] | None = None
        """Runs in place of :meth:`apply_update` when set: the trainer installs a step that
        also blends the EMA and can replay both from one CUDA graph (``train.update_step``)."""
        self._matrix_batches: list[_MatrixBatch] = []
        defaults: dict[str, Any] = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "muon_weight": muon_weight,
            "sgd_weight": sgd_weight,
        }
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group, turning its hyperparameters into device tensors and creating its state.

        Raises:
            OptimizerConfigError: for an empty group, parameters on several devices or a bad
                hyperparameter value; the optimiser is left without the group.
        """
        super().add_param_group(param_group)
        try:
            self._init_group(self.param_groups[-1])
        except OptimizerConfigError:
            self.param_groups.pop()
            raise
        self._matrix_batches = self._plan_matrix_batches()

    def _init_group(self, group: dict[str, Any]) -> None:
        """Validate a normalised group, then make its device hyperparameters and state."""
        params: list[Tensor] = group["params"]
        devices = {p.device for p in params}
        if len(devices) != 1:
            raise OptimizerConfigError(
                f"each MuSGD param group needs parameters on exactly one device, got "
                f"{sorted(map(str, devices))!r}; drop empty groups or split them by device"
            )
        (device,) = devices
        hypers = {key: _device_scalar(group[key], key, device) for key in HYPERPARAMETERS}
        group.update(hypers)
        for p in params:
            self.state[p]["momentum_buffer"] = torch.zeros_like(
                p, memory_format=torch.preserve_format
            )

    def _plan_matrix_batches(self) -> list[_MatrixBatch]:
        """Group every matrix parameter by dtype and device and make its padded stacks."""
        params: dict[_BatchKey, list[Tensor]] = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim >= 2:
                    params.setdefault((p.dtype, p.device), []).append(p)
        return [
            _MatrixBatch(
                matrices,
                ShapeBuckets(matrices, max_flop_ratio=self._flop_ratio(device)),
                self.ns_dtype_for(device),
            )
            for (_, device), matrices in params.items()
        ]

    def _flop_ratio(self, device: torch.device) -> float:
        """The padded stacks' FLOP budget for matrices on ``device``."""
        if self.ns_max_flop_ratio is not None:
            return self.ns_max_flop_ratio
        return PADDED_FLOP_RATIOS.get(device.type, 1.0)

    def ns_dtype_for(self, device: torch.device) -> torch.dtype:
        """The compute dtype of the orthogonalisation of matrices on ``device``."""
        if self.ns_dtype is not None:
            return self.ns_dtype
        return NS_DTYPES.get(device.type, torch.float32)

    @property
    def ns_stack_shapes(self) -> list[tuple[int, int, int]]:
        """``(B, R, C)`` of every padded Newton–Schulz stack, one batched call each per step."""
        return [shape for batch in self._matrix_batches for shape in batch.buckets.stack_shapes]

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Apply one update to every parameter that has a gradient.

        Args:
            closure: optional callable that re-evaluates the model and returns the loss.

        Returns:
            The closure's loss, or ``None``.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.update_runner is None:
            self.apply_update()
        else:
            self.update_runner()
        return loss

    @torch.no_grad()
    def apply_update(self) -> None:
        """The update of every parameter with a gradient, without closure or runner.

        This is the op sequence a graphed update records: device ops on the parameters, the
        pre-created momentum buffers and the hyperparameter tensors, no host sync.
        """
        plans = [self._momentum_directions(group) for group in self.param_groups]
        self._orthogonalise_matrices(plans)
        for group, plan in zip(self.param_groups, plans, strict=True):
            self._apply(group, plan)

    def _momentum_directions(self, group: dict[str, Any]) -> _GroupPlan:
        """Update the momentum buffers of ``group`` and return the SGD directions ``d``."""
        plan = _GroupPlan()
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return plan
        grads = [p.grad for p in params if p.grad is not None]
        bufs = [self.state[p]["momentum_buffer"] for p in params]
        momentum: Tensor = group["momentum"]
        torch._foreach_mul_(bufs, momentum)
        torch._foreach_add_(bufs, grads)
        if group["nesterov"]:
            dirs = list(torch._foreach_mul(bufs, momentum))
            torch._foreach_add_(dirs, grads)
        else:
            dirs = bufs  # read-only from here on: nothing below writes into a direction
        for p, d in zip(params, dirs, strict=True):
            if p.ndim >= 2:
                plan.matrix_params.append(p)
                plan.matrix_dirs.append(d)
            else:
                plan.vector_params.append(p)
                plan.vector_dirs.append(d)
        return plan

    def _orthogonalise_matrices(self, plans: list[_GroupPlan]) -> None:
        """Fill ``matrix_orth`` with ``s · NS(d)``, one batched call per padded stack.

        The stacks hold every matrix parameter; one without a gradient this step enters as zeros
        (shapes stay fixed) and its result is dropped.
        """
        directions = {
            p: d
            for plan in plans
            for p, d in zip(plan.matrix_params, plan.matrix_dirs, strict=True)
        }
        results: dict[Tensor, Tensor] = {}
        for batch in self._matrix_batches:
            updates = []
            for index, p in enumerate(batch.params):
                d = directions.get(p)
                updates.append(batch.buckets.zeros_like(index) if d is None else d)
            orth = batch.buckets.orthogonalise(updates, steps=self.ns_steps, dtype=batch.ns_dtype)
            results.update(zip(batch.params, orth, strict=True))
        for plan in plans:
            plan.matrix_orth = [results[p] for p in plan.matrix_params]

    @staticmethod
    def _apply(group: dict[str, Any], plan: _GroupPlan) -> None:
        """``p ← p·(1 − lr·λ) − lr·u`` for every parameter of the plan."""
        if not plan.vector_params and not plan.matrix_params:
            return
        lr: Tensor = group["lr"]
        updates = list(plan.vector_dirs)
        if plan.matrix_params:
            matrix_updates = list(torch._foreach_mul(plan.matrix_orth, group["muon_weight"]))
            torch._foreach_add_(
                matrix_updates, torch._foreach_mul(plan.matrix_dirs, group["sgd_weight"])
            )
            updates += matrix_updates
        params = plan.vector_params + plan.matrix_params
        torch._foreach_mul_(params, 1.0 - lr * group["weight_decay"])
        torch._foreach_sub_(params, torch._foreach_mul(updates, lr))

    def state_dict(self) -> dict[str, Any]:
        """Return a snapshot of the state: hyperparameters and momentum buffers copied to the
        host (each its own contiguous tensor).

        A snapshot, because the step writes the live tensors in place; on the host, because a
        checkpoint, where Lightning asks for it, goes there anyway, and copies on the device
        would take room a replayed fit's memory does not keep free (their 10 MB at YOLO26n set
        the peak of a batch-4 fit, issue 11). The copies queue behind the device's work in one
        pinned buffer (:class:`~lucid_yolo.train.host_copy.HostCopies`), and the call waits for
        them once: at an epoch's end, where validation's metrics have been read on the host, that
        wait should be short (not timed).
        :meth:`load_state_dict` copies them back into the live tensors. The format is
        :class:`torch.optim.Optimizer`'s (``state`` keyed by parameter index, ``param_groups``
        with ``params`` as indices), so Lightning checkpoints and
        ``torch.load(weights_only=True)`` handle it unchanged.
        """
        packed = super().state_dict()
        # torch hands out the live per-parameter state dicts: rebuilt, never written
        entries = [*packed["state"].values(), *packed["param_groups"]]
        tensors = [v for entry in entries for v in entry.values() if isinstance(v, Tensor)]
        copies = iter(HostCopies(tensors).read())

        def on_host(entry: dict[str, Any]) -> dict[str, Any]:
            return {k: next(copies) if isinstance(v, Tensor) else v for k, v in entry.items()}

        state = {index: on_host(entry) for index, entry in packed["state"].items()}
        groups = [on_host(group) for group in packed["param_groups"]]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict by copying into the live tensors, keeping their addresses.

        Raises:
            ValueError: (from :class:`torch.optim.Optimizer`) when group counts or sizes differ.
            OptimizerStateError: when a group lacks a MuSGD hyperparameter or a momentum buffer
                has another shape than its parameter; nothing is changed then.
        """
        self._check_loadable(state_dict)
        live_hypers = [{k: group[k] for k in HYPERPARAMETERS} for group in self.param_groups]
        params = [p for group in self.param_groups for p in group["params"]]
        live_buffers = {p: self.state[p]["momentum_buffer"] for p in params}
        super().load_state_dict(state_dict)
        for group, hypers in zip(self.param_groups, live_hypers, strict=True):
            for key, live in hypers.items():
                live.copy_(torch.as_tensor(group[key]))
                group[key] = live
        for p, live in live_buffers.items():
            loaded = self.state[p].get("momentum_buffer")
            if loaded is None:
                live.zero_()
            else:
                live.copy_(loaded)
            self.state[p]["momentum_buffer"] = live

    def _check_loadable(self, state_dict: dict[str, Any]) -> None:
        """Reject, before anything is changed, what an in-place copy would get wrong silently."""
        saved_groups: list[dict[str, Any]] = state_dict["param_groups"]
        for index, saved in enumerate(saved_groups):
            missing = [k for k in HYPERPARAMETERS if k not in saved]
            if missing:
                raise OptimizerStateError(
                    f"param group {index} of the state dict lacks {missing!r}; "
                    "load a state dict saved by MuSGD"
                )
        saved_ids = [i for saved in saved_groups for i in saved["params"]]
        live_params = [p for group in self.param_groups for p in group["params"]]
        for saved_id, p in zip(saved_ids, live_params, strict=False):
            buf = state_dict["state"].get(saved_id, {}).get("momentum_buffer")
            if buf is not None and tuple(buf.shape) != tuple(p.shape):
                raise OptimizerStateError(
                    f"momentum buffer of shape {tuple(buf.shape)!r} does not fit a parameter of "
                    f"shape {tuple(p.shape)!r}; load a state dict saved from the same model"
                )
