"""Loading a trained :class:`YoloModule` from a Lightning checkpoint for ``predict`` and ``export``.

Both commands deploy the EMA network, the weights that validation scored and the checkpoint
monitor chose, in eval mode (BatchNorm running statistics, one-to-one head).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import torch

from lucid_yolo.cli.errors import CliError
from lucid_yolo.models import YOLO26
from lucid_yolo.train import YoloDataModule, YoloModule
from lucid_yolo.train.data.dataset_yaml import Task

DEFAULT_IMGSZ = 640


@dataclass(frozen=True)
class Deployed:
    """A checkpoint's network ready for inference.

    Attributes:
        module: the loaded Lightning module (CPU).
        net: its EMA network, eval mode.
        task: ``detect``, ``segment``, ``pose`` or ``obb``.
        names: class names, index = class id.
        imgsz: the training input size saved with the data module (640 when absent).
    """

    module: YoloModule
    net: YOLO26
    task: Task
    names: tuple[str, ...]
    imgsz: int


def load_checkpoint(path: str | Path) -> Deployed:
    """Load ``path`` on the CPU and take its EMA network in eval mode.

    Raises:
        CliError: the file is missing or is not a lucid-yolo Lightning checkpoint.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise CliError(
            f"--checkpoint {str(path)!r}: no such file; pass a .ckpt written by `lucid-yolo fit` "
            "(e.g. runs/lightning_logs/version_0/checkpoints/best.ckpt)"
        )
    try:
        module = YoloModule.load_from_checkpoint(file, map_location="cpu", weights_only=True)
        raw = torch.load(file, map_location="cpu", weights_only=True)
    except (KeyError, RuntimeError, pickle.UnpicklingError, EOFError) as error:
        raise CliError(
            f"--checkpoint {str(path)!r} is not a lucid-yolo checkpoint ({error}); pass a .ckpt "
            "written by `lucid-yolo fit`"
        ) from error
    data_state = raw.get(YoloDataModule.__qualname__) or {}
    net = module.ema_net.eval()
    if not isinstance(net, YOLO26):
        raise CliError(f"--checkpoint {str(path)!r} holds a {type(net).__name__}, not a YOLO26")
    return Deployed(
        module=module,
        net=net,
        task=module.task,
        names=module.names,
        imgsz=int(data_state.get("imgsz", DEFAULT_IMGSZ)),
    )


__all__ = ["DEFAULT_IMGSZ", "Deployed", "load_checkpoint"]
