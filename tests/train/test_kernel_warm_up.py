"""The kernel warm-up: a copy of the network, forward and backward, on a thread of its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from lucid_yolo.models import create_model
from lucid_yolo.replay import first_difference, state_digest
from lucid_yolo.train import ReplayConfig, kernel_warm_up
from lucid_yolo.train.kernel_warm_up import KernelWarmUp, start_kernel_warm_up

CPU = torch.device("cpu")


def test_warm_up_runs_a_copy_and_leaves_the_network_untouched() -> None:
    net = create_model("yolo26n", num_classes=3).to(memory_format=torch.channels_last)
    before = state_digest(net.state_dict())
    seen: list[tuple[Any, ...]] = []

    def forward_hook(module: nn.Module, inputs: Any, output: Tensor) -> None:
        image = inputs[0]
        layout = image.is_contiguous(memory_format=torch.channels_last)
        seen.append(("forward", tuple(image.shape), layout, output.dtype, module.training))
        output.register_hook(lambda grad: seen.append(("backward", tuple(grad.shape))))  # type: ignore[no-untyped-call]

    first = next(m for m in net.modules() if isinstance(m, nn.Conv2d))
    first.register_forward_hook(forward_hook)
    net.eval()

    warm_up = KernelWarmUp(net, (2, 3, 64, 64), CPU, torch.channels_last, torch.bfloat16)
    warm_up.wait()

    assert warm_up.seconds is not None
    assert warm_up.seconds > 0
    assert seen[0] == ("forward", (2, 3, 64, 64), True, torch.bfloat16, True)
    assert seen[1][0] == "backward"
    assert state_digest(net.state_dict()) == before
    assert all(p.grad is None for p in net.parameters())
    assert not net.training


class _Failing(nn.Module):
    def forward(self, images: Tensor) -> Tensor:
        raise ValueError(f"no forward for {tuple(images.shape)}")


def test_wait_raises_what_the_warm_up_raised() -> None:
    warm_up = KernelWarmUp(_Failing(), (1, 3, 8, 8), CPU, torch.contiguous_format, None)
    with pytest.raises(ValueError, match=r"no forward for \(1, 3, 8, 8\)"):
        warm_up.wait()
    warm_up.wait()


def test_abandon_drops_what_the_warm_up_raised() -> None:
    warm_up = KernelWarmUp(_Failing(), (1, 3, 8, 8), CPU, torch.contiguous_format, None)
    warm_up.abandon()
    warm_up.wait()


class _Outputs(nn.Module):
    """A network whose outputs ``shape`` builds from one weight; ``reached`` sees its gradient
    (a closure, which a deep copy shares, unlike a hook on the tensor itself)."""

    def __init__(self, shape: Any, reached: Callable[[Tensor], None] = print) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))
        self.shape = shape
        self.reached = reached

    def forward(self, images: Tensor) -> Any:
        weight = self.weight * 1
        weight.register_hook(self.reached)  # type: ignore[no-untyped-call]
        return self.shape(weight + images.mean())


@pytest.mark.parametrize(
    ("shape", "gradient"),
    [
        (lambda x: {"boxes": x, "indices": torch.ones(3, dtype=torch.long)}, 1.0),
        (lambda x: (x, [x * 2]), 3.0),
        (lambda x: x, 1.0),
    ],
    ids=["dict", "nested", "tensor"],
)
def test_warm_up_reaches_every_floating_output(shape: Any, gradient: float) -> None:
    reached: list[Tensor] = []

    def keep(grad: Tensor) -> None:
        reached.append(grad)

    KernelWarmUp(_Outputs(shape, keep), (1, 3, 4, 4), CPU, torch.contiguous_format, None).wait()
    assert [float(grad) for grad in reached] == [gradient]


def test_warm_up_refuses_outputs_without_tensors() -> None:
    warm_up = KernelWarmUp(_Outputs(str), (1, 3, 4, 4), CPU, torch.contiguous_format, None)
    with pytest.raises(TypeError, match="network outputs of type 'str' hold no tensors"):
        warm_up.wait()


def _trainer(device: str = "cpu", precision: str = "bf16-mixed", data: Any = None) -> Any:
    data = SimpleNamespace(batch_size=2, imgsz=64) if data is None else data
    return SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device(device)),
        precision=precision,
        datamodule=data,
    )


def test_start_runs_on_cuda_devices_only() -> None:
    net = nn.Conv2d(3, 4, 3)
    assert start_kernel_warm_up(_trainer(), net, torch.contiguous_format) is None


@pytest.mark.parametrize(
    "trainer",
    [
        _trainer(precision="bf16-true"),
        _trainer(precision="64-true"),
        _trainer(data=SimpleNamespace(batch_size=2)),
        _trainer(data=SimpleNamespace(batch_size=None, imgsz=64)),
        SimpleNamespace(**{**vars(_trainer()), "datamodule": None}),
    ],
    ids=["bf16-true", "64-true", "no-imgsz", "no-batch-size", "no-data-module"],
)
def test_start_leaves_fits_it_cannot_reproduce_cold(
    trainer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kernel_warm_up, "DEVICE_TYPES", ("cpu",))
    assert start_kernel_warm_up(trainer, nn.Conv2d(3, 4, 3), torch.contiguous_format) is None


def test_start_takes_the_batch_shape_and_autocast_of_the_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kernel_warm_up, "DEVICE_TYPES", ("cpu",))
    started: list[tuple[Any, ...]] = []

    class Recorded(KernelWarmUp):
        def __init__(self, *args: Any) -> None:
            started.append(args[1:])
            super().__init__(*args)

    monkeypatch.setattr(kernel_warm_up, "KernelWarmUp", Recorded)
    net = nn.Conv2d(3, 4, 3)
    warm_up = start_kernel_warm_up(_trainer(precision="16-mixed"), net, torch.channels_last)
    assert warm_up is not None
    warm_up.wait()
    assert started == [((2, 3, 64, 64), CPU, torch.channels_last, torch.float16)]


@pytest.mark.gpu
@pytest.mark.parametrize("replayed", [False, True], ids=["native", "replayed"])
def test_fit_with_its_kernel_warm_up_is_bitwise_the_fit_without(
    replayed: bool, tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    yaml = tiny_dataset("detect")
    replay = ReplayConfig(network=True, loss=True, update=True) if replayed else ReplayConfig()
    cold = fit_digests(yaml, "detect", "bf16-mixed", 2, replay=replay, kernel_warm_up=False)
    warm = fit_digests(yaml, "detect", "bf16-mixed", 2, replay=replay)
    assert cold.module.kernel_warm_up_seconds is None
    assert warm.module.kernel_warm_up_seconds is not None
    assert first_difference(cold.digests, warm.digests) is None
    assert cold.losses == warm.losses
    if replayed:
        assert warm.regions["network"]["replays"] == len(warm.losses) - 1
