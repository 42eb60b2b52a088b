"""SIGINT and SIGTERM as a stop the CLI can finish cleanly: never in the middle of a write.

:class:`StopSignals` turns either signal into :class:`Stopped` (a ``KeyboardInterrupt`` that
knows its signal), raised where the main thread is, except inside :meth:`StopSignals.critical`:
there it is held until the block ends, so a batch being written and committed is written and
committed whole. The process then exits with ``128 + signal`` (130 for SIGINT, 143 for SIGTERM).

Examples:
    >>> import os, signal
    >>> with StopSignals() as signals:
    ...     try:
    ...         with signals.critical():
    ...             os.kill(os.getpid(), signal.SIGTERM)
    ...             print("the block ends first")
    ...     except Stopped as stop:
    ...         print("then", signal.Signals(stop.signum).name, stop.exit_status)
    the block ends first
    then SIGTERM 143
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

__all__ = ["StopSignals", "Stopped"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """The run was asked to stop by ``signum`` (SIGINT or SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by a signal: ``128 + signum``."""
        return 128 + self.signum


class StopSignals:
    """Within ``with``: SIGINT and SIGTERM raise :class:`Stopped`, held back in :meth:`critical`
    blocks; the previous handlers come back at the end. Off the main thread it does nothing."""

    def __init__(self) -> None:
        self.received: int | None = None  # the first signal, once one came
        self._depth = 0  # nesting of critical blocks
        self._held: int | None = None  # a signal that came during a critical block
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if self._depth == 0:
            raise Stopped(signum)
        self._held = signum

    @contextmanager
    def critical(self, *, raise_after: bool = True) -> Iterator[None]:
        """A block no stop signal interrupts; one that came during it is raised after it ends
        (``raise_after``), or only recorded in :attr:`received`."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        held, self._held = (self._held, None) if self._depth == 0 else (None, self._held)
        if raise_after and held is not None:
            raise Stopped(held)
