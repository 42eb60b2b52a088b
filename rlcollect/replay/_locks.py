"""The locks a storage serialises its bookkeeping with, one per storage kind, and a liveness check.

Every lock guards only a few tensor operations (reserve a range, mark it, commit it, read stamps),
never a copy of frame data, so contention stays low. All three are context managers and picklable:

- :class:`ThreadLock` (``"memory"``): a ``threading.Lock``; a pickled copy gets a fresh one, as it
  gets fresh copies of the tensors.
- :class:`ProcessLock` (``"shared"``): a ``multiprocessing`` lock from the spawn context. Like any
  multiprocessing lock it travels to other processes only as an argument of the process being
  started (``Process(args=(buffer,))``), not through a queue or pipe afterwards. It is acquired with a
  timeout so that a process killed inside the tiny critical section cannot hang the others.
- :class:`FileLock` (``"memmap"``): ``fcntl.flock`` on a file in the buffer's folder (any process
  that opens the folder takes part, and the kernel releases it when its holder dies) plus a thread
  lock, because ``flock`` does not exclude threads sharing one open file.

Example:
    >>> lock = ThreadLock()
    >>> with lock:
    ...     pass
    >>> pid_alive(os.getpid())
    True
"""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

__all__ = ["FileLock", "Lock", "ProcessLock", "ThreadLock", "pid_alive"]

#: How long a process waits for a :class:`ProcessLock` before concluding its holder died in it.
LOCK_TIMEOUT_S = 60.0


class Lock(Protocol):
    """What a storage needs from its lock."""

    def __enter__(self) -> object: ...

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class ThreadLock:
    """A ``threading.Lock`` that survives pickling (the copy gets its own lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> ThreadLock:
        self._lock.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.release()

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()


class ProcessLock:
    """A multiprocessing lock (spawn context) whose acquisition times out with a clear error."""

    def __init__(self, timeout: float = LOCK_TIMEOUT_S) -> None:
        self._lock = mp.get_context("spawn").Lock()
        self._timeout = timeout

    def __enter__(self) -> ProcessLock:
        if not self._lock.acquire(timeout=self._timeout):
            raise RuntimeError(
                f"the replay buffer's lock was not released within {self._timeout:.0f} s: a process "
                "sharing the buffer probably died while holding it"
            )
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.release()


class FileLock:
    """``flock`` on ``path`` (between processes) plus a thread lock (between threads of one process)."""

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._thread_lock = threading.Lock()
        self._fd: int | None = None

    def __enter__(self) -> FileLock:
        self._thread_lock.acquire()
        try:
            if self._fd is None:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._fd is not None
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()

    def close(self) -> None:
        """Close the lock file (the lock is reopened on next use)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self._path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (dead, waiting to be reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
