"""Host time of ``casting_weights``' own work a forward, its copies left out (CPU, no GPU).

Why (issue 11, session 47): the casts made together replace 276 dispatches of autocast's per
tensor casts a training step, but add Python of their own (collecting the tensors, the backward
nodes, the scope's mapping). A native step is paced by the host, so that Python must stay well
below what it replaces. This times the scopes of the backbone and neck and of the head, as
``YOLO26.features`` and ``YOLO26.predictions`` enter them, with the copies replaced by a no-op,
so that what remains is the scopes' host work alone; with grad off they cast nothing.

Run: ``python tools/weight_casts_host_cost.py [--model yolo26n] [--repeats 100]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from unittest import mock

import torch
from torch import Tensor

import lucid_yolo.models.weight_casts as weight_casts
from lucid_yolo.models import create_model


def _uncopied(tensors: Sequence[Tensor], dtypes: Sequence[torch.dtype]) -> tuple[Tensor, ...]:
    return tuple(t.detach() for t in tensors)


def per_forward_ms(model: str, repeats: int) -> dict[bool, float]:
    """Milliseconds of the two scopes' host work a forward, by grad mode."""
    net = create_model(model).train()
    net.casts_weights_together = True
    times: dict[bool, float] = {}
    with mock.patch.object(weight_casts, "_converted", _uncopied):
        for grad in (False, True):
            with torch.autocast("cpu", dtype=torch.bfloat16), torch.set_grad_enabled(grad):
                for _ in range(5):
                    with weight_casts.casting_weights(net.backbone, net.neck):
                        pass
                start = time.perf_counter()
                for _ in range(repeats):
                    with weight_casts.casting_weights(net.backbone, net.neck):
                        pass
                    with weight_casts.casting_weights(net.head):
                        pass
                times[grad] = (time.perf_counter() - start) / repeats * 1e3
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="yolo26n")
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args()
    for grad, ms in per_forward_ms(args.model, args.repeats).items():
        print(f"{args.model}, grad {'on' if grad else 'off'}: {ms:.3f} ms a forward")


if __name__ == "__main__":
    main()
