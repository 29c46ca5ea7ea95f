"""lucid_yolo.train: Lightning training of YOLO26 models, with CUDA-graph replay opt-in."""

from lucid_yolo.train.data.datamodule import YoloDataModule
from lucid_yolo.train.evaluation import FITNESS_KIND, TASK_KINDS, Evaluator
from lucid_yolo.train.exceptions import TrainConfigError, TrainError
from lucid_yolo.train.module import YoloModule
from lucid_yolo.train.replay import NetworkReplay, ReplayConfig
from lucid_yolo.train.trainer import YoloTrainer

__all__ = [
    # Lightning entry points
    "YoloDataModule",
    "YoloModule",
    "YoloTrainer",
    # evaluation
    "Evaluator",
    "FITNESS_KIND",
    "TASK_KINDS",
    # errors
    "TrainError",
    "TrainConfigError",
    # replay binding
    "NetworkReplay",
    "ReplayConfig",
]
