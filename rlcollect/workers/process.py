"""A worker process's life: build the :class:`~rlcollect.workers.worker.Worker` from its setup,
answer the parent's commands over its pipe until ``close``, an error, or the parent's exit.

A worker started with ``probe=True`` builds its rollout first and answers ``("probed",
EngineSummary)``; the parent lays out the slots from it and sends ``("setup", WorkerSetup)``, the
whole setup, which the worker then builds around the same rollout (its envs and policy built once).
One started with ``deferred=True`` meanwhile only waits for its setup (its interpreter has started).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection
from typing import Any

from rlcollect.rollout.build import Engine
from rlcollect.workers.worker import WorkerSetup, probe_worker, start_worker

__all__ = ["process_main"]


def process_main(setup_box: list[WorkerSetup], conn: Connection) -> None:
    """Entry point of a worker process: runs until ``close``, an error, or the parent's exit.

    The setup comes in a list that is emptied here, so that its pickled policy is not kept for the
    life of the process (the process object holds its arguments).

    SIGINT is ignored: a Ctrl-C in a terminal reaches every process of the group, and only the
    parent should see it (it then shuts the workers down). It is unblocked too (the parent starts
    workers with it blocked, so that a Ctrl-C during their start-up does not reach them either).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    parent, creator = os.getppid(), multiprocessing.parent_process()  # the creator's pid predates the fork
    setup, rollout = _await_setup(setup_box.pop(), conn, parent, creator)
    if setup is None:
        return
    worker, answer = start_worker(setup, rollout)
    conn.send(answer)
    if worker is None:
        return
    try:
        while (message := _next_command(conn, parent, creator)) is not None and message[0] != "close":
            answer = worker.handle(*message)
            message = None  # the command's weights, if any, are not kept until the next
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(answer)
            if answer[0] == "error":
                break
    finally:
        worker.close()


def _await_setup(setup: WorkerSetup, conn: Connection, parent: int, creator: Any
                 ) -> tuple[WorkerSetup | None, Engine | None]:
    """The setup to start with, and the rollout a probe built: a worker started with ``probe`` or
    ``deferred`` waits for its whole setup (``None``: closed, or the parent gone, first)."""
    if not (setup.probe or setup.deferred):
        return setup, None
    rollout = None
    if setup.probe:  # the parent lays out the slots from this worker's rollout, then sends its setup
        rollout, answer = probe_worker(setup)
        conn.send(answer)
        if rollout is None:
            return None, None
    message = _next_command(conn, parent, creator)
    if message is None or message[0] != "setup":
        if rollout is not None:
            rollout.close()
        return None, None
    return message[1], rollout


def _next_command(conn: Connection, parent: int, creator: Any) -> tuple[str, Any] | None:
    """The parent's next command, or ``None`` once the parent is gone."""
    try:
        while not conn.poll(1.0):
            if os.getppid() != parent or (creator is not None and not creator.is_alive()):
                # a forked sibling may hold the parent's pipe end open (and a parent killed
                # before this process read its pid leaves getppid() unchanged):
                return None  # no end-of-file would come, but the parent is gone
        command, argument = conn.recv()
    except (EOFError, OSError):
        return None
    return command, argument
