"""What a forked child may not touch: its parent's worker processes and shared weights; and a
collector's parts calling it back without keeping it alive (:func:`weakly`).

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
import weakref
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["check_owner", "weakly"]

P = ParamSpec("P")
R = TypeVar("R")


def check_owner(owner: int, what: str) -> None:
    """Raise ``RuntimeError`` unless this process is ``owner`` (``what`` names the part)."""
    if os.getpid() != owner:
        raise RuntimeError(
            f"this collector's {what.removeprefix('its ')} belong to process {owner}; this process "
            f"({os.getpid()}) is a fork of it (os.fork() after the collector was built) and may not use "
            "them: the owner's stream would lose its batches. Build a collector in the child, or fork "
            "before building one")


def weakly(method: Callable[P, R]) -> Callable[P, R]:
    """``method`` (a bound method) called through a weak reference to its object: a collector's
    part that calls it back never keeps it alive (dropping the collector stops its workers).

    Examples:
        >>> class Owner:
        ...     def name(self) -> str:
        ...         return "owner"
        >>> owner = Owner()
        >>> call = weakly(owner.name)
        >>> call()
        'owner'
        >>> del owner
        >>> call()
        Traceback (most recent call last):
        RuntimeError: the collector is gone: its workers are stopped
    """
    ref = weakref.WeakMethod(method)

    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        bound = ref()
        if bound is None:
            raise RuntimeError("the collector is gone: its workers are stopped")
        return bound(*args, **kwargs)

    return call
