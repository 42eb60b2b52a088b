"""Resources checked before they are taken: shared memory (``/dev/shm``) and file descriptors.

Torch's own failure on a full ``/dev/shm`` (``unable to allocate shared memory(shm) ... No space
left on device``) names no argument, and leaves a ``torch_<pid>_*`` file behind. Every shared
allocation of rlcollect's asks :func:`check_shared_memory` first, which compares the bytes needed
with what ``/dev/shm`` has free and raises :class:`SharedMemoryError` naming both, what they are
for and what to change; :func:`cleaned_shared_memory` removes what a failed allocation left.
:func:`check_descriptors` does the same for the descriptors worker processes need.

Examples:
    >>> check_shared_memory(1024, "a test's tensor", "nothing")  # a kilobyte fits
    >>> check_shared_memory(2**62, "a test's tensor", "its size")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rlcollect.common.resources.SharedMemoryError: a test's tensor needs 4194304.0 TiB of shared memory; ...
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator
from pathlib import Path

__all__ = ["SHM", "SharedMemoryError", "check_descriptors", "check_memory", "check_shared_memory",
           "cleaned_shared_memory", "physical_memory", "shared_memory_free", "size"]

SHM = Path("/dev/shm")
#: What every message offers besides the argument: a larger ``/dev/shm``.
_LARGER = ("or give the container a larger /dev/shm (docker run --shm-size=4g; Kubernetes: an emptyDir "
           "of medium Memory)")


class SharedMemoryError(MemoryError):
    """``/dev/shm`` cannot hold what is asked (the message names the bytes and what to change)."""


def size(count: float) -> str:
    """``count`` bytes, readable: ``'512 B'``, ``'1.5 MiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def physical_memory() -> int:
    """Bytes of memory of this machine (``2**40`` where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 2**40


def check_memory(need: int, what: str, change: str) -> None:
    """Raise ``ValueError`` if ``need`` bytes (for ``what``) exceed this machine's memory."""
    memory = physical_memory()
    if need > memory:
        raise ValueError(f"{what} needs {size(need)}, more than this machine's {size(memory)} of memory: "
                         f"change {change}")


def shared_memory_free() -> int | None:
    """The bytes ``/dev/shm`` has free (``None`` where there is none: not Linux)."""
    try:
        stats = os.statvfs(SHM)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def check_shared_memory(need: int, what: str, change: str) -> None:
    """Raise :class:`SharedMemoryError` if ``/dev/shm`` has less than ``need`` bytes free.

    Args:
        need: the bytes about to be allocated.
        what: what they are for (``"2 batch slots of 8 envs x 128 steps"``).
        change: the argument or setting that makes them smaller, and the alternatives.
    """
    free = shared_memory_free()
    if free is not None and need > free:
        raise SharedMemoryError(f"{what} needs {size(need)} of shared memory; /dev/shm has {size(free)} "
                                f"free: change {change}, {_LARGER}")


@contextlib.contextmanager
def cleaned_shared_memory() -> Iterator[None]:
    """Remove the ``/dev/shm`` files of this process that an allocation failing in the block left
    (torch names them ``torch_<pid>_...``), and re-raise its error."""
    before = _torch_files()
    try:
        yield
    except BaseException:
        for left in _torch_files() - before:
            with contextlib.suppress(OSError):
                left.unlink()
        raise


def _torch_files() -> set[Path]:
    """This process's torch files in ``/dev/shm`` (none where it cannot be listed)."""
    try:
        return set(SHM.glob(f"torch_{os.getpid()}_*"))
    except OSError:  # no /dev/shm, or no descriptor left to list it: nothing to clean then
        return set()


def open_descriptors() -> int:
    """The descriptors this process holds open now."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def check_descriptors(need: int, what: str, change: str) -> None:
    """Make room for ``need`` more descriptors: raise the soft ``RLIMIT_NOFILE`` towards the hard
    one where it is lower, and raise ``OSError`` naming both limits where even that is not enough."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = open_descriptors() + need
    if soft == resource.RLIM_INFINITY or wanted <= soft:
        return
    if hard == resource.RLIM_INFINITY or wanted <= hard:
        raised = wanted * 2 if hard == resource.RLIM_INFINITY else min(hard, wanted * 2)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            return
    raise OSError(f"{what} need about {need} file descriptors more than the {open_descriptors()} open; "
                  f"this process may open {soft} (ulimit -n; the hard limit is {hard}): change {change}, or "
                  f"raise the limit (ulimit -n {wanted * 2}, or resource.setrlimit)")
