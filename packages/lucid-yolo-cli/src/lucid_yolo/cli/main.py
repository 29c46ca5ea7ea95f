"""Entry point of the ``lucid-yolo`` console script.

``fit``, ``validate``, ``test`` and ``predict`` go to LightningCLI (``--config``, dotted flags,
``--print_config``); ``info``, ``data`` and ``export`` are plain commands.
``lucid-yolo fit`` without ``--config`` runs the packaged ``quickstart`` config (the nano detector
on the embedded synthetic dataset) with the given flags on top, so that one flag changes one
setting of the quickstart.

Torch and Lightning load only once a command runs: ``lucid-yolo --help`` and the plain commands'
help stay quick, and each command imports what it needs. Before a Lightning command imports them,
the CUDA allocator gets expandable segments unless the user configured it
(:mod:`lucid_yolo.cli.cuda_allocator`).

Example::

    uv run lucid-yolo fit
    uv run lucid-yolo fit --config detect-s --data.yaml path/to/data.yaml
    uv run lucid-yolo predict --ckpt_path runs/detect/fit1/checkpoints/best.ckpt \\
        --data.source path/to/images
    uv run lucid-yolo info yolo26n-seg
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from lucid_yolo.cli import data, export, info
from lucid_yolo.cli.configs import QUICKSTART, expand_config_names, packaged_configs
from lucid_yolo.cli.cuda_allocator import set_default_allocator
from lucid_yolo.cli.errors import CliError
from lucid_yolo.cli.fast_exit import FastExit
from lucid_yolo.cli.warning_lines import warning_lines

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")

_Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]
PLAIN_COMMANDS: dict[str, _Registrar] = {
    "info": info.add_parser,
    "data": data.add_parser,
    "export": export.add_parser,
}


def user_errors() -> tuple[type[Exception], ...]:
    """The errors printed as one line without a traceback: the user can fix what they say."""
    from lucid_yolo.models import ModelError
    from lucid_yolo.train.exceptions import TrainError

    return (CliError, TrainError, ModelError, FileNotFoundError)


def plain_parser() -> argparse.ArgumentParser:
    """The argparse parser of the plain commands (the Lightning ones only appear in its help)."""
    parser = argparse.ArgumentParser(
        prog="lucid-yolo",
        description="YOLO26 training replayed from CUDA graphs, bitwise equal to native. "
        f"Lightning commands: {', '.join(LIGHTNING_COMMANDS)} (see `lucid-yolo fit --help`); "
        f"packaged configs for --config: {', '.join(packaged_configs())}.",
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for register in PLAIN_COMMANDS.values():
        register(commands)
    for name in LIGHTNING_COMMANDS:
        commands.add_parser(name, help=f"LightningCLI `{name}` (see `lucid-yolo {name} --help`)")
    return parser


def lightning_args(command: str, rest: list[str]) -> list[str]:
    """The LightningCLI arguments of ``command``: ``fit`` without a config starts from the
    quickstart, and packaged config names become their files."""
    has_config = any(arg in ("--config", "-c") or arg.startswith("--config=") for arg in rest)
    base = ["--config", QUICKSTART] if command == "fit" and not has_config else []
    return [command, *expand_config_names([*base, *rest])]


def main(argv: list[str] | None = None) -> int:
    """Run the ``lucid-yolo`` command line; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    with warning_lines():
        return _run(args)


def run() -> NoReturn:
    """The process entry point: :func:`main` on ``sys.argv``, then the exit without CPython's
    object teardown (:mod:`lucid_yolo.cli.fast_exit`)."""
    ending = FastExit()
    code = main()
    ending.code = code
    sys.exit(code)


def _run(args: list[str]) -> int:
    try:
        if args and args[0] in LIGHTNING_COMMANDS:
            set_default_allocator(os.environ)
            from lucid_yolo.cli.lightning_cli import run_lightning

            run_lightning(lightning_args(args[0], args[1:]))
            return 0
        parser = plain_parser()
        namespace = parser.parse_args(args)
        handler = getattr(namespace, "handler", None)
        if handler is None:
            parser.print_help()
            return 2
        code: int = handler(namespace)
        return code
    except Exception as error:
        if not isinstance(error, user_errors()):
            raise
        print(f"lucid-yolo: error: {error}", file=sys.stderr)
        return 2


__all__ = [
    "LIGHTNING_COMMANDS",
    "PLAIN_COMMANDS",
    "lightning_args",
    "main",
    "plain_parser",
    "run",
    "user_errors",
]
