"""The backup a replayed update takes of what it writes, for the late non-finite check."""

from __future__ import annotations

import torch

from lucid_yolo.train.replay.update_backup import UpdateBackup


def _tensors() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    state = [torch.arange(6.0).reshape(2, 3), torch.tensor(7, dtype=torch.int64)]
    schedule = [torch.tensor(0.01)]
    return state, schedule


def test_update_backup_restore_gives_back_the_saved_bits() -> None:
    state, schedule = _tensors()
    backup = UpdateBackup(lambda: state, lambda: schedule)
    saved = [t.clone() for t in state]
    backup.save()
    state[0].mul_(float("nan"))
    state[1].add_(1)
    backup.restore(schedule=False)
    assert all(torch.equal(a, b) for a, b in zip(state, saved, strict=True))


def test_update_backup_keeps_the_schedule_unless_asked() -> None:
    state, schedule = _tensors()
    backup = UpdateBackup(lambda: state, lambda: schedule)
    backup.save()
    schedule[0].fill_(0.5)
    backup.restore(schedule=False)
    assert float(schedule[0]) == 0.5
    backup.restore(schedule=True)
    assert float(schedule[0]) == torch.tensor(0.01).item()


def test_update_backup_follows_replaced_tensors() -> None:
    state, schedule = _tensors()
    backup = UpdateBackup(lambda: state, lambda: schedule)
    backup.save()
    state[0] = torch.ones(4)  # e.g. the model moved: new tensors
    backup.save()
    state[0].zero_()
    backup.restore(schedule=False)
    assert torch.equal(state[0], torch.ones(4))
    assert backup.nbytes == 4 * 4 + 8 + 4
