"""Loading a trained network from a Lightning checkpoint for ``export``.

The exported network is the EMA network, the weights that validation scored and the checkpoint
monitor chose, in eval mode (BatchNorm running statistics, one-to-one head). ``predict`` runs
through LightningCLI (``--ckpt_path``) and deploys the same EMA network in
:meth:`YoloModule.predict_step`.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

from lucid_yolo.cli.errors import CliError
from lucid_yolo.models import TASK_IMAGE_SIZES, YOLO26, load_weights, read_weights
from lucid_yolo.train import YoloDataModule, YoloModule
from lucid_yolo.train.data import DataError, load_checkpoint_data
from lucid_yolo.train.data.dataset_yaml import Task


@dataclass(frozen=True)
class Deployed:
    """A checkpoint's network ready for inference.

    Attributes:
        net: the EMA network, eval mode, on the CPU.
        task: ``detect``, ``segment``, ``pose`` or ``obb``.
        imgsz: the training input size saved with the data module.
    """

    net: YOLO26
    task: Task
    imgsz: int


def load_checkpoint(path: str | Path) -> Deployed:
    """Load ``path`` on the CPU and take its EMA network in eval mode.

    Raises:
        CliError: the file is missing or is not a lucid-yolo Lightning checkpoint.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise CliError(
            f"--ckpt_path {str(path)!r}: no such file; pass a .ckpt written by `lucid-yolo fit` "
            "(e.g. runs/detect/fit1/checkpoints/best.ckpt)"
        )
    try:
        saved = load_checkpoint_data(file, YoloDataModule.__qualname__)
        module = YoloModule.load_from_checkpoint(file, map_location="cpu", weights_only=True)
    except (DataError, KeyError, RuntimeError, pickle.UnpicklingError, EOFError) as error:
        raise CliError(
            f"--ckpt_path {str(path)!r} is not a lucid-yolo checkpoint ({error}); pass a .ckpt "
            "written by `lucid-yolo fit`"
        ) from error
    net = module.ema_net.eval()
    if not isinstance(net, YOLO26):
        raise CliError(f"--ckpt_path {str(path)!r} holds a {type(net).__name__}, not a YOLO26")
    return Deployed(net=net, task=module.task, imgsz=saved.imgsz)


def load_pretrained(path: str | Path) -> Deployed:
    """The network of pretrained weights (:func:`lucid_yolo.models.read_weights`) in eval mode,
    at its task's published input size.

    Raises:
        lucid_yolo.models.WeightsError: the file is missing, unsafe or not a YOLO26 network.
    """
    weights = read_weights(path)
    net = weights.build()
    load_weights(net, weights)
    return Deployed(net=net.eval(), task=weights.task, imgsz=TASK_IMAGE_SIZES[weights.task])


__all__ = ["Deployed", "load_checkpoint", "load_pretrained"]
