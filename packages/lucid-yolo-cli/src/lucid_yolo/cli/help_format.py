"""Help text of the Lightning commands as a terminal shows it: no reStructuredText markup.

``fit --help`` is built from docstrings (lucid-yolo's and Lightning's), which are written for the
docs site: ``:class:`YoloModule```, ``:data:`~lucid_yolo.cli.quiet.HIDDEN_WARNINGS```,
````"auto"````. On a terminal the markup is noise, so the formatter turns a role into its target
(the last dotted part for a ``~`` or relative target) and a literal into its text.
"""

from __future__ import annotations

import re
from argparse import Action

from jsonargparse import DefaultHelpFormatter
from typing_extensions import override

_ROLE = re.compile(r":(?:[a-z]+:)+`(~?)([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _role_target(match: re.Match[str]) -> str:
    tilde, target = match.group(1), match.group(2)
    return target.rsplit(".", 1)[-1] if tilde or target.startswith(".") else target


def plain_text(text: str) -> str:
    """``text`` with reStructuredText roles and inline literals replaced by their text."""
    return _LITERAL.sub(r"\1", _ROLE.sub(_role_target, text))


class PlainHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help formatter (types, defaults) over plain text."""

    @override
    def _get_help_string(self, action: Action) -> str:
        return plain_text(super()._get_help_string(action))

    @override
    def add_text(self, text: str | None) -> None:
        super().add_text(None if text is None else plain_text(text))

    @override
    def start_section(self, heading: str | None) -> None:
        super().start_section(None if heading is None else plain_text(heading))


__all__ = ["PlainHelpFormatter", "plain_text"]
