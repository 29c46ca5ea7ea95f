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
    set_default_allocator,
)


def test_default_sets_expandable_segments_where_nothing_is_set() -> None:
    environ: dict[str, str] = {"HOME": "/home/user"}
    set_default_allocator(environ)
    assert environ == {"HOME": "/home/user", "PYTORCH_CUDA_ALLOC_CONF": EXPANDABLE_SEGMENTS}


@pytest.mark.parametrize("variable", ALLOCATOR_VARIABLES)
def test_default_leaves_the_users_settings_alone(variable: str) -> None:
    environ = {variable: "garbage_collection_threshold:0.6"}
    set_default_allocator(environ)
    assert environ == {variable: "garbage_collection_threshold:0.6"}


def test_start_line_names_every_allocator_variable_of_cuda_runs_only() -> None:
    environ = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:512"}
    assert allocator_clause("cuda", environ) == (
        ", CUDA allocator PYTORCH_ALLOC_CONF=max_split_size_mb:512"
    )
    both = {**environ, "PYTORCH_CUDA_ALLOC_CONF": EXPANDABLE_SEGMENTS}
    assert allocator_clause("cuda", both) == (
        ", CUDA allocator PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "PYTORCH_ALLOC_CONF=max_split_size_mb:512"
    )
    assert allocator_clause("cpu", environ) == ""
    assert allocator_clause("cuda", {}) == ""


def test_lightning_commands_set_the_default_before_torch_loads() -> None:
    """PyTorch reads the variable when its allocator starts, so it must be set before the
    Lightning command's module (which imports torch) is imported: an import hook records the
    variable at that import, and serves a stand-in module so that the probe stays quick."""
    probe = (
        "import importlib.abc, importlib.util, os, sys\n"
        "seen = {}\n"
        "NAME = 'lucid_yolo.cli.lightning_cli'\n"
        "class StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name != NAME:\n"
        "            return None\n"
        "        seen.update(torch='torch' in sys.modules,\n"
        "                    conf=os.environ.get('PYTORCH_CUDA_ALLOC_CONF'))\n"
        "        return importlib.util.spec_from_loader(name, self)\n"
        "    def create_module(self, spec):\n"
        "        return None\n"
        "    def exec_module(self, module):\n"
        "        module.run_lightning = lambda args: None\n"
        "sys.meta_path.insert(0, StandIn())\n"
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
