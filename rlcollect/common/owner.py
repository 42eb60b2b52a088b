"""What a forked child may not touch: its parent's worker processes and shared weights.

A process that forks after building a collector with workers copies the collector, its pipes and
its shared memory; the child using them would take the parent's batches and write the parent's
weights. Each part records the pid that owns it and :func:`check_owner` refuses any other.

Examples:
    >>> import os
    >>> check_owner(os.getpid(), "its worker processes")  # the owner: nothing to say
    >>> check_owner(-1, "its worker processes")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    RuntimeError: this collector's worker processes belong to process -1; this process (...) is a fork ...
"""

from __future__ import annotations

import os

__all__ = ["check_owner"]


def check_owner(owner: int, what: str) -> None:
    """Raise ``RuntimeError`` unless this process is ``owner`` (``what`` names the part)."""
    if os.getpid() != owner:
        raise RuntimeError(
            f"this collector's {what.removeprefix('its ')} belong to process {owner}; this process "
            f"({os.getpid()}) is a fork of it (os.fork() after the collector was built) and may not use "
            "them: the owner's stream would lose its batches. Build a collector in the child, or fork "
            "before building one")
