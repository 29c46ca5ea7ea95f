"""The set-up's objects are frozen for training, garbage first collected, and unfrozen after."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from gc_frozen import is_frozen
from lightning.pytorch.demos.boring_classes import BoringModel
from quiet_trainer import quiet_cpu_trainer

from lucid_yolo.train.callbacks import SetUpObjectsFrozen


class _Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def _collector_as_it_was() -> Iterator[None]:
    assert gc.isenabled()
    yield
    gc.unfreeze()
    gc.enable()


def _call(callback: SetUpObjectsFrozen, hook: str, *args: Any) -> None:
    getattr(callback, hook)(None, None, *args)


def test_training_start_collects_the_set_up_s_garbage_then_freezes_the_rest() -> None:
    callback = SetUpObjectsFrozen()
    garbage = _Cycle()
    dead = weakref.ref(garbage)
    alive = _Cycle()
    del garbage
    _call(callback, "on_train_start")
    assert dead() is None
    assert is_frozen(alive)
    _call(callback, "teardown", "fit")
    assert not is_frozen(alive)


def test_objects_frozen_before_training_do_not_stop_the_freeze() -> None:
    gc.freeze()  # as a fresh CPython 3.12 starts: its permanent generation is not empty
    set_up = _Cycle()
    callback = SetUpObjectsFrozen()
    _call(callback, "on_train_start")
    assert is_frozen(set_up)
    _call(callback, "on_exception", RuntimeError("the fit failed"))
    assert not is_frozen(set_up)


def test_a_process_with_the_collector_off_is_left_alone() -> None:
    gc.disable()
    set_up = _Cycle()
    callback = SetUpObjectsFrozen()
    _call(callback, "on_train_start")
    assert not is_frozen(set_up)
    assert not gc.isenabled()


def test_a_callback_that_froze_nothing_unfreezes_nothing() -> None:
    frozen_by_the_process = _Cycle()
    gc.freeze()
    gc.disable()
    callback = SetUpObjectsFrozen()
    _call(callback, "on_train_start")
    _call(callback, "teardown", "fit")
    _call(callback, "on_exception", RuntimeError("the fit failed"))
    assert is_frozen(frozen_by_the_process)


class _WatchModelFrozen(pl.Callback):
    def __init__(self) -> None:
        self.frozen: list[bool] = []

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, *_: Any
    ) -> None:
        self.frozen.append(is_frozen(pl_module))


def test_a_fit_trains_frozen_and_ends_unfrozen() -> None:
    model = BoringModel()
    watch = _WatchModelFrozen()
    quiet_cpu_trainer(max_steps=2, callbacks=[SetUpObjectsFrozen(), watch]).fit(model)
    assert watch.frozen == [True, True]
    assert not is_frozen(model)


class _Failing(BoringModel):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if batch_idx == 1:
            raise RuntimeError("the step broke")
        return super().training_step(batch, batch_idx)


def test_a_fit_that_fails_in_training_ends_unfrozen_and_the_next_fit_freezes_again() -> None:
    failing = _Failing()
    with pytest.raises(RuntimeError, match="the step broke"):
        quiet_cpu_trainer(max_steps=3, callbacks=[SetUpObjectsFrozen()]).fit(failing)
    assert not is_frozen(failing)
    model = BoringModel()
    watch = _WatchModelFrozen()
    quiet_cpu_trainer(max_steps=1, callbacks=[SetUpObjectsFrozen(), watch]).fit(model)
    assert watch.frozen == [True]
    assert not is_frozen(model)


def test_a_fit_with_the_objects_frozen_ends_on_the_same_weights_as_without() -> None:
    weights = []
    for callbacks in ([], [SetUpObjectsFrozen()]):
        pl.seed_everything(7, verbose=False)
        model = BoringModel()
        quiet_cpu_trainer(max_steps=4, callbacks=callbacks).fit(model)
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
