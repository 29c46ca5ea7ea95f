"""Options a Lightning subcommand accepts but does not act on, each named with the reason.

The parser is shared by ``fit``, ``validate``, ``test`` and ``predict``, so every subcommand
accepts every option; a few only mean something in some of them, and with ``--ckpt_path``
LightningCLI replaces the model options with the checkpoint's hyperparameters. A flag typed on the
command line and then dropped would be a silent surprise, so each one gets a warning line.
Only explicit command-line flags are checked: a config file sets many options on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence

from lucid_yolo.train.replay.config import ReplayConfig

REPLAY_GROUP = "replay"
"""The model's option group of CUDA-graph replay of training steps (``--model.replay.*``)."""


def explicit_flags(args: Sequence[str]) -> list[str]:
    """The dotted option names given as ``--name value`` or ``--name=value``, in order."""
    names = []
    for token in args:
        if token.startswith("--") and "." in token:
            names.append(token[2:].split("=", 1)[0])
    return names


def ignored_option_warnings(
    subcommand: str,
    args: Sequence[str],
    *,
    ckpt_path: str | None,
    kept_model_options: Sequence[str],
) -> list[str]:
    """One line per explicit flag that ``subcommand`` will not use, saying why.

    Args:
        subcommand: ``fit``, ``validate``, ``test`` or ``predict``.
        args: the subcommand's command-line arguments.
        ckpt_path: ``--ckpt_path``, when given.
        kept_model_options: model options (or option groups, ``replay``) taken from the command
            line even with a checkpoint.
    """
    lines = []
    for name in explicit_flags(args):
        group, _, option = name.partition(".")
        reason = None
        replay = option.partition(".")[0] == REPLAY_GROUP
        evaluating = subcommand in ("validate", "test")
        if group == "model" and subcommand != "fit" and replay:
            if not evaluating:
                reason = f"replay records training steps; {subcommand} runs the network natively"
            elif option.partition(".")[2] not in ReplayConfig.EVALUATION_OPTIONS:
                reason = (
                    f"replay records training steps; {subcommand} replays only its evaluation "
                    "forward (--model.replay.evaluation)"
                )
        elif group == "model" and ckpt_path and option.partition(".")[0] not in kept_model_options:
            reason = "with --ckpt_path the model options are the checkpoint's hyperparameters"
        elif group == "output" and subcommand != "predict":
            reason = "only `predict` writes prediction files"
        elif name == "data.source" and subcommand != "predict":
            reason = "only `predict` reads source images; the other commands use --data.yaml"
        if reason is not None:
            lines.append(f"--{name} is ignored: {reason}")
    return lines


__all__ = ["REPLAY_GROUP", "explicit_flags", "ignored_option_warnings"]
