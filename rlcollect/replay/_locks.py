"""The lock a storage serialises its bookkeeping with, and a liveness check.

A :class:`Lock` guards a few bookkeeping operations (reserve, mark, commit, read stamps), never a copy of
frame data. It is a ``threading.Lock`` (threads) plus, given a file, ``fcntl.flock`` on it
(processes), which the kernel releases when its holder dies: a process killed inside a critical
section blocks no other, and no semaphore is involved. Each process locks through its own open file
(``flock`` does not tell apart two holders of one): an unpickled copy opens the file at once, a
forked child reopens it. ``"memory"`` storages use ``Lock()`` (the thread lock alone), ``"shared"``
ones ``Lock.temporary()`` (an empty file in ``/dev/shm`` named after its creator's pid, removed when
the lock that created it is closed or collected, or at exit, or, if its creator was killed, by the next
``Lock.temporary()``) and ``"memmap"`` ones ``Lock(folder / "lock")``.

Examples:
    >>> lock = Lock.temporary()
    >>> with lock:
    ...     pass
    >>> path = lock.path
    >>> lock.close()
    >>> path.exists(), pid_alive(os.getpid())
    (False, True)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

__all__ = ["LOCK_FILE_PREFIX", "Lock", "pid_alive"]

#: The name of every lock file :meth:`Lock.temporary` creates starts with this.
LOCK_FILE_PREFIX = "rlcollect-replay-"
_SHM = "/dev/shm"


class Lock:
    """A thread lock, plus ``flock`` on ``path`` (created if ``create``) when a path is given."""

    def __init__(self, path: Path | None = None, create: bool = True) -> None:
        self.path, self._create = path, create
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._remove: weakref.finalize[..., Any] | None = None  # set by the lock that made a temporary file
        _LOCKS.add(self)

    @classmethod
    def temporary(cls) -> Lock:
        """A lock on a new empty file, removed when this lock is closed or collected (not its copies)."""
        folder = _SHM if os.access(_SHM, os.W_OK) else tempfile.gettempdir()
        _remove_orphans(folder)
        fd, name = tempfile.mkstemp(prefix=f"{LOCK_FILE_PREFIX}{os.getpid()}-", suffix=".lock", dir=folder)
        lock = cls(Path(name), create=False)
        lock._fd = fd
        lock._remove = weakref.finalize(lock, _remove_file, name, os.getpid())
        return lock

    def _open(self) -> int:
        assert self.path is not None
        try:
            self._fd = os.open(self.path, os.O_RDWR | (os.O_CREAT if self._create else 0), 0o644)
        except FileNotFoundError:
            raise RuntimeError(f"the replay buffer's lock file {self.path} is gone: the process that "
                               "created the buffer closed it or exited") from None
        return self._fd

    def __enter__(self) -> Lock:
        self._thread_lock.acquire()
        try:
            if self.path is not None:
                fcntl.flock(self._open() if self._fd is None else self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()

    def close(self) -> None:
        """Close the file (reopened on next use) and, on the lock that created a temporary file, remove it."""
        with self._thread_lock:  # not under a thread of this process that holds the lock
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        if self._remove is not None:
            self._remove()

    def _after_fork(self) -> None:
        self._thread_lock = threading.Lock()  # another thread of the parent may have held it
        if self._fd is not None:  # shared with the parent: this process needs its own open file
            os.close(self._fd)
            self._fd = None
            with contextlib.suppress(RuntimeError):  # raised again on first use
                self._open()

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "create": self._create}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["create"])  # type: ignore[misc]
        if self.path is not None:
            self._open()  # now, while the process that created the file surely still has it


def _remove_file(name: str, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child that inherited the finalizer
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _remove_orphans(folder: str) -> None:
    """Remove the lock files of creators that died without closing them (killed with SIGKILL)."""
    for path in Path(folder).glob(f"{LOCK_FILE_PREFIX}*-*.lock"):
        creator = path.name[len(LOCK_FILE_PREFIX):].split("-", 1)[0]
        if creator.isdigit() and not pid_alive(int(creator)):
            with contextlib.suppress(OSError):  # gone already, or another user's
                path.unlink()


_LOCKS: weakref.WeakSet[Lock] = weakref.WeakSet()


def _after_fork() -> None:  # in a forked child: each lock opens its own file
    for lock in list(_LOCKS):
        lock._after_fork()
os.register_at_fork(after_in_child=_after_fork)


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
