"""The trainer's EMA (``trainer_ema``): ramp and blend by hand, buffers, accumulation, state."""

import copy
import io
import math
from collections.abc import Callable
from typing import Any

import lightning as L
import pytest
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from lucid_yolo.replay import ModelEMA
from lucid_yolo.train.optim import (
    MuSGD,
    OptimizerConfigError,
    WarmupLinearSchedule,
    param_groups,
    trainer_ema,
)

Backward = Callable[[nn.Module, int], None]


def _decay(n: int, decay: float = 0.9999, tau: float = 2000.0) -> float:
    return decay * (1.0 - math.exp(-n / tau))


def test_trainer_ema_counts_updates_on_the_model_device() -> None:
    model = nn.Linear(2, 2)
    ema = trainer_ema(model, decay=0.9, tau=3.0)
    for _ in range(5):
        ema.update()
    assert (ema.decay_on, ema.buffers) == ("device", "copy")
    assert ema.updates.dtype == torch.int64
    assert int(ema.updates) == 5


def test_trainer_ema_blend_by_hand() -> None:
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    ema = trainer_ema(model, decay=0.5, tau=1.0)
    expected = 1.0
    for n, weight in enumerate([3.0, -2.0, 5.0], start=1):
        with torch.no_grad():
            model.weight.fill_(weight)
        ema.update()
        d = _decay(n, 0.5, 1.0)
        expected = expected * d + weight * (1 - d)
        assert float(ema.module.weight) == pytest.approx(expected, rel=1e-6)


def test_trainer_ema_copies_buffers() -> None:
    model = nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2))
    ema = trainer_ema(model)
    model(torch.randn(2, 1, 4, 4))
    ema.update()
    assert torch.equal(ema.module[1].running_mean, model[1].running_mean)
    assert torch.equal(ema.module[1].running_var, model[1].running_var)
    assert int(ema.module[1].num_batches_tracked) == 1


def test_trainer_ema_copy_is_frozen_and_in_eval_mode() -> None:
    ema = trainer_ema(nn.Sequential(nn.Linear(2, 2), nn.Dropout()).train())
    assert not ema.module.training
    assert not any(p.requires_grad for p in ema.module.parameters())


def test_trainer_ema_under_accumulation_updates_once_per_optimizer_step(
    net: nn.Module, backward: Backward
) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.0), lr=0.01)
    ema = trainer_ema(net, decay=0.9, tau=2.0)
    expected = [p.detach().clone() for p in net.parameters()]
    micro_batches = 2
    for step in range(3):
        for micro in range(micro_batches):
            backward(net, step * micro_batches + micro)
        opt.step()
        opt.zero_grad()
        ema.update()
        d = _decay(step + 1, 0.9, 2.0)
        live = [p.detach() for p in net.parameters()]
        expected = [e * d + p * (1 - d) for e, p in zip(expected, live, strict=True)]
    assert int(ema.updates) == 3
    for e, p in zip(expected, ema.module.parameters(), strict=True):
        torch.testing.assert_close(p, e, rtol=1e-5, atol=1e-7)


class _Module(L.LightningModule):
    """Minimal LightningModule wiring MuSGD, the schedule and the EMA the documented way."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.SiLU(), nn.Linear(8, 1))
        self.ema: ModelEMA | None = None
        self.optimizer_steps = 0

    def on_fit_start(self) -> None:
        self.ema = trainer_ema(self.net)

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return (self.net(x) - y).pow(2).mean()

    def configure_optimizers(self) -> Any:
        opt = MuSGD(param_groups(self.net, weight_decay=5e-4), lr=0.01)
        schedule = WarmupLinearSchedule(opt, epochs=1, steps_per_epoch=4, warmup_steps=2)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        scheduler.step()

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        self.optimizer_steps += 1
        assert self.ema is not None
        self.ema.update()


@pytest.mark.filterwarnings(
    "ignore::lightning.fabric.utilities.warnings.PossibleUserWarning",  # few workers, tiny data
    "ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning",  # torch 2.15
)
def test_trainer_ema_lightning_accumulation_updates_once_per_optimizer_step() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    module = _Module()
    trainer = L.Trainer(
        max_epochs=1,
        accumulate_grad_batches=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, DataLoader(data, batch_size=2))
    assert module.ema is not None
    schedule = trainer.lr_scheduler_configs[0].scheduler
    assert isinstance(schedule, WarmupLinearSchedule)
    assert (module.optimizer_steps, int(module.ema.updates), schedule.optimizer_steps) == (4, 4, 4)


def test_trainer_ema_state_dict_round_trip(net: nn.Module, backward: Backward) -> None:
    ema = trainer_ema(net, decay=0.9, tau=2.0)
    opt = MuSGD(param_groups(net, weight_decay=0.0), lr=0.01)
    for step in range(2):
        backward(net, step)
        opt.step()
        ema.update()
    buffer = io.BytesIO()
    torch.save(ema.state_dict(), buffer)
    buffer.seek(0)
    resumed = trainer_ema(copy.deepcopy(net), decay=0.9, tau=2.0)
    pointers = [p.data_ptr() for p in resumed.module.parameters()]
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    saved, loaded = ema.module.state_dict(), resumed.module.state_dict()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
    assert int(resumed.updates) == 2
    assert [p.data_ptr() for p in resumed.module.parameters()] == pointers


def test_trainer_ema_update_has_no_host_sync(
    net: nn.Module,
    record_ops: Callable[[Callable[[], object]], list[str]],
    host_sync_ops: frozenset[str],
) -> None:
    ema = trainer_ema(net)
    ops = record_ops(lambda: ema.update())
    assert "exp" in ops
    assert not host_sync_ops & set(ops)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"decay": 1.5}, r"EMA decay=1.5: expected a value in \[0, 1\]"), ({"tau": -1.0}, "tau=-1.0")],
)
def test_trainer_ema_rejects_bad_config(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(OptimizerConfigError, match=match):
        trainer_ema(nn.Linear(2, 2), **kwargs)


@pytest.mark.gpu
def test_trainer_ema_update_replays_in_cuda_graph_bitwise() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Linear(6, 4)).cuda()
    native = trainer_ema(model, decay=0.99, tau=5.0)
    graphed = trainer_ema(model, decay=0.99, tau=5.0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graphed.update()  # warm-up doubles as update 1
    torch.cuda.current_stream().wait_stream(side)
    native.update()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graphed.update()
    for _ in range(4):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        model(torch.randn(2, 3, 8, 8, device="cuda"))
        torch.cuda.set_sync_debug_mode("error")
        try:
            native.update()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        graph.replay()
    torch.cuda.synchronize()
    assert int(graphed.updates) == int(native.updates) == 5
    expected, actual = native.state_dict()["module"], graphed.state_dict()["module"]
    assert all(torch.equal(expected[k], actual[k]) for k in expected)


def test_trainer_ema_rebind_follows_a_module_move() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.BatchNorm2d(2))
    ema = trainer_ema(model, decay=0.5, tau=1.0)
    ema.module.to(torch.float64)  # like a device move: buffers are replaced, parameters kept
    model.to(torch.float64)
    ema.rebind()
    model[1].running_mean.fill_(3.0)
    ema.update()
    assert ema.module[1].running_mean.tolist() == [3.0, 3.0]
