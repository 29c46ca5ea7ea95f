"""Running the regions through their recorders: options checked, CPU bookkeeping equals native.

What the CPU comparisons prove: the CPU stand-in re-runs each recorded body eagerly, so the
kernels are the same on both sides and only the replay's bookkeeping can differ: static buffers,
copy-in, gradient routing and accumulation, output rebuilding, pool order. That is what they pin
(a replay that skips the copy-in of the incoming gradients fails
``test_network_replay_cpu_bookkeeping_matches_native_gradients``). They prove nothing about CUDA
graph kernels or autocast casts inside a graph: the ``gpu`` tests in ``test_parity.py``
and ``tools/parity_matrix.py`` do.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, GradientAccumulationScheduler

from lucid_yolo.models import YOLO26, create_model
from lucid_yolo.models.registry import TASK_SUFFIXES
from lucid_yolo.replay import (
    PoolLeakError,
    ReplayRetiredWarning,
    ScratchLoan,
    TensorSpec,
    first_difference,
    grads_of,
    state_digest,
)
from lucid_yolo.train import TrainConfigError, YoloDataModule, YoloModule
from lucid_yolo.train.callbacks import EpochSummary
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.losses import build_loss
from lucid_yolo.train.replay import (
    TOTAL,
    NetworkLossRegion,
    NetworkRegion,
    NetworkReplay,
    ReplayConfig,
)
from lucid_yolo.train.replay.regions import SHAPE_ONLY_FIELDS, shape_carrier


def test_segment_heads_option_needs_a_segment_model() -> None:
    net = create_model("yolo26n", num_classes=3)
    with pytest.raises(ValueError, match="needs a segment model"):
        NetworkReplay(net, "detect", ReplayConfig(segment_heads=True))


def test_network_replay_off_is_the_plain_forward() -> None:
    net = create_model("yolo26n", num_classes=3)
    replay = NetworkReplay(net, "detect", ReplayConfig())
    images = torch.rand(1, 3, 64, 64)
    assert replay.telemetry.as_dict()["replays"] == 0
    expected = net(images)
    for key, value in replay(images).items():
        assert torch.equal(value, expected[key]), key


def test_network_replay_cpu_bookkeeping_matches_native_gradients() -> None:
    net = create_model("yolo26n", num_classes=3)
    reference = copy.deepcopy(net)
    replay = NetworkReplay(net, "detect", ReplayConfig(network=True))
    for step in range(3):
        images = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(step))
        for model, forward in ((reference, reference), (net, replay)):
            model.zero_grad(set_to_none=True)
            outputs = forward(images)
            sum(v.float().square().mean() for v in outputs.values()).backward()  # type: ignore[union-attr]
        assert (
            first_difference(
                state_digest([net, grads_of(net)]), state_digest([reference, grads_of(reference)])
            )
            is None
        ), step
    telemetry = replay.telemetry.as_dict()
    # The first call is the native warm-up; the other two replay, on new images each.
    assert telemetry["native.warm-up"] == 1
    assert telemetry["replays"] == 2
    assert telemetry["retirements"] == 0


class _HandOffGradients(Callback):
    """Turns the network's direct gradients off for the fit: autograd's nodes store them, as
    under DDP."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, YoloModule)
        assert pl_module.replay.direct_gradients  # what a one-process fit chose
        pl_module.replay.direct_gradients = False


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
@pytest.mark.parametrize("direct_gradients", [True, False])
def test_loss_region_cpu_fit_equals_native(
    direct_gradients: bool,
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
    shared_fit: Callable[..., Any],
) -> None:
    task = "detect"
    yaml = tiny_dataset(task)
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 4, "grad_clip_norm": 0.0}
    native = shared_fit(yaml, task, "32-true", 1, **cpu)
    replay = ReplayConfig(network=True, loss=True, loss_with_network=False)
    callbacks = [] if direct_gradients else [_HandOffGradients()]
    replayed = fit_digests(yaml, task, "32-true", 1, replay=replay, callbacks=callbacks, **cpu)
    network = replayed.module.replay.network
    assert network is not None
    assert network.direct_gradients is direct_gradients
    # the chain's loss region runs between the network's forward and backward
    assert not network.frees_activations
    assert {name: t["replays"] for name, t in replayed.regions.items()} == {
        "network": 3,
        "loss": 3,
    }
    assert replayed.telemetry["retirements"] == 0
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_replayed_cpu_fit_with_the_default_gradient_clip_equals_native(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    # The module clips to norm 10 by default; at initialisation the total gradient norm is in
    # the thousands, so every step here is clipped. Accumulation 2: the clip reads the summed
    # gradients the replayed backward delivered, and the replayed update reads the clipped ones.
    yaml = tiny_dataset("detect")
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 3}
    native = fit_digests(yaml, "detect", "32-true", 2, **cpu)
    assert native.module.hparams["grad_clip_norm"] == 10.0
    replay = ReplayConfig(network=True, loss=True, update=True)
    replayed = fit_digests(yaml, "detect", "32-true", 2, replay=replay, **cpu)
    assert {name: t["replays"] for name, t in replayed.regions.items()} == {
        "network+loss": 5,
        "optimizer MuSGD": 2,
    }
    assert replayed.telemetry["retirements"] == 0
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_replayed_cpu_fit_in_channels_last_equals_native(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    # The replay keys on the images' strides: built in another layout than the recording's,
    # they would record again (two recordings) or run natively.
    yaml = tiny_dataset("detect")
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 3, "memory_format": "channels_last"}
    native = fit_digests(yaml, "detect", "32-true", 1, **cpu)
    replay = ReplayConfig(network=True, loss=True, update=True)
    replayed = fit_digests(yaml, "detect", "32-true", 1, replay=replay, **cpu)
    assert replayed.module.memory_format == torch.channels_last
    assert {name: t["replays"] for name, t in replayed.regions.items()} == {
        "network+loss": 2,
        "optimizer MuSGD": 2,
    }
    assert [r.recordings for r in replayed.module.replay.recorders()] == [1]
    assert replayed.telemetry["retirements"] == 0
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


class _SumLoss(torch.nn.Module):
    """A loss over whatever outputs it gets, to change the loss region's input keys."""

    def forward(
        self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], fraction: Any
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        total = sum(v.sum() for v in outputs.values()) * fraction + batch["x"].sum()
        return total, {"sum": total.detach()}  # type: ignore[union-attr]


def test_loss_region_with_changed_keys_runs_natively_with_a_reason() -> None:
    net = create_model("yolo26n", num_classes=3)
    replay = NetworkReplay(net, "detect", ReplayConfig(loss=True), _SumLoss())
    batch: Any = {"x": torch.ones(2)}
    fraction = torch.tensor(0.5)
    replay.loss({"a": torch.ones(2, requires_grad=True)}, batch, fraction)
    changed = {"a": torch.ones(2, requires_grad=True), "b": torch.ones(2, requires_grad=True)}
    with pytest.warns(ReplayRetiredWarning, match=r"inputs-changed.*\('a', 'b'\)"):
        total, _ = replay.loss(changed, batch, fraction)
    assert float(total.detach()) == 4.0
    telemetry = replay.telemetry.as_dict()
    assert telemetry["native.inputs-changed"] == 1
    assert telemetry["retired.inputs-changed"] == 1


class _ShapeLoss(torch.nn.Module):
    """A loss that reads the images for their shape only, as the task losses do."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[tuple[int, ...], torch.dtype]] = []

    def forward(
        self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], fraction: Any
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        self.seen.append((tuple(batch["images"].shape), batch["images"].dtype))
        total = outputs["a"].sum() * batch["images"].shape[-1] * fraction
        return total, {"sum": total.detach()}


def test_loss_region_gets_the_images_shape_without_a_copy_of_them() -> None:
    net = create_model("yolo26n", num_classes=3)
    criterion = _ShapeLoss()
    replay = NetworkReplay(net, "detect", ReplayConfig(loss=True), criterion)
    images = torch.randint(0, 255, (2, 3, 32, 32), dtype=torch.uint8)
    batch: Any = {"images": images}
    fraction = torch.tensor(0.5)
    totals = []
    for _ in range(3):  # native warm-up, record, replay
        output = torch.ones(2, requires_grad=True)
        total, _ = replay.loss({"a": output}, batch, fraction)
        total.backward()
        totals.append(float(total.detach()))
        assert output.grad is not None
        assert torch.equal(output.grad, torch.full((2,), 16.0))
    recorder = replay.loss_recorder
    assert recorder is not None
    assert recorder.telemetry.replays == 2
    assert totals == [32.0, 32.0, 32.0]
    assert set(criterion.seen) == {((2, 3, 32, 32), torch.uint8)}
    (recording,) = recorder._recordings.values()
    images_position = 1  # after the one output, in sorted key order
    assert recording.static_inputs[images_position].numel() == 0


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
# YoloModule.optimizer_step is meant to run once per optimizer step, which is what the warning says.
@pytest.mark.filterwarnings(r"ignore:When using `Trainer\(accumulate_grad_batches != 1\)`")
def test_replayed_fit_with_accumulation_changed_mid_fit_equals_native(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    # 8 images at batch 4: two micro-batches per epoch, one per step in epoch 0, both from epoch 1
    yaml = tiny_dataset("detect")
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 3}

    def schedule() -> list[Callback]:
        return [GradientAccumulationScheduler(scheduling={0: 1, 1: 2})]

    native = fit_digests(yaml, "detect", "32-true", 1, callbacks=schedule(), **cpu)
    replay = ReplayConfig(network=True, loss=True, update=True)
    replayed = fit_digests(yaml, "detect", "32-true", 1, replay=replay, callbacks=schedule(), **cpu)
    assert len(replayed.losses) == 4
    assert {name: t["replays"] for name, t in replayed.regions.items()} == {
        "network+loss": 3,
        "optimizer MuSGD": 2,
    }
    assert replayed.telemetry["retirements"] == 0
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


def _first_batch(yaml: Path, imgsz: int) -> tuple[Batch, int]:
    """The first training batch at ``imgsz`` and the dataset's class count."""
    data = YoloDataModule(
        yaml, task="detect", imgsz=imgsz, batch_size=2, workers=0, max_instances=16, seed=0
    )
    data.setup("fit")
    batch: Batch = next(iter(data.train_dataloader()))
    return batch, data.num_classes


def test_regions_record_a_second_signature_when_the_image_size_changes(
    tiny_dataset: Callable[[str], Path],
) -> None:
    yaml = tiny_dataset("detect")
    sizes = {size: _first_batch(yaml, size)[0] for size in (64, 96)}
    num_classes = _first_batch(yaml, 64)[1]
    net = create_model("yolo26n", num_classes=num_classes)
    reference = copy.deepcopy(net)
    criterion = build_loss("detect", num_classes, strides=net.strides)
    chain = ReplayConfig(network=True, loss=True, loss_with_network=False)
    replay = NetworkReplay(net, "detect", chain, criterion)
    fraction = torch.zeros(())
    for call, size in enumerate((64, 96, 64, 96, 64)):
        batch = sizes[size]
        images = batch["images"].float() / 255
        totals = []
        for model, forward, loss in (
            (reference, reference, criterion),
            (net, replay, replay.loss),
        ):
            model.zero_grad(set_to_none=True)
            total, _ = loss(forward(images), batch, fraction)
            total.backward()
            totals.append(total.detach())
        assert torch.equal(totals[0], totals[1]), call
        grads = state_digest(grads_of(net)), state_digest(grads_of(reference))
        assert first_difference(*grads) is None, call
    # one native warm-up per size (calls 1 and 2), then each call replays its size's recording
    for recorder in replay.recorders():
        assert (recorder.recordings, recorder.telemetry.replays) == (2, 3), recorder.name
        assert recorder.telemetry.as_dict()["retirements"] == 0, recorder.name


def _detect_step_parts(yaml: Path) -> tuple[Batch, YOLO26, torch.nn.Module]:
    """The first 64 px training batch, a fresh ``yolo26n`` for its classes, and its loss."""
    batch, num_classes = _first_batch(yaml, 64)
    net = create_model("yolo26n", num_classes=num_classes)
    return batch, net, build_loss("detect", num_classes, strides=net.strides)


def test_network_loss_region_is_the_network_then_the_loss(
    tiny_dataset: Callable[[str], Path],
) -> None:
    batch, net, criterion = _detect_step_parts(tiny_dataset("detect"))
    fields: dict[str, Any] = dict(batch)
    keys = tuple(sorted(fields))
    images = batch["images"].float() / 255
    fraction = torch.tensor(0.25)
    expected_total, expected_terms = criterion(net(images), batch, fraction)
    region = NetworkLossRegion(NetworkRegion(net), criterion, keys)
    tensors = (shape_carrier(fields[k]) if k in SHAPE_ONLY_FIELDS else fields[k] for k in keys)
    result = region(images, *tensors, fraction)
    assert region.batch_keys == keys
    assert set(result) == {TOTAL, *(f"term.{name}" for name in expected_terms)}
    assert torch.equal(result[TOTAL], expected_total)
    for name, value in expected_terms.items():
        assert torch.equal(result[f"term.{name}"], value), name
    assert list(region.region_modules()) == [*NetworkRegion(net).region_modules(), criterion]


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
@pytest.mark.filterwarnings(r"ignore:When using `Trainer\(accumulate_grad_batches != 1\)`")
@pytest.mark.parametrize(
    ("task", "accumulate", "direct_gradients", "update"),
    [
        ("detect", 2, True, True),
        ("detect", 1, False, False),
        ("segment", 1, True, True),
    ],
)
def test_network_and_loss_as_one_region_cpu_fit_equals_native(
    task: str,
    accumulate: int,
    direct_gradients: bool,
    update: bool,
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
) -> None:
    yaml = tiny_dataset(task)
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 3}
    native = fit_digests(yaml, task, "32-true", accumulate, **cpu)
    replay = ReplayConfig(network=True, loss=True, loss_with_network=True, update=update)
    callbacks = [] if direct_gradients else [_HandOffGradients()]
    replayed = fit_digests(
        yaml, task, "32-true", accumulate, replay=replay, callbacks=callbacks, **cpu
    )
    binding = replayed.module.replay
    assert (binding.network, binding.loss_recorder) == (None, None)
    assert binding.network_with_loss is not None
    assert binding.network_with_loss.direct_gradients is direct_gradients
    assert binding.network_with_loss.frees_activations
    datamodule = replayed.module.trainer.datamodule
    assert datamodule._device_pixels.pool_for == binding.shared_pool  # the step's pool
    expected = {"network+loss": len(replayed.losses) - 1}
    if update:
        expected["optimizer MuSGD"] = replayed.ema_updates - 1
    assert {name: t["replays"] for name, t in replayed.regions.items()} == expected
    assert replayed.telemetry["retirements"] == 0
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


def test_network_and_loss_as_one_region_build_the_images_in_its_static_input(
    tiny_dataset: Callable[[str], Path],
) -> None:
    batch, net, criterion = _detect_step_parts(tiny_dataset("detect"))
    reference = copy.deepcopy(net)
    config = ReplayConfig(network=True, loss=True, loss_with_network=True)
    replay = NetworkReplay(net, "detect", config, criterion)
    fraction = torch.tensor(0.5)
    built = []
    for step in range(4):  # native warm-up, recording, then two replays
        for model in (reference, net):
            model.zero_grad(set_to_none=True)
        images = replay.images(batch["images"])
        built.append(images)
        total, terms = replay.network_and_loss(images, batch, fraction)
        total.backward()
        outputs = reference(batch["images"].float() / 255)
        expected, expected_terms = criterion(outputs, batch, fraction)
        expected.backward()
        assert torch.equal(total, expected), step
        assert terms.keys() == expected_terms.keys()
        grads = state_digest(grads_of(net)), state_digest(grads_of(reference))
        assert first_difference(*grads) is None, step
    recorder = replay.network_with_loss
    assert recorder is not None
    assert replay.network is None
    static = recorder.static_input(0, TensorSpec.of(built[-1]))
    assert static is not None
    assert built[2] is static
    assert built[3] is static
    assert built[1] is not static
    # the recording call replays its fresh graph too
    assert (recorder.recordings, recorder.telemetry.replays) == (1, 3)
    assert replay.recorders() == [recorder]


def test_network_and_loss_as_one_region_with_changed_batch_fields_run_natively_with_a_reason(
    tiny_dataset: Callable[[str], Path],
) -> None:
    batch, net, criterion = _detect_step_parts(tiny_dataset("detect"))
    config = ReplayConfig(network=True, loss=True, loss_with_network=True)
    replay = NetworkReplay(net, "detect", config, criterion)
    fraction = torch.tensor(0.5)
    images = batch["images"].float() / 255
    replay.network_and_loss(images, batch, fraction)
    changed: Any = {**batch, "extra": torch.zeros(2)}
    with pytest.warns(ReplayRetiredWarning, match=r"inputs-changed.*'extra'"):
        total, _ = replay.network_and_loss(images, changed, fraction)
    expected, _ = criterion(net(images), batch, fraction)
    assert torch.equal(total, expected)
    telemetry = replay.telemetry.as_dict()
    assert telemetry["native.inputs-changed"] == 1
    assert telemetry["retired.inputs-changed"] == 1


def test_network_alone_is_refused_when_it_replays_with_its_loss() -> None:
    net = create_model("yolo26n", num_classes=3)
    criterion = build_loss("detect", 3, strides=net.strides)
    config = ReplayConfig(network=True, loss=True, loss_with_network=True)
    replay = NetworkReplay(net, "detect", config, criterion)
    with pytest.raises(TrainConfigError, match=r"call NetworkReplay.network_and_loss"):
        replay(torch.zeros(1, 3, 64, 64))


def test_network_and_loss_as_one_region_is_refused_for_the_chain() -> None:
    net = create_model("yolo26n", num_classes=3)
    criterion = build_loss("detect", 3, strides=net.strides)
    chain = ReplayConfig(network=True, loss=True, loss_with_network=False)
    replay = NetworkReplay(net, "detect", chain, criterion)
    batch: Any = {"images": torch.zeros(1, 3, 64, 64, dtype=torch.uint8)}
    with pytest.raises(TrainConfigError, match=r"needs the network and its loss replayed as one"):
        replay.network_and_loss(torch.zeros(1, 3, 64, 64), batch, torch.tensor(0.5))


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    bits = {4: torch.int32, 2: torch.int16}[a.element_size()]
    return a.dtype == b.dtype and torch.equal(a.view(bits), b.view(bits))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_network_replay_images_are_built_in_the_network_static_input_once_recorded(
    layout: torch.memory_format, dtype: torch.dtype
) -> None:
    """In float32, and in bf16 under autocast (the images a bf16-mixed fit makes)."""
    net = create_model("yolo26n", num_classes=3).to(memory_format=layout)
    replay = NetworkReplay(net, "detect", ReplayConfig(network=True))
    gen = torch.Generator().manual_seed(0)
    built = []
    for _ in range(4):  # native warm-up, recording, then two replays
        raw = torch.randint(0, 256, (1, 3, 64, 64), dtype=torch.uint8, generator=gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            images = replay.images(raw, layout, dtype)
            assert _same_bits(images, raw.float().div_(255.0).to(dtype))
            assert images.is_contiguous(memory_format=layout)
            built.append(images)
            outputs = replay(images)
        sum(v.float().square().mean() for v in outputs.values()).backward()
    assert replay.network is not None
    static = replay.network.static_input(0, TensorSpec.of(built[-1]))
    assert static is not None
    # before the recording: fresh tensors; after it: the static input itself, every step
    assert built[2] is static
    assert built[3] is static
    assert built[0] is not static
    assert built[1] is not static
    assert replay.telemetry.as_dict()["replays"] == 3


def test_network_replay_images_without_the_network_region_are_fresh() -> None:
    net = create_model("yolo26n", num_classes=3)
    replay = NetworkReplay(net, "detect", ReplayConfig())
    raw = torch.randint(0, 256, (1, 3, 64, 64), dtype=torch.uint8)
    first, second = replay.images(raw), replay.images(raw)
    assert first is not second
    assert _same_bits(first, raw.float().div_(255.0))


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_replayed_fit_lends_its_pool_to_each_validation_pass_after_the_first_recording(
    tiny_dataset: Callable[[str], Path], shared_fit: Callable[..., Any]
) -> None:
    # Two epochs of two steps, each validated in two batches; the network records at its second
    # call, and the sanity check comes before any graph holds the pool. On the CPU the lending
    # itself is a no-op (the gpu parity test reads the pool's memory): this pins the module's
    # hooks, a borrowed forward per batch of each pass, and the loan's end.
    yaml = tiny_dataset("detect")
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 4, "validate": True}
    replayed = shared_fit(yaml, "detect", "32-true", 1, replay=ReplayConfig(network=True), **cpu)
    loan = replayed.module.replay.evaluation_loan
    assert loan is not None
    assert loan.borrowed == 4
    assert not loan.lending
    assert len(replayed.val) == 2
    assert len(replayed.val_outputs) == 2 + 4


def test_evaluation_loan_follows_the_option() -> None:
    net = create_model("yolo26n", num_classes=3)
    lent = NetworkReplay(net, "detect", ReplayConfig(network=True))
    kept = NetworkReplay(net, "detect", ReplayConfig(network=True, evaluate_in_pool=False))
    assert lent.evaluation_loan is None  # no pool before the fit binds one
    pool = lent.shared_pool(torch.device("cpu"))
    kept.shared_pool(torch.device("cpu"))
    assert lent.evaluation_loan is not None
    assert lent.evaluation_loan.pool is pool
    assert kept.evaluation_loan is None


@pytest.mark.parametrize(
    ("model", "task", "lends"), [("yolo26n", "detect", False), ("yolo26n-seg", "segment", True)]
)
def test_replayed_evaluation_loan_is_made_only_for_a_network_with_masks(
    model: str, task: str, lends: bool
) -> None:
    # with the forward replayed only the metric's masks borrow; an idle loan would still read
    # the allocator's snapshot twice a pass
    net = create_model(model, num_classes=3)
    replay = NetworkReplay(net, task, ReplayConfig(network=True, evaluation=True))
    replay.shared_pool(torch.device("cpu"))
    loan = replay.evaluation_loan
    assert (loan is not None) == lends
    assert loan is None or loan.replays_between


def test_evaluation_scratch_names_the_option_when_a_block_keeps_a_tensor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @contextlib.contextmanager
    def leaking(self: ScratchLoan) -> Iterator[None]:
        yield
        raise PoolLeakError("1 block(s) allocated during a borrowing block in the graph pool")

    monkeypatch.setattr(ScratchLoan, "borrowing", leaking)
    net = create_model("yolo26n-seg", num_classes=3)
    replay = NetworkReplay(net, "segment", ReplayConfig(network=True, evaluation=True))
    replay.shared_pool(torch.device("cpu"))
    with (
        pytest.raises(PoolLeakError, match="evaluate_in_pool false"),
        replay.evaluation_scratch(),
    ):
        pass


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_replayed_evaluation_gives_the_eager_outputs_and_metrics_and_replays_each_forward(
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
    shared_fit: Callable[..., Any],
) -> None:
    # Two epochs of two steps, each validated in two batches of 2, after the sanity check's two,
    # which run natively while the training graphs are still to come: the first call after them
    # records, and every later call replays (the CPU stand-in re-runs the recorded body, so this
    # pins the module's routing; the gpu parity test compares real graphs, and
    # tests/train/test_evaluation.py the outputs' lifetime in a mask pass).
    yaml = tiny_dataset("detect")
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 4, "validate": True}
    eager = shared_fit(yaml, "detect", "32-true", 1, replay=ReplayConfig(network=True), **cpu)
    replay = ReplayConfig(network=True, evaluation=True)
    replayed = fit_digests(yaml, "detect", "32-true", 1, replay=replay, **cpu)
    recorder = replayed.module.replay.evaluation
    assert recorder is not None
    assert recorder.pool is replayed.module.replay.shared_pool(torch.device("cpu"))
    telemetry = recorder.telemetry.as_dict()
    assert (telemetry["recordings"], telemetry["replays"]) == (1, 4)
    assert telemetry["native_calls"] == telemetry["native.warm-up"] == 2
    # the graphs take the pool's scratch, and a detect network has no masks to lend to
    assert replayed.module.replay.evaluation_loan is None
    assert len(replayed.val_outputs) == 2 + 4
    assert replayed.val_outputs == eager.val_outputs
    assert replayed.val == eager.val
    assert replayed.digests == eager.digests


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_replayed_evaluation_builds_the_metric_masks_in_the_loan_between_its_replays(
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Segment with the evaluation replayed: the sanity check borrows nothing (the loan opens
    # before any graph holds the pool); after it, each validated batch's masks are built in one
    # borrowing block of the pool's loan, the pool never lent inside one (the evaluation graph
    # replays between them), and the metrics are those of a fit without the loan. On the CPU
    # the lending is a no-op: this pins the routing; the gpu tests read the memory.
    seen: list[tuple[bool, bool]] = []
    scratch = NetworkReplay.evaluation_scratch

    @contextlib.contextmanager
    def noting(self: NetworkReplay) -> Iterator[None]:
        with scratch(self):
            loan = self.evaluation_loan
            assert loan is not None
            seen.append((loan.lending, loan.pool.lent))
            yield

    monkeypatch.setattr(NetworkReplay, "evaluation_scratch", noting)
    yaml = tiny_dataset("segment")
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 4, "validate": True}
    replay = ReplayConfig(network=True, evaluation=True)
    lent = fit_digests(yaml, "segment", "32-true", 1, replay=replay, **cpu)
    monkeypatch.undo()
    apart = fit_digests(
        yaml, "segment", "32-true", 1, replay=replace(replay, evaluate_in_pool=False), **cpu
    )
    binding = lent.module.replay
    loan, recorder = binding.evaluation_loan, binding.evaluation
    assert loan is not None
    assert recorder is not None
    assert loan.borrowed == 2 * 2  # two passes of two batches
    assert seen[-4:] == [(True, False)] * 4  # lending, the pool not lent
    assert not any(pool_lent for _, pool_lent in seen)
    assert recorder.telemetry.as_dict()["replays"] == 4  # the sanity check's two run natively
    assert apart.module.replay.evaluation_loan is None
    assert len(lent.val) == 2
    assert lent.val == apart.val
    assert lent.digests == apart.digests


def test_network_replay_evaluates_in_a_pool_of_its_own_when_told() -> None:
    net = create_model("yolo26n", num_classes=3).eval()
    shared = NetworkReplay(net, "detect", ReplayConfig(evaluation=True))
    own = NetworkReplay(net, "detect", ReplayConfig(evaluation=True, evaluate_in_pool=False))
    raw = torch.randint(0, 256, (1, 3, 64, 64), dtype=torch.uint8)
    with torch.inference_mode():
        expected = net(raw.float().div_(255.0))
        for replay in (shared, own):
            outputs = replay.evaluate(net, raw, torch.contiguous_format)
            assert state_digest(outputs) == state_digest(expected)
    assert shared.evaluation is not None
    assert own.evaluation is not None
    assert shared.evaluation.pool is shared.shared_pool(torch.device("cpu"))
    assert own.evaluation.pool is not own.shared_pool(torch.device("cpu"))


def test_network_replay_records_the_evaluation_again_for_another_network() -> None:
    # a subclass or a test may evaluate another network (the live one): its recorder is rebuilt
    # rather than replaying the first network's graph
    first = create_model("yolo26n", num_classes=3, seed=1).eval()
    second = create_model("yolo26n", num_classes=3, seed=2).eval()
    replay = NetworkReplay(first, "detect", ReplayConfig(evaluation=True))
    raw = torch.randint(0, 256, (1, 3, 64, 64), dtype=torch.uint8)
    with torch.inference_mode():
        replay.evaluate(first, raw, torch.contiguous_format)
        outputs = replay.evaluate(second, raw, torch.contiguous_format)
        assert state_digest(outputs) == state_digest(second(raw.float().div_(255.0)))


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_network_replay_evaluation_replays_each_tasks_eager_outputs(task: str) -> None:
    net = create_model(f"yolo26n{TASK_SUFFIXES[task]}", num_classes=3).eval()
    replay = NetworkReplay(net, task, ReplayConfig(evaluation=True))
    batches = [torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8) for _ in range(2)]
    with torch.inference_mode():
        for raw in batches:
            outputs = replay.evaluate(net, raw, torch.contiguous_format)
            assert state_digest(outputs) == state_digest(net(raw.float().div_(255.0)))
    assert replay.evaluation is not None
    telemetry = replay.evaluation.telemetry.as_dict()
    assert (telemetry["recordings"], telemetry["replays"]) == (1, 2)


def test_network_replay_records_the_evaluation_again_after_the_network_moved() -> None:
    # Trainer.validate ends by moving the module to the CPU, and the next pass finds the
    # parameters in new storage: a fresh recording, not a retirement; the counters go on
    net = create_model("yolo26n", num_classes=3).eval()
    replay = NetworkReplay(net, "detect", ReplayConfig(evaluation=True))
    raw = torch.randint(0, 256, (1, 3, 64, 64), dtype=torch.uint8)
    with torch.inference_mode():
        replay.start_evaluation()
        replay.evaluate(net, raw, torch.contiguous_format)
        first = replay.evaluation
        net._apply(torch.clone)  # every parameter and buffer in new storage, as a move does
        replay.start_evaluation()
        outputs = replay.evaluate(net, raw, torch.contiguous_format)
        assert state_digest(outputs) == state_digest(net(raw.float().div_(255.0)))
    assert replay.evaluation is not first
    telemetry = replay.evaluation_telemetry.as_dict()
    assert (telemetry["recordings"], telemetry["replays"]) == (2, 2)
    assert telemetry["native_calls"] == 0
    assert telemetry["retirements"] == 0


@pytest.mark.parametrize(
    ("config", "deferred"),
    [
        (ReplayConfig(network=True, evaluation=True), True),
        (ReplayConfig(update=True, evaluation=True), True),
        (ReplayConfig(network=True, evaluation=True, evaluate_in_pool=False), False),
        (ReplayConfig(evaluation=True), False),
    ],
)
def test_network_replay_records_the_evaluation_after_the_sanity_check_where_graphs_will_join(
    config: ReplayConfig, deferred: bool
) -> None:
    # a pass before training (a fit's sanity check) records only where the training graphs
    # will share the evaluation's pool: there it runs natively, to record at the next pass in
    # their scratch; with a pool of its own, or no training graph to come, it records at once
    net = create_model("yolo26n", num_classes=3).eval()
    replay = NetworkReplay(net, "detect", config)
    raw = torch.randint(0, 256, (1, 3, 64, 64), dtype=torch.uint8)
    expected = state_digest(net(raw.float().div_(255.0)))
    with torch.inference_mode():
        replay.start_evaluation(before_training=True)
        for _ in range(2):
            assert state_digest(replay.evaluate(net, raw, torch.contiguous_format)) == expected
        replay.start_evaluation()
        assert state_digest(replay.evaluate(net, raw, torch.contiguous_format)) == expected
    telemetry = replay.evaluation_telemetry.as_dict()
    assert telemetry.get("native.warm-up", 0) == (2 if deferred else 0)
    assert (telemetry["recordings"], telemetry["replays"]) == (1, 1 if deferred else 3)


def test_network_replay_evaluation_before_the_fit_leaves_the_training_regions_unbuilt() -> None:
    # the training regions key on the parameters' storage at their construction: built by an
    # evaluation before the fit's move, they would retire at its first step
    net = create_model("yolo26n", num_classes=3)
    replay = NetworkReplay(net, "detect", ReplayConfig(network=True, evaluation=True))
    raw = torch.randint(0, 256, (1, 3, 64, 64), dtype=torch.uint8)
    with torch.inference_mode():
        replay.evaluate(net.eval(), raw, torch.contiguous_format)
    assert replay.network is None
    net.train()._apply(torch.clone)
    pool = replay.shared_pool(torch.device("cpu"))
    assert replay.network is not None
    assert replay.evaluation is not None
    assert replay.evaluation.pool is pool
    images = replay.images(raw)
    for _ in range(2):
        sum(v.float().sum() for v in replay(images).values()).backward()
    assert replay.network.retired is None
    assert replay.network.telemetry.recordings == 1


@pytest.mark.parametrize(
    "replay",
    [ReplayConfig(evaluation=True), ReplayConfig(network=True, loss=True, evaluation=True)],
)
def test_test_run_with_the_evaluation_replayed_logs_and_prints_its_counters(
    replay: ReplayConfig, tiny_dataset: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # `lucid-yolo test --model.replay.evaluation true`: a run without training steps replays
    # its evaluation forward and says so, as a fit's validation does; with the training regions
    # configured too it records at its first call (only a fit's sanity check holds it back)
    yaml = tiny_dataset("detect")
    with_test = yaml.with_name("with_test.yaml")
    text = yaml.read_text()
    val = next(
        line.partition(":")[2].strip() for line in text.splitlines() if line.startswith("val:")
    )
    with_test.write_text(f"{text.rstrip()}\ntest: {val.strip()}\n")
    data = YoloDataModule(with_test, task="detect", imgsz=64, batch_size=2, workers=0, seed=0)
    module = YoloModule("yolo26n", num_classes=data.num_classes, replay=replay)
    trainer = pl.Trainer(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EpochSummary()],
    )
    trainer.test(module, data, verbose=False)
    counters = {k: int(v) for k, v in trainer.callback_metrics.items() if k.startswith("replay/")}
    assert (counters["replay/recordings"], counters["replay/replays"]) == (1, 2), counters
    assert "replay: " in capsys.readouterr().out
