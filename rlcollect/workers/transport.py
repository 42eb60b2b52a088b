"""How the parent reaches its workers: the :class:`Transport` interface, and worker processes.

A transport starts workers, sends them commands and hands back their answers; it knows nothing
of batches, restarts or bookkeeping (that is :class:`~rlcollect.workers.pool.WorkerPool`). Two
exist: :class:`ProcessTransport` (processes on this machine, pipes, shared-memory slots) and
:class:`~rlcollect.workers.ray_transport.RayTransport` (Ray actors, the object store).
"""

from __future__ import annotations

import contextlib
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

from rlcollect.workers.worker import WorkerSetup, process_main

__all__ = ["Message", "ProcessTransport", "Transport"]

Message = tuple[str, Any]  # ("ready" | "done" | "ok" | "error" | "died", payload)


class Transport(Protocol):
    """What the pool needs from a transport."""

    #: the workers' slots are shared with this process (else batches travel in the reports)
    shared_slots: bool
    #: what the workers are, for the weight-sync schemes: "process" or "ray"
    kind: str

    def spawn(self, worker: int, setup: WorkerSetup) -> None:
        """Start worker ``worker``; its first message is ``ready`` or ``error``."""

    def send(self, worker: int, message: Message) -> None:
        """Send a command (a dead worker is noticed by :meth:`wait`, not here)."""

    def wait(self, workers: list[int], timeout: float) -> list[tuple[int, Message]]:
        """Answers of ``workers`` within ``timeout`` s; a dead worker answers ``("died", why)``."""

    def stop(self, worker: int, grace: float) -> None:
        """End worker ``worker``, giving it ``grace`` seconds to exit by itself."""

    def can_write(self, replay_buffer: Any) -> bool:
        """Whether the workers can extend ``replay_buffer`` themselves."""

    def close(self) -> None:
        """Release what the transport holds (every worker is stopped already)."""


class ProcessTransport:
    """Worker processes started with ``context``, one pipe each.

    Args:
        context: a multiprocessing context (``spawn``, ``forkserver`` or ``fork``).
    """

    shared_slots = True
    kind = "process"

    def __init__(self, context: BaseContext) -> None:
        self._context = context
        self._processes: dict[int, BaseProcess] = {}
        self._conns: dict[int, Connection] = {}

    def spawn(self, worker: int, setup: WorkerSetup) -> None:
        parent_end, child_end = self._context.Pipe()
        process = self._context.Process(  # type: ignore[attr-defined]
            target=process_main, args=([setup], child_end), name=f"rlcollect-worker-{worker}",
            daemon=False,  # envs may start processes of their own
        )
        process.start()
        child_end.close()
        self._processes[worker], self._conns[worker] = process, parent_end

    def send(self, worker: int, message: Message) -> None:
        conn = self._conns.get(worker)
        if conn is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(message)

    def wait(self, workers: list[int], timeout: float) -> list[tuple[int, Message]]:
        owner: dict[Any, int] = {}
        for worker in workers:
            owner[self._conns[worker]] = owner[self._processes[worker].sentinel] = worker
        ready = wait(list(owner), timeout)
        return [(worker, self._receive(worker)) for worker in sorted({owner[obj] for obj in ready})]

    def _receive(self, worker: int) -> Message:
        conn, process = self._conns[worker], self._processes[worker]
        with contextlib.suppress(EOFError, OSError):
            if conn.poll():  # an answer sent before the process ended is still read
                message: Message = conn.recv()
                return message
        process.join(1.0)
        return "died", f"process exited with code {process.exitcode}"

    def stop(self, worker: int, grace: float) -> None:
        process, conn = self._processes.pop(worker, None), self._conns.pop(worker, None)
        if process is not None:
            process.join(grace)
            for end in (process.terminate, process.kill):
                if process.is_alive():
                    end()
                    process.join(2.0)
        if conn is not None:
            conn.close()

    def can_write(self, replay_buffer: Any) -> bool:
        return bool(getattr(replay_buffer, "shared", False))  # shared or memmap storage

    def close(self) -> None:
        return
