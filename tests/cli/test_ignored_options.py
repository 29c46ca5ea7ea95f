"""Ignored-option warnings: which explicit flags a subcommand drops, and why."""

from __future__ import annotations

from lucid_yolo.cli.ignored_options import explicit_flags, ignored_option_warnings
from lucid_yolo.cli.lightning_cli import UNSAVED_MODEL_OPTIONS


def test_explicit_flags_reads_both_spellings_and_skips_values() -> None:
    args = ["fit", "--model.lr0", "0.1", "--data.imgsz=320", "--config", "detect-n"]
    assert explicit_flags(args) == ["model.lr0", "data.imgsz"]


def test_ignored_options_fit_without_checkpoint_keeps_model_flags() -> None:
    args = ["--model.lr0", "0.1", "--model.replay.network", "true"]
    assert ignored_option_warnings("fit", args, ckpt_path=None, kept_model_options=()) == []


def test_ignored_options_checkpoint_overrides_model_flags_except_kept_ones() -> None:
    args = ["--model.lr0", "0.1", "--model.val_conf", "0.5"]
    lines = ignored_option_warnings(
        "predict", args, ckpt_path="best.ckpt", kept_model_options=("val_conf", "max_det")
    )
    assert lines == [
        "--model.lr0 is ignored: with --ckpt_path the model options are the checkpoint's "
        "hyperparameters"
    ]


def test_ignored_options_evaluation_replays_only_its_forward() -> None:
    args = [
        "--model.replay.network",
        "true",
        "--model.replay.evaluation=true",
        "--model.replay.verify_every=2",
        "--model.replay.max_signatures=2",
        "--model.replay.evaluate_in_pool=false",
    ]
    for subcommand in ("validate", "test"):
        lines = ignored_option_warnings(subcommand, args, ckpt_path="x.ckpt", kept_model_options=())
        assert lines == [
            f"--model.replay.{name} is ignored: replay records training steps; {subcommand} "
            "replays only its evaluation forward (--model.replay.evaluation)"
            for name in ("network", "verify_every", "evaluate_in_pool")
        ]


def test_ignored_options_replay_group_without_checkpoint_is_ignored_outside_fit() -> None:
    args = ["--model.replay.update", "true", "--model.replay.evaluation", "true"]
    lines = ignored_option_warnings("predict", args, ckpt_path=None, kept_model_options=())
    assert lines == [
        f"--model.replay.{name} is ignored: replay records training steps; predict runs the "
        "network natively"
        for name in ("update", "evaluation")
    ]


def test_ignored_options_predict_only_flags_outside_predict() -> None:
    args = ["--data.source", "images/", "--output.dir", "out"]
    lines = ignored_option_warnings("fit", args, ckpt_path=None, kept_model_options=())
    assert [line.split(" is ignored")[0] for line in lines] == ["--data.source", "--output.dir"]
    assert ignored_option_warnings("predict", args, ckpt_path="b.ckpt", kept_model_options=()) == []


def test_ignored_options_checkpoint_keeps_unsaved_model_options_and_groups() -> None:
    args = [
        "--model.memory_format",
        "contiguous",
        "--model.casts_weights_together=false",
        "--model.replay.network=true",
        "--model.lr0=1",
    ]
    lines = ignored_option_warnings(
        "fit", args, ckpt_path="last.ckpt", kept_model_options=UNSAVED_MODEL_OPTIONS
    )
    assert [line.split(" is ignored")[0] for line in lines] == ["--model.lr0"]
