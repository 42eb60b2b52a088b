"""The one error type of the command line: a bad argument or input, reported on one line."""

from __future__ import annotations

__all__ = ["CliError", "one_line"]


class CliError(Exception):
    """A bad argument or input: ``main`` prints ``rlcollect: error: <message>`` and exits with 2."""


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of blanks folded into single spaces.

    Examples:
        >>> one_line("no such file:\\n   runs/x ")
        'no such file: runs/x'
    """
    return " ".join(text.split())
