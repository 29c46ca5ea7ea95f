"""The ``lucid-yolo`` entry point: help of every command and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lucid_yolo.cli.main import LIGHTNING_COMMANDS, PLAIN_COMMANDS, main
from lucid_yolo.train.data import synthetic
from lucid_yolo.train.exceptions import TrainConfigError

HELP_COMMANDS = [
    ["info"],
    ["data"],
    ["data", "check"],
    ["data", "synth"],
    ["data", "convert"],
    ["export"],
]


def test_main_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in (*PLAIN_COMMANDS, *LIGHTNING_COMMANDS):
        assert f"    {name} " in out


def test_main_help_loads_neither_torch_nor_lightning() -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from lucid_yolo.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout == "[]\n", done.stderr


def test_main_without_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "commands:" in capsys.readouterr().out


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=" ".join)
def test_plain_command_help_exits_zero(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: lucid-yolo {' '.join(command)}" in capsys.readouterr().out


@pytest.mark.parametrize("command", LIGHTNING_COMMANDS)
def test_lightning_command_help_shows_model_and_data_options(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: lucid-yolo [options] {command}" in out
    assert "--model.replay.network" in out
    assert "--data.batch_size" in out


def test_main_unknown_config_suggests_close_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--config", "detct-n"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lucid-yolo: error: --config 'detct-n'")
    assert "did you mean 'detect-n'" in err
    assert err.count("\n") == 1


def test_main_missing_data_path_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "data.yaml"
    assert main(["fit", "--data.yaml", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lucid-yolo: error: {missing}")
    assert "Traceback" not in err


def test_main_bad_dataset_yaml_is_an_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "data.yaml"
    bad.write_text("path: .\ntrain: [unclosed\n")
    assert main(["fit", "--data.yaml", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lucid-yolo: error: {bad}:3: not valid YAML")
    assert "Traceback" not in err


def test_main_bad_config_yaml_prints_usage_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "cfg.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(bad)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error: Problems parsing config" in err
    assert "Traceback" not in err


def test_main_bad_option_value_prints_usage_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--data.batch_size", "abc"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: lucid-yolo [options] fit")
    assert 'error: Parser key "data.batch_size"' in err


def test_main_unknown_model_names_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model.model", "yolo99x"])
    assert exit_info.value.code == 2
    assert "did you mean 'yolo26x'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option",
    [
        "--model.replay.network",
        "--model.replay.segment_heads",
        "--model.replay.loss",
        "--model.replay.update",
        "--model.replay.evaluation",
    ],
)
def test_main_replay_on_cpu_is_refused(
    option: str, tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["fit", "--data.yaml", str(tiny_data), option, "true", "--trainer.accelerator", "cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "lucid-yolo: error: --model.replay.network/segment_heads/loss/update/evaluation"
    )
    assert "need a CUDA device" in err


@pytest.mark.parametrize("subcommand", ["validate", "test"])
def test_main_evaluation_replay_is_kept_outside_fit_and_refused_on_cpu(
    subcommand: str, tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [subcommand, "--data.yaml", str(tiny_data), "--model.replay.evaluation", "true"]
    assert main([*argv, "--trainer.accelerator", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "need a CUDA device" in err
    assert "is ignored" not in err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--data.batch_size", "0"], "batch_size=0"),
        (["--model.lr0", "-1"], "lr0 must be > 0, got -1.0"),
        (["--data.augment.scale", "1.5"], "AugmentConfig.scale=1.5"),
    ],
)
def test_main_out_of_range_option_is_one_line_error(
    option: list[str], message: str, tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fit", "--data.yaml", str(tiny_data), *option]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lucid-yolo: error: invalid option value: ")
    assert message in err
    assert err.count("\n") == 1


def test_main_train_error_is_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*args: object, **kwargs: object) -> Path:
        raise TrainConfigError("imgsz=7 is too small; use 64 or more")

    # `data synth` imports the generator when it runs, from its home module
    monkeypatch.setattr(synthetic, "generate_synthetic", refuse)
    assert main(["data", "synth", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "lucid-yolo: error: imgsz=7 is too small; use 64 or more\n"
