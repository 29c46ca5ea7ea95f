"""The CUDA allocator's default: expandable segments set before torch loads; the user's kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lucid_yolo.cli.cuda_allocator import (
    ALLOCATOR_VARIABLES,
    EXPANDABLE_SEGMENTS,
    allocator_clause,
    default_allocator_settings,
)


def test_default_sets_expandable_segments_where_nothing_is_set() -> None:
    environ: dict[str, str] = {"HOME": "/home/user"}
    assert default_allocator_settings(environ)
    assert environ == {"HOME": "/home/user", "PYTORCH_CUDA_ALLOC_CONF": EXPANDABLE_SEGMENTS}


@pytest.mark.parametrize("variable", ALLOCATOR_VARIABLES)
def test_default_leaves_the_users_settings_alone(variable: str) -> None:
    environ = {variable: "garbage_collection_threshold:0.6"}
    assert not default_allocator_settings(environ)
    assert environ == {variable: "garbage_collection_threshold:0.6"}


def test_start_line_names_the_allocator_of_cuda_runs_only() -> None:
    environ = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:512"}
    assert allocator_clause("cuda", environ) == ", CUDA allocator max_split_size_mb:512"
    assert allocator_clause("cpu", environ) == ""
    assert allocator_clause("cuda", {}) == ""


def test_lightning_commands_set_the_default_before_torch_loads() -> None:
    """PyTorch reads the variable when its allocator starts, so it must be set before the
    Lightning command's module (which imports torch) loads; a stand-in module records what the
    command saw."""
    probe = (
        "import os, sys, types\n"
        "seen = {}\n"
        "def run_lightning(args):\n"
        "    conf = os.environ.get('PYTORCH_CUDA_ALLOC_CONF')\n"
        "    seen.update(torch='torch' in sys.modules, conf=conf)\n"
        "stand_in = types.ModuleType('lucid_yolo.cli.lightning_cli')\n"
        "stand_in.run_lightning = run_lightning\n"
        "sys.modules['lucid_yolo.cli.lightning_cli'] = stand_in\n"
        "from lucid_yolo.cli.main import main\n"
        "assert main(['fit']) == 0\n"
        "print(seen)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=environ,
    )
    assert done.stdout == f"{{'torch': False, 'conf': '{EXPANDABLE_SEGMENTS}'}}\n", done.stderr
