"""Snapshot and in-place restore of the state that warm-up and capture would otherwise advance.

Warm-up runs real forwards: BatchNorm running statistics and ``num_batches_tracked`` move and the
RNG offset advances. Restoring with ``copy_`` keeps every address,
which the recorded graphs depend on (invariants 1 and 20 of docs/replay-invariants.md).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor


class StateSnapshot:
    """Copies of tensors and of the CPU and CUDA generator states, restorable in place.

    Args:
        tensors: tensors to restore by value (buffers, optionally parameters and grads).
        devices: CUDA devices whose default generator state to restore.
    """

    def __init__(self, tensors: Iterable[Tensor], devices: Iterable[torch.device] = ()) -> None:
        self._live = tuple(tensors)
        with torch.no_grad():
            self._saved = tuple(t.detach().clone() for t in self._live)
        self._cpu_rng = torch.get_rng_state()
        cuda_devices = [d for d in dict.fromkeys(devices) if d.type == "cuda"]
        self._cuda_rng = {d: torch.cuda.get_rng_state(d) for d in cuda_devices}
        self._cuda_generators = {d: _default_generator(d).clone_state() for d in cuda_devices}

    def restore(self, after_failed_capture: bool = False) -> None:
        """Write the saved values back in place and reset the generators.

        Args:
            after_failed_capture: the generator may still believe it is capturing; give it a
                clean copy of the saved state object instead of new values in the old one.
                After a successful capture the old object must stay: the graph holds it and
                advances its offset at every replay.
        """
        with torch.no_grad():
            for live, saved in zip(self._live, self._saved, strict=True):
                live.copy_(saved)
        torch.set_rng_state(self._cpu_rng)
        for device, state in self._cuda_rng.items():
            if after_failed_capture:
                _default_generator(device).graphsafe_set_state(self._cuda_generators[device])
            else:
                torch.cuda.set_rng_state(state, device)


def _default_generator(device: torch.device) -> torch.Generator:
    index = device.index if device.index is not None else torch.cuda.current_device()
    generator: torch.Generator = torch.cuda.default_generators[index]
    return generator


__all__ = ["StateSnapshot"]
