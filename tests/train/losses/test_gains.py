"""Loss gains are applied in one place and reject unknown terms."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.train.losses import LossGains


def test_loss_gains_apply_multiplies_by_field() -> None:
    out = LossGains(box=2.0, cls=3.0).apply({"box": torch.tensor(1.5), "cls": torch.tensor(1.0)})
    assert out["box"].item() == 3.0
    assert out["cls"].item() == 3.0


def test_loss_gains_apply_rejects_unknown_term() -> None:
    with pytest.raises(KeyError, match=r"\['dfl'\] have no gain"):
        LossGains().apply({"dfl": torch.tensor(1.0)})
