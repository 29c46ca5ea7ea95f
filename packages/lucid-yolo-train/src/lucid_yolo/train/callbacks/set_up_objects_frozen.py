"""The set-up's Python objects kept out of the garbage collector's full passes while training.

A replayed step leaves the host little to do, so any pause of the thread that launches the graphs
is a pause of the GPU. CPython's full collection (its oldest generation) walks every container
object the process holds; after torch, Lightning and the model are set up that is about 550,000
objects, and on the H200 each full pass took 0.28-0.43 s, once every 7-8 epochs of a replayed
detect fit at batch 16 (session 17, ``tools/probe_fit_gap.py``). ``gc.freeze()`` moves every
object alive at that moment to a permanent generation that no collection walks; the full passes
that still come then took 4-9 ms.

One full collection runs first (0.32 s there, once a fit, where the fit without the freeze had
one of its own in its first epoch anyway), so that what the set-up already left as garbage is
freed, not kept for the whole fit. A process with its collector off is left alone.

Whether the process froze objects itself cannot be read from ``gc.get_freeze_count()``: CPython
3.12 moves the immortal objects a collection meets into the same permanent generation, so a
fresh 3.12 interpreter already counts 375 objects there (3.11 and 3.13 count none). A check on
that count skipped the freeze in every 3.12 process, the GPU machine's among them (session 18).
"""

from __future__ import annotations

import gc

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override


class SetUpObjectsFrozen(Callback):
    """Collect, then freeze, the process's objects when training starts; unfreeze when the fit
    ends, or fails.

    Training starts after the sanity check, so what it made is frozen with the rest, and before
    the first step, so the training graphs' recordings are not (nor the evaluation graph's, made
    at the first validation after them). Changes no result: the collector only decides when
    unreachable objects are freed, and every object frozen was reachable or freed by the collection
    just before. Objects that become garbage during the fit in a reference cycle with a frozen
    object wait until the unfreeze, which also unfreezes whatever other code froze, before the
    fit or during it (``gc.unfreeze`` takes them all).

    Lightning calls the callbacks' ``teardown`` only when a fit ends normally; a fit that raises
    reaches ``on_exception`` instead, which unfreezes too, so that a failed fit's objects (on a
    GPU, its device memory) are collected and the next fit in the process freezes afresh. A
    program that freezes objects itself and wants them to stay frozen after the fit leaves this
    callback out; the CLI's processes freeze nothing else.

    Example:
        ``Trainer(callbacks=[SetUpObjectsFrozen()])``; ``lucid-yolo fit`` adds it.
    """

    def __init__(self) -> None:
        self._froze = False

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._froze or not gc.isenabled():
            return
        gc.collect()
        gc.freeze()
        self._froze = True

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._unfreeze()

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._unfreeze()

    def _unfreeze(self) -> None:
        if self._froze:
            gc.unfreeze()
            self._froze = False


__all__ = ["SetUpObjectsFrozen"]
