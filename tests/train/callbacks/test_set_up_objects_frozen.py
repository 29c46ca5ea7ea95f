"""The set-up's objects are frozen for training, garbage first collected, and unfrozen after."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from quiet_trainer import quiet_cpu_trainer

from lucid_yolo.train.callbacks import SetUpObjectsFrozen


class _Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def _collector_as_it_was() -> Iterator[None]:
    assert gc.get_freeze_count() == 0
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
    assert gc.get_freeze_count() > 0
    assert not any(o is alive for o in gc.get_objects())  # frozen objects are not listed
    _call(callback, "teardown", "fit")
    assert gc.get_freeze_count() == 0
    assert any(o is alive for o in gc.get_objects())


def test_a_process_that_froze_objects_itself_keeps_them_frozen() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    callback = SetUpObjectsFrozen()
    _call(callback, "on_train_start")
    _call(callback, "teardown", "fit")
    assert gc.get_freeze_count() == frozen


def test_a_process_with_the_collector_off_is_left_alone() -> None:
    gc.disable()
    callback = SetUpObjectsFrozen()
    _call(callback, "on_train_start")
    assert gc.get_freeze_count() == 0
    assert not gc.isenabled()


def test_a_fit_trains_frozen_and_ends_unfrozen() -> None:
    counts: list[int] = []

    class Watch(pl.Callback):
        def on_train_batch_start(self, *_: Any) -> None:
            counts.append(gc.get_freeze_count())

    quiet_cpu_trainer(max_steps=2, callbacks=[SetUpObjectsFrozen(), Watch()]).fit(BoringModel())
    assert len(counts) == 2
    assert all(c > 0 for c in counts), counts
    assert gc.get_freeze_count() == 0


class _Failing(BoringModel):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if batch_idx == 1:
            raise RuntimeError("the step broke")
        return super().training_step(batch, batch_idx)


def test_a_fit_that_fails_in_training_ends_unfrozen_and_the_next_fit_freezes_again() -> None:
    with pytest.raises(RuntimeError, match="the step broke"):
        quiet_cpu_trainer(max_steps=3, callbacks=[SetUpObjectsFrozen()]).fit(_Failing())
    assert gc.get_freeze_count() == 0
    counts: list[int] = []

    class Watch(pl.Callback):
        def on_train_batch_start(self, *_: Any) -> None:
            counts.append(gc.get_freeze_count())

    quiet_cpu_trainer(max_steps=1, callbacks=[SetUpObjectsFrozen(), Watch()]).fit(BoringModel())
    assert counts[0] > 0
    assert gc.get_freeze_count() == 0


def test_a_fit_with_the_objects_frozen_ends_on_the_same_weights_as_without() -> None:
    weights = []
    for callbacks in ([], [SetUpObjectsFrozen()]):
        pl.seed_everything(7, verbose=False)
        model = BoringModel()
        quiet_cpu_trainer(max_steps=4, callbacks=callbacks).fit(model)
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
