"""Errors the command line reports as one line and a non-zero exit, without a traceback."""

from __future__ import annotations


class CliError(Exception):
    """A problem with what the user asked for; the message says what to do instead."""


__all__ = ["CliError"]
