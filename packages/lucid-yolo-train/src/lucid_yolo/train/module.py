"""The LightningModule every task shares: network, loss, MuSGD, schedule, EMA, validation.

One class serves detection, segmentation, pose and OBB: the task is a property of the registered
model name, and everything task-specific (heads, loss terms, metric kinds, decoding) is looked up
from it. Replay regions are bound here too (:mod:`lucid_yolo.train.replay`), opt-in per
region, so the native path and the replayed path run the same module code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, get_args

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor
from typing_extensions import override

from lucid_yolo.models import create_model, load_weights, model_spec, read_weights
from lucid_yolo.replay import (
    RegionRecorder,
    Telemetry,
    UpdateRecorder,
    merge_telemetry,
)
from lucid_yolo.train.callbacks.pending_update_check import PendingUpdateCheck
from lucid_yolo.train.console import print_line
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.datamodule import YoloDataModule
from lucid_yolo.train.evaluation import Evaluator
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.log_cadence import reaches_loggers
from lucid_yolo.train.losses import build_loss, epoch_fraction
from lucid_yolo.train.memory_format import (
    MemoryFormat,
    check_memory_format,
    network_input_dtype,
    resolve_memory_format,
)
from lucid_yolo.train.non_finite_loss import SKIPPED_STEPS, NonFiniteLossGuard, NonFinitePolicy
from lucid_yolo.train.optim import (
    NEWTON_SCHULZ_DTYPES,
    MuSGD,
    NewtonSchulzChoice,
    WarmupLinearSchedule,
    param_groups,
    trainer_ema,
)
from lucid_yolo.train.replay import (
    EvaluationRegion,
    NetworkReplay,
    ReplayConfig,
    StepVerifier,
    UpdateStep,
    training_digest,
    training_state,
)

PhaseMarker = Callable[[str], None]


class YoloModule(pl.LightningModule):
    """Train and evaluate one registered YOLO26 model.

    Args:
        model: registered name (``yolo26n``, ``yolo26s-seg``, ``yolo26m-pose``, ``yolo26n-obb``…).
        num_classes: classes ``C``; the CLI links it to the data module's class count.
        kpt_shape: pose only: ``(K, 3)``; the CLI links it to the dataset's ``kpt_shape``.
        seed: seed of the initial weights (independent of the global RNG).
        weights: pretrained weights to start from: an Ultralytics YOLO26 ``.pt``, a state dict or
            a ``.safetensors`` file (Ultralytics or lucid-yolo names;
            :func:`lucid_yolo.models.read_weights`). Its task and scale must be ``model``'s; with
            another class count every tensor but the class branches' is kept. Not saved in the
            hyperparameters: a checkpoint already holds the weights.
        lr0: initial learning rate of MuSGD.
        lrf: final learning rate as a fraction of ``lr0`` (linear decay).
        momentum: MuSGD momentum.
        newton_schulz_dtype: compute dtype of MuSGD's Newton–Schulz orthogonalisation:
            ``float32``, ``bfloat16``, or ``auto``: bfloat16 on CUDA, float32 elsewhere
            (``optim.NS_DTYPES``; ``auto`` is chosen again for the device a checkpoint resumes
            on). On CUDA the orthogonalisation in float32 is over half of a replayed update's
            device time and bfloat16 cuts it to about a third (docs/engineering/whole-fit-speed.md,
            session 36); bfloat16 passed a non-inferiority check set before its fits ran (three
            seeds each way, detect batch 16, the synthetic set; session 45). Native and replayed
            fits agree bit for bit with either.
        weight_decay: decoupled weight decay of the weight group (biases and norms get none).
        warmup_epochs: linear warm-up length in epochs.
        warmup_min_steps: the warm-up lasts at least this many optimizer steps (YOLO uses 100;
            a run shorter than that never leaves warm-up).
        warmup_momentum: momentum at the start of warm-up.
        warmup_bias_lr: learning rate of the bias group at the start of warm-up.
        grad_clip_norm: before every optimizer step the gradients of all parameters are scaled
            down to this total L2 norm when they exceed it (0 never clips). The summed, batch-scaled
            YOLO loss has gradient norms in the thousands at initialisation (2,500 for yolo26n,
            7,600 with the mask loss, ``tools/loss_term_gradients.py``): unclipped, the SGD part of
            MuSGD takes steps that long and segment and pose read ~0 mAP for their first epochs
            (docs/engineering/mask-accuracy.md). 10 is the reference trainer's clip. The clip
            runs natively on the gradients a replayed step delivers, so replayed fits stay bitwise
            equal to native with it. A ``--trainer.gradient_clip_val`` given to Lightning takes
            precedence.
        ema_decay: asymptotic EMA decay; validation, prediction and checkpoints use the EMA weights.
        ema_tau: EMA ramp length in optimizer steps.
        val_conf: score threshold of validation and prediction outputs, in [0, 1] (low for
            validation, as mAP needs the tail; the CLI's ``predict`` defaults to 0.25).
        max_det: predictions kept per image (end-to-end top-k).
        memory_format: the layout of the network, its EMA copy and every image they see, for the
            whole fit: ``channels_last``, ``contiguous`` (NCHW) or ``auto`` (``channels_last``
            on CUDA, ``contiguous`` elsewhere). Why ``auto``: on an H200 channels-last runs the
            captured bf16 forward and backward of yolo26n at batch 16 in 18.05 ms against
            32.62 ms (yolo26n-seg 22.98 against 41.05; docs/engineering/whole-fit-speed.md); on
            the CPU only one small probe timed it, so CPU fits stay as they were. What it costs:
            other kernels, so a fit in one layout is not bitwise equal to a fit in the other
            (native and replayed fits in the same layout are). Applied when the trainer sets the
            module up, before a checkpoint's weights are copied in, so checkpoints load into
            either layout (:mod:`lucid_yolo.train.memory_format`). Not saved in the
            hyperparameters: a checkpoint does not depend on it, and a resumed fit runs the
            layout its command line asks for.
        casts_weights_together: in a training forward under autocast, cast the convolutions'
            trainable weights to its dtype in one multi-tensor copy a forward part and their
            gradients back one block at a time (``YOLO26.casts_weights_together``, for the
            network and its EMA copy): the same bits as autocast's cast per tensor, whose 276
            kernels a step (yolo26n) it replaces. On by default: on an H100 (session 49 of
            docs/engineering/whole-fit-speed.md) a replayed detect batch-4 fit's step without
            the data wait took 15.14 ms with it against 15.70-15.89 ms without (one fit
            against two), at the same peak reserved memory, and the whole GPU suite passed with
            it on. Not saved in the hyperparameters: it changes no result.
        replay: which parts of the training step replay from CUDA graphs, and the runtime
            verifier (:class:`~lucid_yolo.train.replay.ReplayConfig`; ``--model.replay.network
            true`` on the CLI). Not saved in the hyperparameters: replay changes no result, so a
            checkpoint does not depend on it and a resumed fit replays as its command line says.
        non_finite_loss: what a step whose loss is NaN or infinite does in fp32 and bf16:
            ``stop`` the fit before its update, naming the step and the terms, or ``skip`` the
            update and count it (:mod:`lucid_yolo.train.non_finite_loss`). fp16's GradScaler
            skips such steps itself.

    Raises:
        lucid_yolo.models.UnknownModelError: for an unregistered model name.
        lucid_yolo.models.WeightsError: for unreadable ``weights`` or another task or scale.
        TrainConfigError: for out-of-range hyperparameters, an unknown ``memory_format`` or
            ``newton_schulz_dtype``.
    """

    def __init__(
        self,
        model: str = "yolo26n",
        num_classes: int = 80,
        kpt_shape: tuple[int, int] = (17, 3),
        *,
        seed: int = 0,
        weights: str | None = None,
        lr0: float = 0.01,
        lrf: float = 0.01,
        momentum: float = 0.937,
        newton_schulz_dtype: NewtonSchulzChoice = "auto",
        weight_decay: float = 5e-4,
        warmup_epochs: float = 3.0,
        warmup_min_steps: int = 100,
        warmup_momentum: float = 0.8,
        warmup_bias_lr: float = 0.1,
        grad_clip_norm: float = 10.0,
        ema_decay: float = 0.9999,
        ema_tau: float = 2000.0,
        val_conf: float = 0.001,
        max_det: int = 300,
        memory_format: MemoryFormat = "auto",
        casts_weights_together: bool = True,
        replay: ReplayConfig = ReplayConfig(),  # noqa: B008 (frozen, so one shared default)
        non_finite_loss: NonFinitePolicy = "stop",
    ) -> None:
        super().__init__()
        if lr0 <= 0.0:
            raise TrainConfigError(f"lr0 must be > 0, got {lr0!r}")
        if max_det < 1:
            raise TrainConfigError(f"max_det must be >= 1, got {max_det!r}")
        if not 0.0 <= val_conf <= 1.0:
            raise TrainConfigError(f"val_conf must be in [0, 1], got {val_conf!r}")
        if not grad_clip_norm >= 0.0:
            raise TrainConfigError(
                f"grad_clip_norm must be >= 0 (0 never clips), got {grad_clip_norm!r}"
            )
        if newton_schulz_dtype not in get_args(NewtonSchulzChoice):
            raise TrainConfigError(
                f"newton_schulz_dtype must be one of {sorted(get_args(NewtonSchulzChoice))}, "
                f"got {newton_schulz_dtype!r}"
            )
        self.memory_format_choice = check_memory_format(memory_format)
        self.memory_format: torch.memory_format = torch.contiguous_format
        """The layout in use: the choice resolved for the trainer's device at :meth:`setup`."""
        self.save_hyperparameters(
            ignore=["weights", "replay", "memory_format", "casts_weights_together"]
        )
        spec = model_spec(model)
        self.task = spec.task
        self.net = create_model(model, num_classes=num_classes, kpt_shape=kpt_shape, seed=seed)
        self.net.casts_weights_together = casts_weights_together
        if weights is not None:
            print_line(load_weights(self.net, read_weights(weights)).summary())
        self.ema = trainer_ema(self.net, decay=ema_decay, tau=ema_tau)
        # Registered so that Lightning moves it and checkpoints it; its train/eval mode follows
        # the module's like any submodule (Lightning warns about eval-mode submodules at fit
        # start), and it only ever runs under validation/test/predict, where Lightning sets eval.
        self.ema_net = self.ema.module.train()
        loss_options: dict[str, Any] = {"strides": self.net.strides}
        if self.task == "pose":
            loss_options["num_keypoints"] = kpt_shape[0]
        self.criterion = build_loss(self.task, num_classes, **loss_options)
        self.replay = NetworkReplay(self.net, self.task, replay, self.criterion)
        self.evaluator = Evaluator(
            self.task,
            strides=self.net.strides,
            conf=val_conf,
            max_det=max_det,
            replay_scoring=replay.evaluation,
            mask_scratch=self.replay.evaluation_scratch,
        )
        # ProgLoss progress as a device tensor, natively too: a recorded loss reads it from the
        # device, and native and replayed steps must compute the branch weight the same way.
        self.loss_progress: Tensor
        self.register_buffer("loss_progress", torch.zeros(()), persistent=False)
        self.update_step: UpdateStep | None = None
        self.step_verifier = StepVerifier(replay.verify_every)
        self.loss_guard = NonFiniteLossGuard(non_finite_loss, agree=self._all_processes_agree)
        self.names: tuple[str, ...] = tuple(str(i) for i in range(num_classes))
        self.phase_marker: PhaseMarker | None = None

    @override
    def setup(self, stage: str) -> None:
        names = getattr(self._datamodule, "names", None)
        if names:
            self.names = tuple(names)
        self._apply_memory_format(self.trainer.strategy.root_device)
        if stage == "fit":
            self.replay.direct_gradients = self.trainer.world_size == 1
            if isinstance(self._datamodule, YoloDataModule):
                self._datamodule.follow_replay(self.replay.config.graphs, self.replay.shared_pool)
            if self.trainer.world_size > 1:
                self._setup_data_parallel()

    def _apply_memory_format(self, device: torch.device) -> None:
        """Lay out the network and the EMA network as ``memory_format`` says for ``device``.

        Runs in :meth:`setup`: before Lightning restores a checkpoint's weights (copied into the
        parameters, so they take this layout whatever layout they were saved in), moves the
        module to its device (a move keeps the layout), builds the optimizer (its state follows
        the parameters' layout) and the EMA rebinds to the live tensors at fit start.
        """
        self.memory_format = resolve_memory_format(self.memory_format_choice, device)
        self.to(memory_format=self.memory_format)

    def _setup_data_parallel(self) -> None:
        """Check the replay options of a multi-process fit (docs/engineering/multi-gpu.md).

        Every region replays under DDP as on one device: its replayed backward hands the
        gradients to each parameter's own ``AccumulateGrad`` node, where DDP's hooks all-reduce
        them. Only the verifier cannot follow.

        Raises:
            TrainConfigError: ``replay.verify_every`` is set (its native shadow step runs
                outside DDP's forward, so its gradients would not be all-reduced and every
                comparison would fail).
        """
        if self.step_verifier.schedule.every:
            raise TrainConfigError(
                f"replay.verify_every={self.step_verifier.schedule.every!r} is not supported on "
                f"{self.trainer.world_size!r} processes: the shadow step bypasses DDP's gradient "
                "all-reduce; set replay.verify_every=0 or verify on one device"
            )

    @override
    def forward(self, images: Tensor) -> dict[str, Tensor]:
        """Raw outputs of the trained network for float images in [0, 1]."""
        outputs: dict[str, Tensor] = self.net(images)
        return outputs

    @override
    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        total, terms = self._loss(batch)
        if self._scaler() is None:
            # fp16's GradScaler skips non-finite steps itself (and backs off its scale)
            self.loss_guard.observe(total, terms, send=self._update_checked_late())
        # The losses stay off the progress bar: a bar reads its metrics after every batch, and
        # reading a value on the GPU makes the host wait for the step (the CLI's bar shows the
        # loss, read at most once a second).
        if reaches_loggers(self.trainer, self.global_step + 1, batch_idx):
            batch_size = batch["images"].shape[0]
            self.log("train/loss", total.detach() / batch_size, batch_size=batch_size)
            self.log_dict(
                {f"train/{name}": value for name, value in terms.items() if "/" not in name},
                batch_size=batch_size,
            )
        return total

    def _loss(self, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        """Forward and loss of one micro-batch: ``(total, terms)``."""
        raw = batch["images"]
        images = self.replay.images(raw, self.memory_format, network_input_dtype(raw.device))
        self.loss_progress.fill_(self._epoch_fraction())
        if self.replay.config.joins_network_and_loss:
            # one region: the phase timer's network phase holds the loss too
            result = self.replay.network_and_loss(images, batch, self.loss_progress)
            self._mark_phase("network")
            return result
        outputs = self.replay(images)
        self._mark_phase("network")
        return self.replay.loss(outputs, batch, self.loss_progress)

    def _mark_phase(self, phase: str) -> None:
        if self.phase_marker is not None:
            self.phase_marker(phase)

    @override
    def on_train_batch_start(self, batch: Batch, batch_idx: int) -> None:
        # The previous step's update has long been launched and the host has fetched this
        # batch meanwhile: reading that step's verdict now rarely waits.
        self.settle_update()
        if self.step_verifier.schedule.every:
            self.step_verifier.start_micro_batch(
                batch,
                first_of_step=batch_idx % self.trainer.accumulate_grad_batches == 0,
                steps_done=self.global_step,
                net=self.net,
                state=lambda: training_state(self._optimizer(), self.ema, self._scaler()),
            )

    @override
    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        if self.step_verifier.armed:
            # Lightning counts the step as completed only after this hook returns.
            self.step_verifier.finish_step(
                step=self.global_step + 1,
                digest=lambda: training_digest(
                    self.net, self._optimizer(), self.ema, self._scaler()
                ),
                native_step=self._native_step,
                recorders=self.replay_recorders(),
                device=self.device,
            )

    @override
    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Apply the trainer's own clip, if it was given one; ``grad_clip_norm`` is the update's.

        Lightning calls this after the closure (forward, backward; fp16 gradients already
        unscaled) and before the optimizer step, in the shadow step of the verifier too. The
        module's own clip runs inside the update step instead (:class:`UpdateStep`'s
        ``clip_norm``), recorded into the update's graph when the update is replayed.
        """
        if gradient_clip_val is not None:
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def _native_step(self, batches: Sequence[Batch]) -> None:
        """Lightning's closure and optimizer step over ``batches``, replay off (the shadow)."""
        optimizer, strategy = self._optimizer(), self.trainer.strategy

        def micro_batch(batch: Batch, first: bool) -> Tensor:
            with self.trainer.precision_plugin.train_step_context():
                loss = self._loss(batch)[0] / self.trainer.accumulate_grad_batches
            if first:
                optimizer.zero_grad()
            strategy.backward(loss, optimizer)
            return loss

        *head, last = batches
        for i, batch in enumerate(head):
            micro_batch(batch, i == 0)
        strategy.optimizer_step(optimizer, closure=lambda: micro_batch(last, not head))

    def _optimizer(self) -> torch.optim.Optimizer:
        optimizer: torch.optim.Optimizer = self.trainer.optimizers[0]
        return optimizer

    def _scaler(self) -> torch.amp.GradScaler | None:
        scaler: torch.amp.GradScaler | None = getattr(self.trainer.precision_plugin, "scaler", None)
        return scaler

    def _allows_update(self) -> bool:
        """Whether this step's update may run, asked right before it.

        fp16's GradScaler decides itself. A replayed update backs up what it writes, so the loss
        guard only seals the step's flags, to be read late (:meth:`settle_update`); a native
        update waits for them now.
        """
        if self._scaler() is not None:
            return True
        step = self.global_step + 1
        if self._update_checked_late():
            self.loss_guard.seal(step)
            return True
        return self.loss_guard.allows_update(step)

    def _update_checked_late(self) -> bool:
        """Whether the loss guard checks this step after its update (which backs up what it
        writes and can be undone) rather than before it."""
        return self.update_step is not None and self.update_step.backup is not None

    def settle_update(self, *, failing: bool = False) -> None:
        """Read the loss guard's verdict on the last replayed update, if it is still pending.

        A non-finite step's update is undone (the schedule too under ``stop``), then the fit
        stops or skips as the policy says (:mod:`lucid_yolo.train.non_finite_loss`). Called
        before anything uses or publishes the trained state: the next step, validation, the
        end of an epoch, a checkpoint, an exception.

        Args:
            failing: the fit is ending with an exception; undo without raising, and without
                asking the other processes.

        Raises:
            NonFiniteLossError: under ``stop`` when that step's loss was not finite.
        """
        if self.loss_guard.pending:
            self.loss_guard.settle(self._undo_update, failing=failing)

    def _undo_update(self) -> None:
        assert self.update_step is not None
        self.update_step.undo(schedule=self.loss_guard.policy == "stop")

    def _all_processes_agree(self, finite: bool) -> bool:
        """``finite`` on every process (data-parallel ranks skip or stop together)."""
        return bool(self.trainer.strategy.reduce_boolean_decision(finite, all=True))

    def replay_recorders(self) -> list[RegionRecorder | UpdateRecorder]:
        """Every recorder that replays part of the step: regions in use, then the update."""
        recorders: list[RegionRecorder | UpdateRecorder] = list(self.replay.recorders())
        if self.update_step is not None and self.update_step.replay:
            recorders.append(self.update_step.graphed.recorder)
        return recorders

    @override
    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        scheduler.step()

    @override
    def configure_optimizers(self) -> Any:
        hp = self.hparams
        ns_choice = hp["newton_schulz_dtype"]
        optimizer = MuSGD(
            param_groups(self.net, weight_decay=hp["weight_decay"]),
            lr=hp["lr0"],
            momentum=hp["momentum"],
            weight_decay=hp["weight_decay"],
            ns_dtype=None if ns_choice == "auto" else NEWTON_SCHULZ_DTYPES[ns_choice],
        )
        # The EMA blends inside the optimizer step, right after each applied update.
        trainer_clips = self.trainer.gradient_clip_val is not None
        self.update_step = UpdateStep(
            optimizer,
            self.ema,
            replay=self.replay.config.update,
            max_signatures=self.replay.config.max_signatures,
            pool=self.replay.shared_pool(self.device),
            allows_update=self._allows_update,
            # fp16's GradScaler checks inside its step; a replayed update's check comes late
            backup=self.replay.config.update and self._scaler() is None,
            clip_norm=0.0 if trainer_clips else self.hparams["grad_clip_norm"],
        )
        epochs = max(int(self.trainer.max_epochs or 1), 1)
        steps = max(int(self.trainer.estimated_stepping_batches) // epochs, 1)
        schedule = WarmupLinearSchedule(
            optimizer,
            epochs=epochs,
            steps_per_epoch=steps,
            lrf=hp["lrf"],
            warmup_epochs=hp["warmup_epochs"],
            min_warmup_steps=hp["warmup_min_steps"],
            warmup_bias_lr=hp["warmup_bias_lr"],
            warmup_momentum=hp["warmup_momentum"],
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": schedule, "interval": "step", "frequency": 1},
        }

    @override
    def configure_callbacks(self) -> list[Callback]:
        return [PendingUpdateCheck()]

    @override
    def on_fit_start(self) -> None:
        self.ema.rebind()

    @override
    def on_train_epoch_end(self) -> None:
        self.settle_update()

    @override
    def on_validation_start(self) -> None:
        self.settle_update()

    @override
    def on_validation_epoch_start(self) -> None:
        self.evaluator.reset()
        self.replay.start_evaluation(before_training=self.trainer.sanity_checking)

    @override
    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch)

    @override
    def on_validation_epoch_end(self) -> None:
        self._log_metrics("val")
        self.replay.end_evaluation()
        if not self.trainer.sanity_checking:
            self._log_replay_telemetry()
        if self.loss_guard.policy == "skip" and not self.trainer.sanity_checking:
            # every rank skipped the same steps (the guard's verdict is agreed)
            skipped = float(self.loss_guard.skipped)
            self.log(SKIPPED_STEPS, skipped, sync_dist=True, reduce_fx="max")

    @override
    def on_test_epoch_start(self) -> None:
        self.evaluator.reset()
        self.replay.start_evaluation()

    @override
    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch)

    @override
    def on_test_epoch_end(self) -> None:
        self._log_metrics("test")
        self.replay.end_evaluation()
        self._log_replay_telemetry()

    @override
    def predict_step(self, batch: Batch, batch_idx: int) -> list[dict[str, Tensor]]:
        outputs = EvaluationRegion(self.ema_net, self.memory_format)(batch["images"])
        return self.evaluator.predictions(outputs, batch)

    @override
    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """The module's state, after the verdict on a pending replayed update (every checkpoint
        reads the weights through here, before the optimizer's state)."""
        self.settle_update()
        return super().state_dict(*args, **kwargs)

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["ema_updates"] = self.ema.updates.detach().cpu()
        checkpoint["class_names"] = list(self.names)
        checkpoint["task"] = self.task
        checkpoint["non_finite_skipped"] = self.loss_guard.skipped

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "ema_updates" in checkpoint:
            self.ema.updates.copy_(checkpoint["ema_updates"])
        if "class_names" in checkpoint:
            self.names = tuple(checkpoint["class_names"])
        self.loss_guard.skipped = int(checkpoint.get("non_finite_skipped", 0))

    @property
    def replay_telemetry(self) -> Telemetry:
        """Summed counters of every replayed region, the update, the verifier, the
        evaluation forward, the evaluator's scoring and matching and the data module's pixel
        work."""
        parts = [r.telemetry for r in self.replay_recorders()]
        if isinstance(self._datamodule, YoloDataModule):
            parts.append(self._datamodule.pixel_replay_telemetry)
        return merge_telemetry(
            *parts,
            self.replay.evaluation_telemetry,
            self.evaluator.replay_telemetry,
            self.step_verifier.telemetry,
        )

    @property
    def _datamodule(self) -> object:
        """The trainer's data module; ``None`` without a trainer or a data module."""
        trainer = self._trainer
        return getattr(trainer, "datamodule", None)

    def _evaluate(self, batch: Batch) -> None:
        outputs = self.replay.evaluate(self.ema_net, batch["images"], self.memory_format)
        self.evaluator.update(outputs, batch)

    def _log_replay_telemetry(self) -> None:
        """Log the replay counters (``replay/*``) when anything records CUDA graphs (the data
        module's pixel work included)."""
        pixels = isinstance(self._datamodule, YoloDataModule) and self._datamodule.pixels_replayed
        if not (self.replay.config.graphs or pixels):
            return
        telemetry = self.replay_telemetry.as_dict()
        # counters of the whole job: each rank records and replays its own step
        self.log_dict(
            {f"replay/{k}": float(v) for k, v in telemetry.items()},
            sync_dist=True,
            reduce_fx="sum",
        )

    def _log_metrics(self, stage: str) -> None:
        for name, value in self.evaluator.compute().items():
            # Every rank computed the same value from the gathered images; the maximum of
            # equal copies is that value exactly, where their mean could round.
            self.log(
                f"{stage}/{name}",
                value,
                prog_bar=name.endswith("mAP50-95"),
                sync_dist=True,
                reduce_fx="max",
            )

    def _epoch_fraction(self) -> float:
        """Training progress for ProgLoss: by epoch, or by step when only ``max_steps`` is set."""
        epochs = self.trainer.max_epochs
        if epochs is not None and epochs > 0:
            return epoch_fraction(min(self.current_epoch, epochs - 1), epochs)
        max_steps = self.trainer.max_steps
        return min(self.global_step / max_steps, 1.0) if max_steps > 0 else 0.0


__all__ = ["YoloModule"]
