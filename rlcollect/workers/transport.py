"""How the parent reaches its workers: the :class:`Transport` interface, and worker processes.

A transport starts workers, sends them commands and hands back their answers; it knows nothing
of batches, restarts or bookkeeping (that is :class:`~rlcollect.workers.pool.WorkerPool`). Two
exist: :class:`ProcessTransport` (processes on this machine, pipes, shared-memory slots) and
:class:`~rlcollect.workers.ray_transport.RayTransport` (Ray actors, the object store).
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing
import multiprocessing.forkserver
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from multiprocessing import resource_sharer
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

import torch
import torch.multiprocessing

from rlcollect.workers.main_guard import exit_cause
from rlcollect.workers.process import process_main
from rlcollect.workers.worker import WorkerSetup

__all__ = ["PRELOAD", "Message", "ProcessTransport", "Transport", "await_exit", "fork_is_safe",
           "start_context", "start_forkserver"]

Message = tuple[str, Any]  # ("ready" | "done" | "ok" | "error" | "died", payload)


class Transport(Protocol):
    """What the pool needs from a transport."""

    #: the workers' slots are shared with this process (else batches travel in the reports)
    shared_slots: bool
    #: what the workers are, for the weight-sync schemes: "process" or "ray"
    kind: str

    def spawn(self, worker: int, setup: WorkerSetup, timeout: float = math.inf, *,
              block: bool = True) -> None:
        """Start worker ``worker``; its first message is ``ready`` or ``error``. ``TimeoutError`` if
        it could not even be started within ``timeout`` s (a forkserver still importing).
        ``block=False``: return at once where starting takes a while; :meth:`wait` then says
        ``died`` if it could not be started (``timeout`` is the caller's to keep)."""

    def send(self, worker: int, message: Message) -> None:
        """Send a command (a dead worker is noticed by :meth:`wait`, not here)."""

    def wait(self, workers: list[int], timeout: float) -> list[tuple[int, Message]]:
        """Answers of ``workers`` within ``timeout`` s; a dead worker answers ``("died", why)``."""

    def stop(self, worker: int, grace: float) -> None:
        """End worker ``worker``, giving it ``grace`` seconds to exit by itself."""

    def can_write(self, replay_buffer: Any) -> bool:
        """Whether the workers can extend ``replay_buffer`` themselves."""

    def prepare_threaded_starts(self) -> None:
        """Get ready to start (or restart) workers while this process runs threads."""

    def close(self) -> None:
        """Release what the transport holds (every worker is stopped already)."""


#: seconds between looks at a worker's background start
_START_POLL = 0.02

#: what a forkserver imports once, before it forks workers: what every worker needs; the first
#: makes the forkserver (and so every process it forks) ignore SIGINT from the start
PRELOAD = ("rlcollect.workers.nosigint", "numpy", "torch", "tensordict", "gymnasium", "cloudpickle",
           "rlcollect.workers.worker")


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread meanwhile: a child forked (or spawned: the mask survives
    ``exec``) now starts with it blocked, so a Ctrl-C while it imports prints no traceback; the
    worker ignores SIGINT and unblocks it first thing. A Ctrl-C meanwhile reaches this process
    once the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def _heap_frozen(fork: bool) -> Iterator[None]:
    """For a fork: this process's objects frozen meanwhile (``gc.freeze``), so that the child's
    garbage collector never looks at what it inherited. A forked worker that collected garbage of
    this process ran its finalisers there: one of a native object whose threads did not cross
    the fork (a simulator, a pool of env threads) crashed the worker."""
    if not fork:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class _Start:
    """``process.start()`` through a forkserver, in a thread of its own.

    A forkserver hands out no process until it has imported its preloads, which may take tens of
    seconds on a loaded machine, and ``start()`` waits for that unbounded. Whoever gives up on the
    start calls :meth:`abandon`: the process is killed as soon as it exists.
    """

    def __init__(self, process: BaseProcess, child_end: Connection) -> None:
        self.process, self._child_end = process, child_end
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._abandoned = self._finished = False
        self.thread = threading.Thread(target=self._run, name="rlcollect-worker-start", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.process.start()
        except BaseException as error:  # raised by whoever waits for the start
            self.error = error
        finally:
            self._child_end.close()
        with self._lock:  # abandon() before this point is seen here, after it sees _finished
            self._finished = True
            if self._abandoned and self.error is None:
                self.process.kill()
                self.process.join(5.0)

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()

    def abandon(self) -> None:
        """Nobody waits for this process: kill it now or as soon as it is started."""
        with self._lock:
            self._abandoned = True
            if self._finished and self.error is None:
                self.process.kill()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for the start; ``TimeoutError`` (the start abandoned) after it,
        or the start's own error."""
        self.thread.join(None if timeout == math.inf else timeout)
        if not self.done:
            self.abandon()
            raise TimeoutError(f"the forkserver did not start the worker within {timeout:.1f} s")
        if self.error is not None:
            raise self.error


def fork_is_safe() -> bool:
    """Whether this process can be forked safely: Linux, CUDA not initialised, and no Python thread
    but this one (a fork copies one thread; a lock another thread held stays held forever).
    multiprocessing's own fd-sharing thread (started when shared tensors are sent through a pipe)
    does not count: multiprocessing resets it in a forked child."""
    if not sys.platform.startswith("linux") or torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return False
    sharer = getattr(getattr(resource_sharer, "_resource_sharer", None), "_thread", None)
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and t is not sharer]
    return not others


def start_context(start_method: str, preload: Iterable[str] = ()) -> BaseContext:
    """The multiprocessing context for ``start_method``, decided now.

    ``"auto"``: ``fork`` while :func:`fork_is_safe` (a worker starts in milliseconds, with everything
    this process imported), else ``forkserver``, which imports :data:`PRELOAD` and ``preload`` once in
    a fresh process and forks workers from it (``spawn`` where neither exists). A forkserver is
    started once per process and serves every later collector.
    """
    if start_method == "auto":
        methods = multiprocessing.get_all_start_methods()
        start_method = ("fork" if fork_is_safe() else "forkserver") if "forkserver" in methods else "spawn"
    if start_method == "forkserver":
        modules = [*PRELOAD, *(m for m in preload if m not in PRELOAD and m != "__main__")]
        multiprocessing.set_forkserver_preload(modules)  # read when the server starts: once
    return torch.multiprocessing.get_context(start_method)


def start_forkserver(preload: Iterable[str] = ()) -> None:
    """Start this process's forkserver now (if it is not running), importing :data:`PRELOAD` and
    ``preload`` in the background: the first worker then starts without waiting for the imports."""
    start_context("forkserver", preload)
    multiprocessing.forkserver.ensure_running()


class ProcessTransport:
    """Worker processes, one pipe each, started as ``start_method`` says (see :func:`start_context`:
    ``"auto"`` decides at each start, so a worker restarted while this process runs threads is
    not forked).

    Args:
        start_method: ``"auto"``, ``"spawn"``, ``"forkserver"`` or ``"fork"``.
        preload: modules a forkserver imports besides :data:`PRELOAD` (the env's).
    """

    shared_slots = True
    kind = "process"

    def __init__(self, start_method: str, preload: Iterable[str] = ()) -> None:
        self._start_method, self._preload = start_method, tuple(preload)
        self._processes: dict[int, BaseProcess] = {}
        self._conns: dict[int, Connection] = {}
        self._starting: dict[int, _Start] = {}  # background starts through the forkserver

    def spawn(self, worker: int, setup: WorkerSetup, timeout: float = math.inf, *,
              block: bool = True) -> None:
        """Start ``worker``. ``block=False``: a start through a forkserver goes on in the background
        (the worker answers :meth:`wait` once it runs, or ``died`` if it could not be started)."""
        context = start_context(self._start_method, self._preload)
        parent_end, child_end = context.Pipe()
        process = context.Process(  # type: ignore[attr-defined]
            target=process_main, args=([setup], child_end), name=f"rlcollect-worker-{worker}",
            daemon=False,  # envs may start processes of their own
        )
        if context.get_start_method() == "forkserver":
            start = _Start(process, child_end)
            if not block:
                self._starting[worker], self._conns[worker] = start, parent_end
                return
            try:
                start.join(timeout)
            except BaseException:
                parent_end.close()
                raise
        else:
            try:
                # a forked or spawned worker starts with SIGINT blocked, then ignores it
                with _sigint_blocked(), _heap_frozen(context.get_start_method() == "fork"):
                    process.start()
            except BaseException:
                parent_end.close()
                raise
            finally:
                child_end.close()
        self._processes[worker], self._conns[worker] = process, parent_end

    def start_hint(self, worker: int) -> str:
        """Why ``worker`` may not have answered its start yet."""
        return " (the forkserver starting it was still importing)" if worker in self._starting else ""

    def _settle(self, worker: int) -> Message | None:
        """``("starting", "")`` while ``worker``'s background start goes on, ``("died", why)`` if it
        failed, ``None`` once the worker runs (or it had no background start)."""
        start = self._starting.get(worker)
        if start is None:
            return None
        if not start.done:
            return "starting", ""
        del self._starting[worker]
        if start.error is not None:
            self.stop(worker, 0.0)
            return "died", f"the forkserver could not start it: {start.error!r}"
        self._processes[worker] = start.process
        return None

    def send(self, worker: int, message: Message) -> None:
        conn = self._conns.get(worker)
        if conn is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(message)

    def wait(self, workers: list[int], timeout: float) -> list[tuple[int, Message]]:
        owner: dict[Any, int] = {}
        settled = {w: self._settle(w) for w in workers}
        failed = [(w, m) for w, m in settled.items() if m is not None and m[0] != "starting"]
        if failed:
            return failed
        starting = [w for w, m in settled.items() if m is not None]
        if starting:  # looked at again soon: a start ends without a message to wake this wait
            workers, timeout = [w for w in workers if w not in starting], min(timeout, _START_POLL)
            if not workers:
                self._starting[starting[0]].thread.join(timeout)
                return []
        gone = [w for w in workers if w not in self._conns]  # stopped meanwhile (a shutdown)
        if gone:
            return [(w, ("died", "the worker was stopped")) for w in gone]
        for worker in workers:
            owner[self._conns[worker]] = owner[self._processes[worker].sentinel] = worker
        try:
            ready = wait(list(owner), timeout)
        except (OSError, ValueError):  # a pipe closed by a shutdown in another thread
            return [(w, ("died", "the worker was stopped")) for w in workers]
        return [(worker, self._receive(worker)) for worker in sorted({owner[obj] for obj in ready})]

    def _receive(self, worker: int) -> Message:
        conn, process = self._conns.get(worker), self._processes.get(worker)
        if conn is None or process is None:
            return "died", "the worker was stopped"
        with contextlib.suppress(EOFError, OSError, ValueError):
            if conn.poll():  # an answer sent before the process ended is still read
                message: Message = conn.recv()
                return message
        process.join(1.0)
        return "died", exit_cause(process.exitcode)

    def stop(self, worker: int, grace: float) -> None:
        start = self._starting.pop(worker, None)
        if start is not None:  # not started yet: killed as soon as it is
            start.abandon()
        process, conn = self._processes.pop(worker, None), self._conns.pop(worker, None)
        if process is not None:
            process.join(grace)
            for end in (process.terminate, process.kill):
                if process.is_alive():
                    end()
                    process.join(2.0)
        if conn is not None:
            conn.close()

    def exited(self, workers: list[int], timeout: float) -> bool:
        """Whether every one of ``workers`` exited, waiting up to ``timeout`` s for them."""
        deadline = time.monotonic() + timeout
        while True:
            running = [p for w in workers if (p := self._processes.get(w)) is not None and p.is_alive()]
            left = deadline - time.monotonic()
            if not running or left <= 0:
                return not running
            wait([p.sentinel for p in running], left)

    def end(self, workers: list[int], force: bool) -> None:
        """Terminate (``force``: kill) every one of ``workers`` still running, without waiting."""
        for worker in workers:
            process = self._processes.get(worker)
            if process is not None and process.is_alive():
                with contextlib.suppress(OSError):
                    process.kill() if force else process.terminate()

    def prepare_threaded_starts(self) -> None:
        """With ``start_method="auto"``, start the forkserver now, in the background (a start
        while this process runs threads goes through it): a restart then does not wait for its
        imports (seconds)."""
        if self._start_method == "auto" and "forkserver" in multiprocessing.get_all_start_methods():
            start_forkserver(self._preload)

    def can_write(self, replay_buffer: Any) -> bool:
        return bool(getattr(replay_buffer, "shared", False))  # shared or memmap storage

    def close(self) -> None:
        return


def await_exit(transport: Transport, workers: list[int], deadline: float, kill_wait: float) -> None:
    """Until every one of ``workers`` exited or ``deadline``; then terminate the rest at once, and
    kill those still running ``kill_wait`` s later (a transport without ``exited`` and ``end``
    waits and ends each worker in its own ``stop``)."""
    exited = getattr(transport, "exited", None)
    end = getattr(transport, "end", None)
    if exited is None or end is None:
        return
    exited(workers, max(0.0, deadline - time.monotonic()))
    for force in (False, True):
        if exited(workers, 0.0):
            return
        end(workers, force)
        exited(workers, kill_wait)
