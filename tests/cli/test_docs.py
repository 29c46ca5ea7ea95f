"""The CLI reference and the training guide stay in step with the parsers and the classes."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from lucid_yolo.cli.main import LIGHTNING_COMMANDS, PLAIN_COMMANDS, main, plain_parser
from lucid_yolo.train import YoloDataModule, YoloModule
from lucid_yolo.train.data.augment.config import AugmentConfig

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _plain_commands() -> dict[str, argparse.ArgumentParser]:
    """Every plain command and sub-command by its full name (``data check``), leaves only."""
    commands: dict[str, argparse.ArgumentParser] = {}
    pending = [(name, p) for name, p in _subparsers(plain_parser()).items()]
    while pending:
        name, parser = pending.pop()
        if name in LIGHTNING_COMMANDS:
            continue
        children = _subparsers(parser)
        if not children:
            commands[name] = parser
        pending += [(f"{name} {child}", p) for child, p in children.items()]
    return commands


def _section(page: str, command: str) -> str:
    """The text of the ``## `lucid-yolo COMMAND...` `` section of ``page``."""
    start = page.index(f"## `lucid-yolo {command}")
    end = page.find("\n## ", start + 1)
    return page[start : end if end >= 0 else len(page)]


def test_plain_commands_cover_registered_ones() -> None:
    names = {name.split()[0] for name in _plain_commands()}
    assert names == set(PLAIN_COMMANDS)


@pytest.mark.parametrize("command", sorted(_plain_commands()))
def test_cli_reference_lists_every_option_of(command: str) -> None:
    section = _section((DOCS / "cli-reference.md").read_text(), command)
    for action in _plain_commands()[command]._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        name = action.option_strings[0] if action.option_strings else action.dest.upper()
        assert f"| `{name}" in section, f"{name} of `lucid-yolo {command}` is not documented"


def test_cli_reference_lists_lightning_commands() -> None:
    page = (DOCS / "cli-reference.md").read_text()
    assert f"## `lucid-yolo {' | '.join(LIGHTNING_COMMANDS)}`" in page
    groups = ("--model.*", "--data.*", "--trainer.*", "--output.*", "--config", "--print_config")
    for group in (*groups, "--ckpt_path", "--data.source"):
        assert f"`{group}" in page


@pytest.mark.parametrize("cls", [YoloModule, YoloDataModule])
def test_training_guide_lists_every_init_parameter_of(cls: type) -> None:
    guide = (DOCS / "training-guide.md").read_text()
    for name in list(inspect.signature(cls.__init__).parameters)[1:]:
        assert f"| `{name}` |" in guide, f"{cls.__name__}({name}=...) is not in the guide"


def test_training_guide_lists_every_augment_field() -> None:
    guide = (DOCS / "training-guide.md").read_text()
    for field in dataclasses.fields(AugmentConfig):
        assert f"`{field.name}`" in guide, f"AugmentConfig.{field.name} is not in the guide"


def test_training_guide_lists_module_defaults() -> None:
    guide = (DOCS / "training-guide.md").read_text()
    for name, parameter in inspect.signature(YoloModule.__init__).parameters.items():
        default = parameter.default
        if isinstance(default, int | float) and not isinstance(default, bool):
            assert f"| `{name}` | {default} |" in guide, f"default of {name} differs"


ROOT = DOCS.parent
QUOTING_PAGES = (
    "README.md",
    "docs/getting-started.md",
    "docs/cli-reference.md",
    "docs/training-guide.md",
    "docs/deployment.md",
    "packages/lucid-yolo-cli/README.md",
)
"""Pages that quote ``lucid-yolo`` commands for the user to type."""


def _command_words(line: str) -> list[str] | None:
    """The words after ``lucid-yolo`` in a quoted line, up to a comment or a redirect.

    ``None`` for a line that quotes no command: no ``lucid-yolo``, a placeholder or an option in
    the command's place (``lucid-yolo COMMAND --help``, ``lucid-yolo --help``) or alternatives
    (``lucid-yolo fit | validate``).
    """
    quoted = line.split("#", 1)[0].split("lucid-yolo ", 1)
    if len(quoted) != 2 or "|" in quoted[1]:
        return None
    words = quoted[1].split(">", 1)[0].split()
    if not words or not words[0].islower() or words[0].startswith("-"):
        return None
    return words


@dataclasses.dataclass(frozen=True)
class Quote:
    """A ``lucid-yolo`` command quoted on a page: a ``bash`` line or inline code in the prose."""

    page: str
    words: list[str]
    whole: bool
    """A ``bash`` line is a whole command to type; inline code may name a command in passing
    (``lucid-yolo data check``), so only its options are checked."""


def _quoted_commands() -> list[Quote]:
    """Every ``lucid-yolo ...`` command of :data:`QUOTING_PAGES`."""
    found = []
    for page in QUOTING_PAGES:
        parts = (ROOT / page).read_text().replace("\\\n", " ").split("```")
        bash = [block for block in parts[1::2] if block.startswith("bash\n")]
        lines = [(line, True) for block in bash for line in block.splitlines()]
        lines += [
            (span, False) for prose in parts[0::2] for span in re.findall(r"`([^`\n]+)`", prose)
        ]
        for line, whole in lines:
            words = _command_words(line)
            if words is not None:
                found.append(Quote(page, words, whole))
    return found


def test_quoted_commands_include_inline_ones() -> None:
    assert Quote("README.md", ["fit", "--data.imgsz", "256"], False) in _quoted_commands()


def test_quoted_plain_commands_parse() -> None:
    parser = plain_parser()
    commands = _plain_commands()
    for quote in _quoted_commands():
        if quote.words[0] in LIGHTNING_COMMANDS:
            continue
        if quote.whole:
            parser.parse_args(quote.words)  # exits (failing the test) on an unknown option
            continue
        name = " ".join(quote.words[:2]) if quote.words[0] == "data" else quote.words[0]
        options = {o for action in commands[name]._actions for o in action.option_strings}
        for word in quote.words:
            assert not word.startswith("--") or word in options, (quote.page, quote.words)


def _help_text(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


def test_quoted_lightning_flags_exist_in_their_command(capsys: pytest.CaptureFixture[str]) -> None:
    helps = {command: _help_text(command, capsys) for command in LIGHTNING_COMMANDS}
    for quote in _quoted_commands():
        if quote.words[0] in LIGHTNING_COMMANDS:
            help_text = helps[quote.words[0]]
            for word in quote.words:
                if word.startswith("--"):
                    assert f"{word} " in help_text or f"{word}\n" in help_text, quote


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    command = 'uv run pytest -n auto --dist worksteal -m "not gpu"'
    assert command in readme
    assert '$(UV) run pytest -n auto --dist worksteal -m "not gpu" $(PYTEST_ARGS)' in makefile
    ci = (ROOT / ".ci/run").read_text().rstrip()
    assert ci.endswith("uv sync --locked --all-packages --compile-bytecode\nmake gate")
    assert "$(UV) sync --locked --all-packages --compile-bytecode" in makefile


@pytest.mark.parametrize("readme", sorted(ROOT.glob("packages/*/README.md")), ids=str)
def test_package_readme_stands_alone(readme: Path) -> None:
    assert "](../" not in readme.read_text(), f"{readme} links outside its package"
