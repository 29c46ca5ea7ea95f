"""``lucid-yolo fit | validate | test`` through LightningCLI, as subprocesses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
import yaml
from lightning.pytorch.cli import LightningCLI

from lucid_yolo.cli.embedded import VERSION
from lucid_yolo.cli.lightning_cli import YoloCLI, trainer_defaults
from lucid_yolo.cli.main import main
from lucid_yolo.train.callbacks import SetUpObjectsFrozen

if TYPE_CHECKING:
    from conftest import CliRunner, Trained

FINAL = re.compile(
    r"^final: best epoch \d+ of 0-\d+: box mAP50-95 [0-9.]+ mAP50 [0-9.]+ "
    r"\| checkpoint: \S+/checkpoints/best\.ckpt$",
    re.M,
)
NOISE = (
    "litlogger",
    "LeafSpec",
    "log_every_n_steps",
    "Total FLOPs",
    "GPU available",
    "Seed set",
    "does not have many workers",
    "`Trainer.fit` stopped",
    "lightning_logs",
    "v_num",
    "DataLoader 0",
)
"""Lines Lightning prints on its own (issue 18, point 7); a lucid-yolo run shows none of them."""

BOX_MAP = re.compile(r"^│ box +│ [0-9.]+ │ [0-9.]+ │ [0-9.]+ │ +([0-9.]+) │$", re.M)
"""The box row of lucid-yolo's metric table; its group is mAP50-95."""


def _table(output: str, title: str) -> float:
    """The box mAP50-95 of the metric table titled ``title`` (asserts there is exactly one)."""
    assert re.search(rf"^ *{title} *$", output, re.M), output
    maps = BOX_MAP.findall(output)
    assert len(maps) == 1, output
    for noise in NOISE:
        assert noise not in output, f"{noise!r} in the output"
    return float(maps[0])


def test_only_fit_freezes_the_set_up_objects_while_it_trains() -> None:
    kinds = {
        command: {type(c) for c in trainer_defaults(command)["callbacks"]}
        for command in ("fit", "validate", "test", "predict")
    }
    assert SetUpObjectsFrozen in kinds.pop("fit")
    assert all(SetUpObjectsFrozen not in k for k in kinds.values()), kinds


def test_fit_tiny_run_prints_final_line_and_saves_checkpoint(trained: Trained) -> None:
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert FINAL.search(trained.stdout), trained.stdout[-2000:]
    assert trained.checkpoint.is_file()


def test_fit_prints_none_of_lightnings_own_lines(trained: Trained) -> None:
    output = trained.stdout + trained.stderr
    for noise in NOISE:
        assert noise not in output, f"{noise!r} in the output of a fit"


def test_fit_summary_counts_flops_at_the_run_size(trained: Trained) -> None:
    assert "yolo26n: detect, 5 classes" in trained.stdout
    assert re.search(
        r"^training: +[0-9,]+ parameters, [0-9.]+ GFLOPs at 64 px$", trained.stdout, re.M
    )


def test_fit_prints_the_time_left_after_each_epoch(trained: Trained) -> None:
    assert re.search(
        r"^epoch 1 of 1 done: \d+:\d\d elapsed, about 0:00 left$", trained.stdout, re.M
    )


def test_fit_prints_the_data_lines_on_stdout(trained: Trained) -> None:
    assert re.search(r"^data: train: 4 images, ", trained.stdout, re.M), trained.stdout[:2000]
    assert re.search(r"^data: val: 2 images, ", trained.stdout, re.M)
    assert "data: " not in trained.stderr


def test_fit_names_its_run_folder_first(trained: Trained) -> None:
    first = trained.stdout.splitlines()[0]
    assert first == "lucid-yolo fit: yolo26n on cpu, precision 32-true, run folder runs/detect/fit1"
    assert not (trained.workdir / "runs/lightning_logs").exists()


def test_fit_print_config_shows_resolved_options(
    tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "detect-s", "--data.yaml", str(tiny_data), "--print_config"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "model: yolo26s" in out
    assert "replay:\n    network: false" in out
    assert f"yaml: {tiny_data}" in out


@pytest.mark.parametrize(
    ("flag", "packed"), [((), "true"), (("--data.pack_batches", "false"), "false")]
)
def test_fit_packs_training_batches_unless_told_not_to(
    tiny_data: Path, capsys: pytest.CaptureFixture[str], flag: tuple[str, ...], packed: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--data.yaml", str(tiny_data), *flag, "--print_config"])
    assert exit_info.value.code == 0
    assert f"pack_batches: {packed}" in capsys.readouterr().out


def test_fit_accepts_verify_every(tiny_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "fit",
        "--data.yaml",
        str(tiny_data),
        "--model.replay.verify_every",
        "3",
        "--print_config",
    ]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 0
    assert "verify_every: 3" in capsys.readouterr().out


@pytest.mark.slow
def test_validate_checkpoint_logs_box_map(
    cli: CliRunner, trained: Trained, tiny_fit: tuple[str, ...]
) -> None:
    done = cli(
        "validate",
        "--data.yaml",
        str(trained.data),
        "--data.imgsz",
        "64",
        "--data.workers",
        "0",
        "--ckpt_path",
        str(trained.checkpoint),
        "--model.lr0",
        "0.5",
        "--output.draw",
        "true",
        "--model.replay.network",
        "true",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert 0.0 <= _table(done.stdout, "validation") <= 1.0
    assert "warning: --model.lr0 is ignored: with --ckpt_path" in done.stderr
    assert "warning: --output.draw is ignored: only `predict`" in done.stderr
    # a training region on the CPU is not refused here: validate never records it
    assert "warning: --model.replay.network is ignored: replay records training steps" in (
        done.stderr
    )


def test_test_checkpoint_logs_box_map_at_the_trained_size(
    cli: CliRunner, trained: Trained, tmp_path: Path
) -> None:
    done = cli(
        "test",
        "--data.yaml",
        str(trained.data),
        "--data.workers",
        "0",
        "--ckpt_path",
        str(trained.checkpoint),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert 0.0 <= _table(done.stdout, "test") <= 1.0
    saved = yaml.safe_load((tmp_path / "runs/detect/test1/config.yaml").read_text())
    assert saved["data"]["imgsz"] == 64


def test_validate_checkpoint_scores_at_the_trained_size(
    cli: CliRunner, trained: Trained, tmp_path: Path
) -> None:
    argv = ["--config", "detect-n", "--data.yaml", str(trained.data), "--data.workers", "0"]
    done = cli("validate", *argv, "--ckpt_path", str(trained.checkpoint))
    assert done.returncode == 0, done.stderr[-2000:]
    saved = yaml.safe_load((tmp_path / "runs/detect/validate1/config.yaml").read_text())
    assert saved["data"]["imgsz"] == 64
    fit_map = re.search(r"box mAP50-95 ([0-9.]+)", trained.stdout)
    assert fit_map is not None
    assert _table(done.stdout, "validation") == pytest.approx(float(fit_map.group(1)), abs=5e-5)


def test_validate_checkpoint_at_the_size_asked_on_the_command_line(
    trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["validate", "--config", "detect-n", "--data.yaml", str(trained.data)]
    argv += ["--data.workers", "0", "--trainer.enable_progress_bar", "false", "--data.imgsz", "96"]
    assert main([*argv, "--ckpt_path", str(trained.checkpoint)]) == 0
    saved = yaml.safe_load((tmp_path / "runs/detect/validate1/config.yaml").read_text())
    assert saved["data"]["imgsz"] == 96


def test_validate_table_names_no_epoch(
    trained: Trained,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["validate", "--data.yaml", str(trained.data), "--data.workers", "0"]
    argv += ["--trainer.enable_progress_bar", "false"]
    assert main([*argv, "--ckpt_path", str(trained.checkpoint)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^ *validation *$", out, re.M), out
    assert "epoch" not in out


def test_validate_without_data_yaml_scores_on_the_checkpoints_dataset(
    cli: CliRunner, trained: Trained, tmp_path: Path
) -> None:
    done = cli("validate", "--data.workers", "0", "--ckpt_path", str(trained.checkpoint))
    assert done.returncode == 0, done.stderr[-2000:]
    saved = yaml.safe_load((tmp_path / "runs/detect/validate1/config.yaml").read_text())
    assert saved["data"]["yaml"] == str(trained.data.resolve())


def _three_classes(trained: Trained, folder: Path) -> Path:
    """The trained dataset's YAML with three other class names."""
    spec = yaml.safe_load(trained.data.read_text())
    other = folder / "three.yaml"
    other.write_text(yaml.safe_dump({**spec, "nc": 3, "names": ["a", "b", "c"]}))
    return other


def test_validate_checkpoint_of_other_classes_is_refused_in_one_line(
    trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _three_classes(trained, tmp_path)
    argv = ["validate", "--data.yaml", str(other), "--data.workers", "0"]
    assert main([*argv, "--ckpt_path", str(trained.checkpoint)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lucid-yolo: error: --ckpt_path {str(trained.checkpoint)!r} was")
    assert "on 5 classes ['circle', " in err
    assert f"but the data ({other}) is detect with 3 classes ['a', 'b', 'c']" in err
    assert err.count("\n") == 1


def test_resuming_a_fit_on_other_classes_is_refused(
    trained: Trained, tiny_fit: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["fit", "--data.yaml", str(_three_classes(trained, tmp_path)), *tiny_fit]
    assert main([*argv, "--ckpt_path", str(trained.checkpoint)]) == 2
    assert "pass the dataset it was trained on with --data.yaml" in capsys.readouterr().err


def test_each_run_gets_the_next_numbered_folder(
    trained: Trained,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["validate", "--data.yaml", str(trained.data), "--data.workers", "0"]
    argv += ["--trainer.enable_progress_bar", "false", "--ckpt_path", str(trained.checkpoint)]
    for number in (1, 2):
        assert main(argv) == 0
        done = capsys.readouterr()
        assert f"run folder runs/detect/validate{number}\n" in done.out
        assert (tmp_path / f"runs/detect/validate{number}/config.yaml").is_file()
    assert "dirpath" not in done.err
    assert not (tmp_path / "runs/lightning_logs").exists()


def test_fit_flag_overrides_one_quickstart_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--data.imgsz", "96", "--print_config"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "imgsz: 96" in out
    assert "max_epochs: 12" in out
    assert "batch_size: 8" in out


def test_fit_without_an_end_is_refused(tiny_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", "--config", "detect-n", "--data.yaml", str(tiny_data)]
    assert main([*argv, "--trainer.max_epochs", "null"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lucid-yolo: error: the run has no end: set --trainer.max_epochs N")


@pytest.mark.slow
def test_fit_without_config_runs_every_quickstart_epoch(cli: CliRunner, tmp_path: Path) -> None:
    """The quickstart's 12 epochs (warm-up, mosaic closed from epoch 2, loader workers) at one
    batch each: its settings otherwise, which ``test_fit_flag_overrides_one_quickstart_setting``
    shows resolve from the packaged config; the 8 batches an epoch of ``lucid-yolo fit`` runs
    cost the suite 2 minutes and go through the same code. At 64 px rather than its 192: no
    assertion reads the size, and the 12 steps and validations cost a fifth less."""
    limits = ("--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1")
    done = cli("fit", *limits, "--data.imgsz", "64")
    assert done.returncode == 0, done.stderr[-2000:]
    assert FINAL.search(done.stdout), done.stdout[-2000:]
    assert re.search(r"^final: best epoch \d+ of 0-11: ", done.stdout, re.M), done.stdout[-2000:]
    assert (
        tmp_path / "cache" / "lucid-yolo" / f"synthetic-detect-v{VERSION}" / ".complete"
    ).is_file()


@pytest.mark.slow
def test_fit_logs_and_checkpoints_follow_default_root_dir(
    cli: CliRunner, tiny_data: Path, tiny_fit: tuple[str, ...], tmp_path: Path
) -> None:
    root = tmp_path / "elsewhere"
    done = cli(
        "fit",
        "--data.yaml",
        str(tiny_data),
        *tiny_fit,
        "--trainer.max_epochs",
        "2",
        "--trainer.default_root_dir",
        str(root),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = root / "detect/fit1"
    assert (run / "metrics.csv").is_file()
    assert (run / "checkpoints/best.ckpt").is_file()
    last = torch.load(run / "checkpoints/last.ckpt", weights_only=True, map_location="cpu")
    assert last["epoch"] == 1  # rewritten every epoch, not only on a new best


@pytest.mark.slow
def test_fit_on_two_cpu_processes_prints_and_checkpoints_once(
    cli: CliRunner, tiny_data: Path, tiny_fit: tuple[str, ...], tmp_path: Path
) -> None:
    done = cli(
        "fit",
        "--data.yaml",
        str(tiny_data),
        *tiny_fit,
        "--trainer.accelerator",
        "cpu",
        "--trainer.devices",
        "2",
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(FINAL.findall(done.stdout)) == 1, done.stdout
    assert done.stdout.count("lucid-yolo fit: ") == 1, done.stdout
    assert "on cpu × 2," in done.stdout
    assert [p.name for p in (tmp_path / "runs/detect").iterdir()] == ["fit1"]
    checkpoints = sorted(p.name for p in (tmp_path / "runs/detect/fit1/checkpoints").iterdir())
    assert checkpoints == ["best.ckpt", "last.ckpt"]


@pytest.mark.parametrize("command", ["fit", "validate", "test", "predict"])
def test_cli_lists_only_the_command_that_runs(command: str) -> None:
    # LightningCLI builds one parser per listed subcommand; a process runs one command
    cli = object.__new__(YoloCLI)
    cli.command = command
    assert cli.subcommands() == {command: LightningCLI.subcommands()[command]}


@pytest.mark.parametrize(("saved", "resumed"), [("float32", "float32"), (None, "auto")])
def test_a_resumed_fit_keeps_the_newton_schulz_dtype_its_checkpoint_names(
    trained: Trained,
    tiny_fit: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    saved: str | None,
    resumed: str,
) -> None:
    # since the option exists a checkpoint holds it, and LightningCLI takes a resumed fit's
    # model options from the checkpoint: a float32 run goes on in float32 on any device; one
    # written before the option (no key) takes today's default
    checkpoint = torch.load(trained.checkpoint, map_location="cpu", weights_only=True)
    if saved is None:
        del checkpoint["hyper_parameters"]["newton_schulz_dtype"]
    else:
        checkpoint["hyper_parameters"]["newton_schulz_dtype"] = saved
    path = tmp_path / "resume.ckpt"
    torch.save(checkpoint, path)
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "--data.yaml", str(trained.data), *tiny_fit, "--trainer.max_epochs", "2"]
    argv += ["--trainer.enable_progress_bar", "false"]
    assert main([*argv, "--ckpt_path", str(path)]) == 0
    config = yaml.safe_load((tmp_path / "runs/detect/fit1/config.yaml").read_text())
    assert config["model"]["newton_schulz_dtype"] == resumed
    last = torch.load(
        tmp_path / "runs/detect/fit1/checkpoints/last.ckpt", map_location="cpu", weights_only=True
    )
    assert last["hyper_parameters"]["newton_schulz_dtype"] == resumed
