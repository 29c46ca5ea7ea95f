"""A fit reads its dataset and writes only under its run folder and the user cache (issue 15)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lucid_yolo.cli.main import main

if TYPE_CHECKING:
    from conftest import CliRunner


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_fit_leaves_dataset_byte_identical_and_writes_only_runs_and_cache(
    tiny_data: Path, tiny_fit: tuple[str, ...], tmp_path: Path, cli: CliRunner
) -> None:
    dataset = tiny_data.parent
    before = _tree(dataset)
    for path in [dataset, *dataset.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        done = cli("fit", "--data.yaml", str(tiny_data), *tiny_fit)
    finally:
        for path in [dataset, *dataset.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _tree(dataset) == before
    written = {Path(k).parts[0] for k in _tree(tmp_path)} - {dataset.name}
    assert written <= {"runs", "cache"}
    assert (tmp_path / "runs").is_dir()


def test_fit_stopped_by_sigterm_exits_143_with_resume_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def stopped(*args: object, **kwargs: object) -> None:
        raise SIGTERMException

    monkeypatch.setattr("lucid_yolo.cli.lightning_cli.YoloCLI", stopped)
    with pytest.raises(SystemExit) as exited:
        main(["fit"])
    assert exited.value.code == 143
    assert "stopped by SIGTERM; resume with --ckpt_path" in capsys.readouterr().err
