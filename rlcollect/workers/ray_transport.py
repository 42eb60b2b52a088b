"""Workers as Ray actors, on this machine or across a cluster: the :class:`RayTransport`.

Each worker is one :class:`RayWorker` actor running the same :class:`~rlcollect.workers.worker.Worker`
as a worker process. Commands become actor calls (Ray runs one actor's calls in order); each
batch comes back in its report as numpy arrays. A failed worker is killed and a fresh actor is
started, exactly as a failed process is replaced: Ray's own actor restarts are not used.

Ray is imported on demand: without it, building a transport raises an ``ImportError`` naming
``pip install rlcollect[ray]``.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
from collections import deque
from typing import Any

from rlcollect.workers.transport import Message
from rlcollect.workers.worker import Worker, WorkerFailure, WorkerSetup, start_worker

__all__ = ["RayTransport", "RayWorker", "import_ray"]

_INSTALL_HINT = "RayCollector needs Ray: pip install rlcollect[ray]  (or: pip install 'ray[default]>=2.9')"


def import_ray() -> Any:
    """The ``ray`` module.

    Raises:
        ImportError: Ray is not installed; the message names the extra to install.
    """
    try:
        return importlib.import_module("ray")
    except ImportError as error:
        raise ImportError(f"{_INSTALL_HINT} ({error})") from error


class RayWorker:
    """The body of one Ray actor: a :class:`Worker`, built by :meth:`start`."""

    def __init__(self) -> None:
        self.worker: Worker | None = None

    def start(self, setup: WorkerSetup) -> Message:
        self.worker, answer = start_worker(setup)
        return answer

    def handle(self, command: str, argument: Any) -> Message:
        assert self.worker is not None
        return self.worker.handle(command, argument)


class RayTransport:
    """Ray actors as workers.

    Args:
        ray_init_config: ``ray.init`` arguments when Ray is not initialised yet; with an
            ``"address"`` (or ``RAY_ADDRESS`` set) it connects to that cluster, else it starts a
            local one. Ray is shut down at :meth:`close` only if this transport initialised it.
        remote_config: Ray actor options (``num_cpus`` default 1, ``num_gpus``, ``resources``,
            ``runtime_env``, ...).
        num_workers: actors that will be started (sizes a local cluster).
    """

    shared_slots = False
    kind = "ray"

    def __init__(
        self, ray_init_config: dict[str, Any], remote_config: dict[str, Any], num_workers: int
    ) -> None:
        self.ray = ray = import_ray()
        options = dict(remote_config)  # Ray's own restarts are not used: the pool restarts workers
        options.setdefault("num_cpus", 1)
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            config = dict(ray_init_config)
            if "address" not in config and not os.environ.get("RAY_ADDRESS"):
                needed = num_workers * max(1, int(-(-options["num_cpus"] // 1)))
                config.setdefault("num_cpus", max(os.cpu_count() or 1, needed))
                config.setdefault("include_dashboard", False)
            ray.init(**config)
        self._asks = {"CPU": float(options["num_cpus"]), "GPU": float(options.get("num_gpus") or 0),
                      **{k: float(v) for k, v in (options.get("resources") or {}).items()}}
        self._actor_class = ray.remote(RayWorker).options(**options, max_restarts=0, max_task_retries=0)
        self.actors: dict[int, Any] = {}
        self._calls: dict[int, deque[Any]] = {}  # refs of each actor's unanswered calls, in order

    def spawn(self, worker: int, setup: WorkerSetup, timeout: float = math.inf) -> None:
        actor = self._actor_class.remote()
        self.actors[worker] = actor
        self._calls[worker] = deque([actor.start.remote(setup)])

    def start_hint(self, worker: int) -> str:
        """Why actor ``worker`` may not have started: the resources it asks for, if no node has
        them free now (it then waits for them), else that it was placed but has not answered."""
        waits = self.waits_for(worker)
        if waits:
            return (f"{waits}. Ask for less in remote_config, start fewer actors, or give Ray more "
                    "(ray_init_config, more nodes)")
        return (f": its Ray actor asks for {self._asked()}, which the cluster has free now, so it was placed "
                "but did not answer (importing, or building its envs; raise start_timeout)")

    def waits_for(self, worker: int) -> str:
        """What actor ``worker`` waits for, if the cluster has not the resources it asks for free
        now (``""`` if it has them, or Ray cannot say)."""
        try:
            free, total = self.ray.available_resources(), self.ray.cluster_resources()
        except Exception:  # Ray itself is gone: nothing more to say
            return ""
        asked = self._asked()
        short = {name: amount for name, amount in asked.items() if free.get(name, 0.0) < amount}
        if not short:
            return ""
        have = {name: f"{free.get(name, 0.0):g} free of {total.get(name, 0.0):g}" for name in short}
        return (f": its Ray actor waits for resources: it asks for {asked} (remote_config; an actor that "
                f"runs worker processes asks for one CPU per worker), and the cluster has {have}")

    def _asked(self) -> dict[str, float]:
        return {name: amount for name, amount in self._asks.items() if amount > 0}

    def send(self, worker: int, message: Message) -> None:
        if worker in self.actors:
            self._calls[worker].append(self.actors[worker].handle.remote(*message))

    def wait(self, workers: list[int], timeout: float) -> list[tuple[int, Message]]:
        heads = {self._calls[w][0]: w for w in workers if self._calls.get(w)}
        if not heads:
            return []
        done, _ = self.ray.wait(list(heads), num_returns=1, timeout=timeout)
        answers = []
        for ref in done:
            worker = heads[ref]
            self._calls[worker].popleft()
            answers.append((worker, self._answer(ref)))
        return answers

    def _answer(self, ref: Any) -> Message:
        exceptions = self.ray.exceptions
        try:
            message: Message = self.ray.get(ref)
            return message
        except exceptions.RayTaskError as error:  # raised in the actor outside the worker's handler
            try:
                cause: BaseException = error.as_instanceof_cause()
            except Exception:
                cause = error
            return "error", WorkerFailure.from_exception(cause)
        except exceptions.RayError as error:  # the actor died
            lines = str(error).strip().splitlines()
            return "died", f"{type(error).__name__}: {lines[0][:200] if lines else ''}"

    def stop(self, worker: int, grace: float) -> None:
        actor, calls = self.actors.pop(worker, None), self._calls.pop(worker, deque())
        if actor is None:
            return
        if calls and grace > 0:
            with contextlib.suppress(Exception):
                self.ray.wait([calls[-1]], timeout=grace)  # a "close" sent before lets it close its envs
        for ref in calls:  # answers nobody will read: fetch what finished so Ray does not log them
            with contextlib.suppress(Exception):
                self.ray.get(ref, timeout=0)
        with contextlib.suppress(Exception):
            self.ray.kill(actor, no_restart=True)

    def can_write(self, replay_buffer: Any) -> bool:
        return callable(getattr(getattr(replay_buffer, "extend", None), "remote", None))  # a Ray actor

    def close(self) -> None:
        if self.owns_ray and self.ray.is_initialized():
            with contextlib.suppress(Exception):
                self.ray.shutdown()
