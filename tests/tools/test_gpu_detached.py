"""tools/gpu_detached.sh: a command started in a session of its own, waited for across calls."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).parents[2] / "tools" / "gpu_detached.sh"


def detached(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(TOOL), *args],
        env={**os.environ, "DETACHED_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_start_returns_the_commands_exit_status_and_keeps_its_output(tmp_path: Path) -> None:
    done = detached(tmp_path, "start", "fit", "20", "--", "bash", "-c", "echo epoch 30; exit 3")
    assert done.returncode == 3
    assert "fit: ended with exit status 3" in done.stdout
    assert (tmp_path / "fit.log").read_text() == "epoch 30\n"


def test_a_command_still_running_is_collected_by_a_later_wait(tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    started = detached(
        tmp_path, "start", "fit", "0", "--", "bash", "-c", f"sleep 1; touch {marker}"
    )
    assert started.returncode == 124
    assert "still running" in started.stdout
    assert not marker.exists()
    again = detached(tmp_path, "start", "fit", "0", "--", "true")
    assert again.returncode == 2
    assert "already running" in again.stderr
    waited = detached(tmp_path, "wait", "fit", "20")
    assert waited.returncode == 0
    assert marker.exists()


def test_the_command_runs_in_a_session_of_its_own(tmp_path: Path) -> None:
    """A device call's end kills what the call started, except a process in a session of its
    own: the command's session is the one the tool started, not the caller's."""
    report = (
        f"import os; print(os.getsid(0), os.getppid(), file=open({str(tmp_path / 'sid')!r}, 'w'))"
    )
    done = detached(tmp_path, "start", "fit", "20", "--", sys.executable, "-c", report)
    assert done.returncode == 0
    session, parent = map(int, (tmp_path / "sid").read_text().split())
    assert session == parent == int((tmp_path / "fit.pid").read_text())
    assert session != os.getsid(0)


def test_a_command_killed_before_its_status_is_reported_and_its_name_freed(
    tmp_path: Path,
) -> None:
    """Killed with its session leader (out of memory, the machine's end), the command leaves
    no exit status: waiting for it must end, and the name must be free again."""
    killed = detached(tmp_path, "start", "fit", "20", "--", "bash", "-c", "kill -9 $PPID; sleep 5")
    assert killed.returncode == 3
    assert "without an exit status" in killed.stdout
    assert detached(tmp_path, "wait", "fit", "20").returncode == 3
    assert detached(tmp_path, "start", "fit", "20", "--", "true").returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("wait", "never", "1"), "never started here"),
        (("start", "fit", "soon", "--", "true"), "not a whole number"),
        (("start", "a/b", "1", "--", "true"), "NAME=a/b"),
        (("start", "fit", "1", "true"), "usage"),
        (("stop", "fit", "1"), "usage"),
    ],
)
def test_a_wrong_use_is_refused_with_what_to_do(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    refused = detached(tmp_path, *args)
    assert refused.returncode == 2
    assert message in refused.stderr
