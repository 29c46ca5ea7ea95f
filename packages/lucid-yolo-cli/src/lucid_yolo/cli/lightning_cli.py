"""``lucid-yolo fit | validate | test | predict``: LightningCLI over :class:`YoloModule` and
:class:`YoloDataModule`.

The model name is the single source of the task: the data module reads labels for the model's
task, and the model takes its class count and keypoint layout from the dataset. Defaults follow
the machine: bf16 autocast on a CUDA device, fp32 on the CPU.

``predict`` needs ``--ckpt_path`` (or ``--model.weights`` with ``--data.yaml``): LightningCLI
replaces the model options by the checkpoint's hyperparameters, and without ``--data.yaml`` the
data module takes the class names, task, keypoint layout and image size from the checkpoint too,
so only ``--data.source`` is needed.
The :class:`PredictionWriter` (``--output.*``) writes the results.

Example::

    uv run lucid-yolo predict --ckpt_path runs/detect/fit1/checkpoints/best.ckpt \
        --data.source path/to/images --output.draw true

Every command writes into its own folder, ``runs/<task>/<command><N>``
(:mod:`lucid_yolo.cli.run_folder`), and says which at its start.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lucid_yolo.cli.cuda_allocator import allocator_clause
from lucid_yolo.cli.embedded import SYNTHETIC, embedded_dataset
from lucid_yolo.cli.errors import CliError
from lucid_yolo.cli.final_report import FITNESS, ValidationHistory, final_line
from lucid_yolo.cli.fit_summary import FitModelSummary
from lucid_yolo.cli.help_format import PlainHelpFormatter
from lucid_yolo.cli.ignored_options import ignored_option_warnings
from lucid_yolo.cli.legacy_checkpoint import check_replay_options
from lucid_yolo.cli.prediction_writer import PredictionWriter
from lucid_yolo.cli.progress_bar import RunProgressBar
from lucid_yolo.cli.quiet import quiet_lightning
from lucid_yolo.cli.run_folder import EmptyRunFolderRemover, next_run_folder
from lucid_yolo.cli.time_left import TimeLeft
from lucid_yolo.models import model_spec
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule, YoloTrainer
from lucid_yolo.train.callbacks import (
    AtomicCheckpointIO,
    BackgroundCheckpointWrites,
    EpochSummary,
    PhaseTimer,
    RngState,
    SetUpObjectsFrozen,
    SigtermCheckpoint,
)
from lucid_yolo.train.data import CheckpointData, DataError, load_checkpoint_data

RUNS = "runs"
"""Default folder of logs and checkpoints (``--trainer.default_root_dir``)."""
PREDICT_CONF = 0.25
"""``predict``'s default ``--model.val_conf``: validation's 0.001 serves mAP, not a reader."""
INFERENCE_OPTIONS = ("val_conf", "max_det")
"""Model options that ``predict`` takes from the command line, not from the checkpoint."""
UNSAVED_MODEL_OPTIONS = ("memory_format", "casts_weights_together", "replay")
"""Model options (or groups) a checkpoint's hyperparameters leave out, so that the command line's
value holds with ``--ckpt_path``: they change how a step runs, not what a checkpoint holds."""


def task_of(model: str) -> str:
    """The task of a registered model name (``yolo26n-seg`` → ``segment``)."""
    return model_spec(model).task


def kpt_shape_of(data: YoloDataModule) -> tuple[int, int]:
    """The dataset's keypoint layout as ``(K, 3)``; COCO's 17 points when it has none."""
    shape = data.spec.kpt_shape
    return (17, 3) if shape is None else (shape[0], 3)


def trainer_defaults(subcommand: str) -> dict[str, Any]:
    """Trainer defaults for this machine and ``subcommand``.

    Every command loads checkpoints through :class:`AtomicCheckpointIO` (weights-only, issue 15).
    Only ``fit`` checkpoints: in the other commands a checkpoint callback (ours or Lightning's
    default one) would only warn that its folder changed when the evaluated checkpoint restores
    its state.
    """
    cuda = torch.cuda.is_available()
    callbacks: list[Callback] = [PhaseTimer(), EpochSummary()]
    if subcommand == "fit":
        callbacks = [
            # best.ckpt follows the fitness; last.ckpt is rewritten every epoch so that a run can
            # resume from where it stopped (Lightning's save_last only copies on a new best).
            ModelCheckpoint(monitor=FITNESS, mode="max", filename="best"),
            ModelCheckpoint(filename="last", enable_version_counter=False),
            # both written on a background thread while the next epoch trains, from one dump
            # of the fit's state (YoloTrainer)
            BackgroundCheckpointWrites(),
            FitModelSummary(),
            ValidationHistory(),
            *callbacks,
            TimeLeft(),
            # SIGTERM writes last.ckpt at the batch boundary; with the generators' state and the
            # loader's position in it, `fit --ckpt_path last.ckpt` continues bit for bit
            SigtermCheckpoint(),
            RngState(),
            # no 0.3-0.4 s full garbage collection every few epochs of a replayed fit
            SetUpObjectsFrozen(),
        ]
    defaults: dict[str, Any] = {
        "precision": "bf16-mixed" if cuda else "32-true",
        "enable_checkpointing": subcommand == "fit",
        "default_root_dir": RUNS,
        "logger": {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": RUNS},
        },
        "callbacks": callbacks,
        # every command reads --ckpt_path weights-only, whatever Lightning's default; fit also
        # writes its checkpoints atomically beside their target (as a class path: jsonargparse
        # validates trainer plugins against a union of classes)
        "plugins": [{"class_path": f"{AtomicCheckpointIO.__module__}.AtomicCheckpointIO"}],
    }
    return defaults


class YoloCLI(LightningCLI):
    """LightningCLI with the model ↔ data links, the embedded dataset and the final report.

    Args:
        command: the subcommand that runs (``fit``, ``validate``, ``test`` or ``predict``). Only
            its parser is built: LightningCLI builds one per subcommand from the trainer's,
            model's and data module's signatures (about 0.1 s each), and a process runs one.
        args, kwargs: LightningCLI's.
    """

    def __init__(self, *args: Any, command: str, **kwargs: Any) -> None:
        self.command = command
        super().__init__(*args, **kwargs)

    @override
    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """The command that runs and the trainer arguments it skips (LightningCLI's table)."""
        return {self.command: LightningCLI.subcommands()[self.command]}

    @override
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("model.model", "data.task", compute_fn=task_of, apply_on="parse")
        parser.link_arguments(
            "data", "model.num_classes", compute_fn=_num_classes, apply_on="instantiate"
        )
        parser.link_arguments(
            "data", "model.kpt_shape", compute_fn=kpt_shape_of, apply_on="instantiate"
        )
        parser.set_defaults({"data.yaml": SYNTHETIC})
        # a fit's step gets the same batch bit for bit, with less data wait on the device in
        # every replayed fit measured (H100, sessions 46-47; only fit has a training loader);
        # the data module keeps Batch dicts by default for code that iterates its loaders
        parser.set_defaults({"data.pack_batches": True})
        for action in parser._actions:
            if action.dest == "data.yaml":
                # required by YoloDataModule, but the CLI always has a value: the default above
                action.required = False
        parser.add_lightning_class_args(PredictionWriter, "output")

    @override
    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse as Lightning does; ``predict`` checks its checkpoint before anything loads it,
        and a checkpoint that still names the retired replay options is refused with the fix
        (:mod:`lucid_yolo.cli.legacy_checkpoint`).

        After this hook LightningCLI overwrites every model option with the checkpoint's
        hyperparameters (``hyper_parameters`` of ``--ckpt_path``), command line included; the
        inference options (:data:`INFERENCE_OPTIONS`) are kept here and put back in
        :meth:`before_instantiate_classes`.
        """
        if self.command == "predict":
            parser.set_defaults({"predict.model.val_conf": PREDICT_CONF})
        if self.command in ("validate", "test"):
            # the epoch summary already prints the metric table: Lightning's own (`verbose`)
            # repeats it
            parser.set_defaults({f"{self.command}.verbose": False})
        # LightningCLI warns when it is given `args` while sys.argv also holds arguments; the
        # console script has already read them (and resolved config names), so hide them while
        # parsing only: DDP's launcher starts the other ranks with this process's sys.argv.
        argv, sys.argv = sys.argv, sys.argv[:1]
        try:
            super().parse_arguments(parser, args)
        finally:
            sys.argv = argv
        self.inference_options: dict[str, Any] = {}
        subcommand = str(self.config.get("subcommand"))
        self.imgsz_asked = _asked(subcommand, "data.imgsz", args)
        ckpt_path = self.config[subcommand].get("ckpt_path")
        if ckpt_path is not None:
            check_replay_options(ckpt_path)
        if subcommand == "predict":
            config = self.config.predict
            if config.ckpt_path is not None or config.model.weights is None:
                check_checkpoint(config.ckpt_path)
            self.inference_options = {key: config.model[key] for key in INFERENCE_OPTIONS}
        if isinstance(args, list):
            for line in ignored_option_warnings(
                subcommand,
                [str(a) for a in args],
                ckpt_path=ckpt_path,
                kept_model_options=(
                    *UNSAVED_MODEL_OPTIONS,
                    *(INFERENCE_OPTIONS if subcommand == "predict" else ()),
                ),
            ):
                _print_once(f"lucid-yolo: warning: {line}", file=sys.stderr)

    @override
    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        if self.subcommand == "predict":
            _prepare_predict(config, self.inference_options)
        if self.subcommand in ("validate", "test") and config.get("ckpt_path"):
            _evaluate_as_trained(config, keep_imgsz=self.imgsz_asked)
        if self.subcommand != "fit":
            # without training steps only the evaluation forward can replay; predict runs eagerly
            asked = ReplayConfig(**config.model.replay.as_dict())
            kept = asked.for_evaluation() if self.subcommand in ("validate", "test") else None
            for key, value in asdict(kept or ReplayConfig()).items():
                config.model.replay[key] = value
        if self.subcommand == "fit":
            _require_epoch_limit(config.trainer)
        if str(config.data.yaml) == SYNTHETIC:
            config.data.yaml = str(embedded_dataset(task_of(config.model.model)))
        logger_args = getattr(config.trainer.logger, "init_args", None)
        if logger_args is not None and getattr(logger_args, "save_dir", None) == RUNS:
            # The default CSV logger writes to runs/<task>/<command><N> under
            # --trainer.default_root_dir, so that logs and checkpoints stay together.
            folder = next_run_folder(
                config.trainer.default_root_dir,
                task_of(config.model.model),
                str(self.subcommand),
            )
            logger_args.save_dir = str(folder.parent)
            logger_args.name = ""
            logger_args.version = folder.name
            self.trainer_defaults["callbacks"].append(EmptyRunFolderRemover(folder))
        if config.trainer.enable_progress_bar is not False:
            self.trainer_defaults["callbacks"].append(RunProgressBar())
        replay = ReplayConfig(**config.model.replay.as_dict())
        accelerator = str(config.trainer.accelerator)
        if replay.graphs and (accelerator == "cpu" or not torch.cuda.is_available()):
            raise CliError(
                "--model.replay.network/segment_heads/loss/update/evaluation replay CUDA graphs "
                "and need a CUDA device; this run is on the CPU: leave them off"
            )

    @override
    def instantiate_classes(self) -> None:
        """Instantiate as Lightning does; an out-of-range option becomes a one-line error.

        The model, data and augmentation constructors check their arguments and raise
        ``ValueError`` with the bad value and the fix; jsonargparse may wrap that error in its
        own, so the message shown is the innermost cause.
        """
        try:
            super().instantiate_classes()
        except ValueError as error:
            root: BaseException = error
            while root.__cause__ is not None:
                root = root.__cause__
            raise CliError(f"invalid option value: {root}") from error

    @override
    def after_instantiate_classes(self) -> None:
        """Print the one line that says what runs where: model, device, precision, folder."""
        super().after_instantiate_classes()
        config = self.config[str(self.subcommand)]
        if self.subcommand != "predict" and config.get("ckpt_path"):
            _check_trained_classes(config.ckpt_path, self.datamodule)
        trainer = self.trainer
        model = self.config_init[str(self.subcommand)]["model"].hparams["model"]
        devices = f" × {trainer.world_size}" if trainer.world_size > 1 else ""
        device_type = trainer.strategy.root_device.type
        _print_once(
            f"lucid-yolo {self.subcommand}: {model} on {device_type}{devices}, precision "
            f"{trainer.precision}{allocator_clause(device_type, os.environ)}, "
            f"run folder {trainer.log_dir}"
        )

    def after_fit(self) -> None:
        """Print the final metrics line and where the checkpoint is."""
        callbacks = self.trainer_defaults["callbacks"]
        history = next(cb for cb in callbacks if isinstance(cb, ValidationHistory))
        skipped = self.model.loss_guard.skipped if isinstance(self.model, YoloModule) else 0
        _print_once(final_line(self.trainer, history.epochs, skipped_steps=skipped))

    def after_predict(self) -> None:
        """Print how many images and detections were written, and where."""
        writer = self.config_init["predict"]["output"]
        if isinstance(writer, PredictionWriter):
            _print_once(writer.summary())


@rank_zero_only
def _print_once(line: str, file: TextIO | None = None) -> None:
    """Print ``line`` from the first process only: every rank of a multi-device run executes
    the command, and its lines would show once per device."""
    print(line, file=file or sys.stdout, flush=True)


def _num_classes(data: YoloDataModule) -> int:
    return data.num_classes


def check_checkpoint(path: str | None) -> None:
    """Refuse a ``predict`` without a readable lucid-yolo checkpoint, before Lightning reads it.

    Raises:
        CliError: no ``--ckpt_path``, no such file, or not a checkpoint of ``lucid-yolo fit``.
    """
    if path is None:
        raise CliError(
            "predict needs --ckpt_path: a .ckpt written by `lucid-yolo fit` "
            "(e.g. runs/detect/fit1/checkpoints/best.ckpt)"
        )
    if not Path(path).is_file():
        raise CliError(f"--ckpt_path {path!r}: no such file; check the path")
    try:
        load_checkpoint_data(path, YoloDataModule.__qualname__)
    except DataError as error:
        raise CliError(f"--ckpt_path {error}") from error


def _prepare_predict(config: Any, inference_options: dict[str, Any]) -> None:
    """Put the command line's inference options back; default the data to the checkpoint."""
    for key, value in inference_options.items():
        config.model[key] = value
    if str(config.data.yaml) == SYNTHETIC:
        if config.data.source is None:
            raise CliError(
                "predict needs --data.source: an image or a folder of images (or --data.yaml "
                "to predict a dataset's test or val split)"
            )
        if config.ckpt_path is None:
            raise CliError(
                "predict with --model.weights needs --data.yaml: the dataset YAML whose class "
                "names and count the weights were trained with"
            )
        # no dataset: the class names, task, keypoint layout and image size of the checkpoint
        config.data.yaml = str(config.ckpt_path)
    if config.return_predictions is None:
        # the writer saves each batch as it comes; keeping every mask in memory serves nobody
        config.return_predictions = False


def _require_epoch_limit(trainer: Any) -> None:
    """Refuse a ``fit`` with no limit unless asked: Lightning would train for 1000 epochs.

    Raises:
        CliError: none of ``max_epochs``, ``max_steps`` and ``max_time`` is set.
    """
    if trainer.max_epochs is None and trainer.max_steps in (None, -1) and trainer.max_time is None:
        raise CliError(
            "the run has no end: set --trainer.max_epochs N (or --trainer.max_steps, "
            "--trainer.max_time), or --trainer.max_epochs -1 to train until stopped"
        )


def _trained_data(ckpt_path: str) -> CheckpointData:
    try:
        return load_checkpoint_data(ckpt_path, YoloDataModule.__qualname__)
    except DataError as error:
        raise CliError(f"--ckpt_path: {error}") from error


def _asked(subcommand: str, option: str, args: Any) -> bool:
    """Whether the command line (or its ``PL_`` environment variable) sets ``option``."""
    flag = f"--{option}"
    words = [str(a) for a in args] if isinstance(args, list) else []
    variable = f"PL_{subcommand}__{option.replace('.', '__')}".upper()
    return variable in os.environ or any(w == flag or w.startswith(f"{flag}=") for w in words)


def _evaluate_as_trained(config: Any, *, keep_imgsz: bool) -> None:
    """Evaluate a checkpoint at the size and on the dataset it was trained with, unless
    ``--data.imgsz`` or ``--data.yaml`` say otherwise.

    A packaged config's size is a training setting (``--config detect-n`` says 640) and does
    not count: only ``--data.imgsz`` itself (``keep_imgsz``) keeps its value. Without
    ``--data.yaml`` the option holds the embedded synthetic set, which only a quickstart
    checkpoint was trained on; the dataset file a checkpoint names replaces it (issue 18's walk:
    ``validate --ckpt_path`` of a model of an own 3-class set loaded it into a 5-class network).

    Raises:
        CliError: the checkpoint is missing or holds no lucid-yolo dataset metadata.
    """
    saved = _trained_data(config.ckpt_path)
    if config.data.imgsz is None or not keep_imgsz:
        config.data.imgsz = saved.imgsz
    if str(config.data.yaml) == SYNTHETIC and saved.dataset_file is not None:
        config.data.yaml = str(saved.dataset_file)


def _check_trained_classes(ckpt_path: str, data: YoloDataModule) -> None:
    """Refuse a checkpoint trained on other classes than ``data``'s, before Lightning loads it.

    Lightning loads the weights before the data module's own check, and a class count that
    differs fails there as a page of tensor size mismatches.

    Raises:
        CliError: the task or the class names differ; the message names both and the fix.
    """
    trained = _trained_data(ckpt_path).spec
    if (trained.task, trained.names) == (data.task, data.names):
        return
    where = "" if data.dataset_file is None else f" ({data.dataset_file})"
    raise CliError(
        f"--ckpt_path {ckpt_path!r} was trained for {trained.task} on {len(trained.names)} "
        f"classes {list(trained.names)!r}, but the data{where} is {data.task} with "
        f"{len(data.names)} classes {list(data.names)!r}; pass the dataset it was trained on "
        "with --data.yaml"
    )


def run_lightning(args: list[str]) -> None:
    """Run a LightningCLI subcommand with ``args`` (packaged config names already resolved)."""
    per_command = {"formatter_class": PlainHelpFormatter, "default_env": True}
    try:
        with quiet_lightning():
            YoloCLI(
                YoloModule,
                YoloDataModule,
                command=args[0],
                # best.ckpt and last.ckpt of one epoch's end written from one dump
                trainer_class=YoloTrainer,
                trainer_defaults=trainer_defaults(args[0]),
                seed_everything_default=0,
                save_config_kwargs={"overwrite": True},
                parser_kwargs={
                    "prog": "lucid-yolo",
                    **per_command,
                    args[0]: per_command,
                },
                args=args,
            )
    except SIGTERMException:
        # Lightning stopped the fit at a batch boundary and SigtermCheckpoint saved last.ckpt;
        # the shell convention for "terminated by signal N" is status 128 + N
        print(
            "lucid-yolo: stopped by SIGTERM; resume with --ckpt_path <checkpoints>/last.ckpt",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(128 + signal.SIGTERM) from None


__all__ = [
    "INFERENCE_OPTIONS",
    "PREDICT_CONF",
    "RUNS",
    "YoloCLI",
    "check_checkpoint",
    "kpt_shape_of",
    "run_lightning",
    "task_of",
]
