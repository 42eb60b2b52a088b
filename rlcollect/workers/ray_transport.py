"""Workers as Ray actors, on this machine or across a cluster: the :class:`RayTransport`.

Each worker is one :class:`RayWorker` actor running the same :class:`~rlcollect.workers.worker.Worker`
as a worker process. Commands become actor calls (Ray runs one actor's calls in order); each
batch comes back in its report as numpy arrays. A failed worker is killed and a fresh actor is
started, exactly as a failed process is replaced: Ray's own actor restarts are not used.

A health check runs beside the batches: each actor answers a ping in a concurrency group of its
own (its commands still run one at a time), so a silent actor or node (a stopped process, a node
that stopped answering without its processes dying) is found within ``health_timeout`` seconds,
long before a batch's ``timeout`` or Ray's own node timeout (about a minute). Errors name the
actor's node, and whether Ray still counts it alive.

Ray is imported on demand: without it, building a transport raises an ``ImportError`` naming
``pip install rlcollect[ray]``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import os
import re
import signal
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any

from rlcollect.rollout.build import Engine
from rlcollect.workers.ray_local import start_ray
from rlcollect.workers.transport import Message
from rlcollect.workers.worker import (
    Worker,
    WorkerFailure,
    WorkerInfo,
    WorkerSetup,
    probe_worker,
    start_worker,
)

__all__ = ["RayTransport", "RayWorker", "import_ray", "why_died"]

#: how often each actor is pinged while its batches are awaited
_PING_EVERY = 0.5
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
    """The body of one Ray actor: a :class:`Worker`, built by :meth:`start` (or, for a worker
    started with ``probe=True``, by the ``"setup"`` command that follows, around the rollout its
    probe built; or, for an actor spawned ``deferred``, whose :meth:`start` is not called, by its
    first command, its ``"setup"``)."""

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self._probe: Engine | None = None  # the rollout built by a probe, until the setup comes

    def start(self, setup: WorkerSetup) -> Message:
        if setup.probe:
            self._probe, answer = probe_worker(setup)
            return answer
        return self._started(*start_worker(setup))

    def _started(self, worker: Worker | None, answer: Message) -> Message:
        self.worker = worker
        kind, info = answer
        if kind == "ready":  # say which node this is: hosts of a cluster may share a name
            ray = importlib.import_module("ray")
            node_id = ray.get_runtime_context().get_node_id()
            node = f"node {node_id[:8]} at {ray.util.get_node_ip_address()}"
            answer = kind, dataclasses.replace(info, node=node, node_id=node_id)
        return answer

    def ping(self) -> str:
        """Answered beside the commands (the "health" concurrency group): the actor is alive; its
        node's id."""
        return str(importlib.import_module("ray").get_runtime_context().get_node_id())

    def handle(self, command: str, argument: Any) -> Message:
        probe, self._probe = self._probe, None
        if command == "setup":
            return self._started(*start_worker(argument, probe))
        if self.worker is None:  # a probe closed before its setup came (the pool sends nothing else)
            if probe is not None:
                probe.close()
            return "ok", None
        return self.worker.handle(command, argument)


class RayTransport:
    """Ray actors as workers.

    Args:
        ray_init_config: ``ray.init`` arguments when Ray is not initialised yet; with an
            ``"address"`` (or ``RAY_ADDRESS`` set) it connects to that cluster, else it starts a
            local one. Ray is shut down at :meth:`close` only if this transport initialised it.
        actor_options: Ray actor options, one dict per actor (``num_cpus`` default 1, ``num_gpus``,
            ``resources``, ``scheduling_strategy``, ``runtime_env``, ...); they also size a local
            cluster.
        health_timeout: seconds an actor may leave a health ping unanswered before it is deemed
            silent (its process or node stopped); ``None``: no health check.
        spare_actors: actors kept started and idle (imports done, resources held) once every
            worker is up: a failed worker's replacement takes one, if it asks for what the spare
            asks for (the first actor's options), and starts in the time its envs take to build.
    """

    shared_slots = False
    kind = "ray"

    def __init__(
        self, ray_init_config: dict[str, Any], actor_options: list[dict[str, Any]],
        health_timeout: float | None = 10.0, spare_actors: int = 0,
    ) -> None:
        self.ray = ray = import_ray()
        # Ray's own restarts are not used: the pool restarts workers
        self._options = [{"num_cpus": 1, **config, "max_restarts": 0, "max_task_retries": 0}
                         for config in actor_options]
        self.owns_ray = start_ray(ray, ray_init_config, [options["num_cpus"] for options in self._options])
        self._remote = ray.remote(concurrency_groups={"health": 1})(RayWorker)
        self.actors: dict[int, Any] = {}
        self._calls: dict[int, deque[Any]] = {}  # refs of each actor's unanswered calls, in order
        self.health_timeout = health_timeout
        self._pings: dict[int, tuple[Any, float]] = {}  # worker -> (its unanswered ping, sent at)
        self._last_ping: dict[int, float] = {}
        self.infos: dict[int, WorkerInfo] = {}  # each started actor's answer: its process and node
        self._homes: dict[int, str] = {}  # the node each worker's last actor ran on
        self._silent_nodes: set[str] = set()  # nodes an actor went silent on: no replacement goes there
        self.spare_actors = spare_actors
        self._spares: list[tuple[Any, Any]] = []  # (actor, its ping: answered once it is up)
        self._spawned: set[int] = set()  # workers started at least once: a later spawn is a restart

    def spawn(self, worker: int, setup: WorkerSetup, timeout: float = math.inf, *,
              block: bool = True) -> None:
        actor = self._spare(worker) if worker in self._spawned else None
        if actor is None:
            actor = self._remote.options(**self._placement(worker)).remote()
        self._spawned.add(worker)
        self.actors[worker] = actor
        # deferred: the actor's process starts (its imports) and its setup comes as a command
        self._calls[worker] = deque() if setup.deferred else deque([actor.start.remote(setup)])

    def _spare(self, worker: int) -> Any:
        """A spare actor for ``worker``'s replacement: up, on a node that did not go silent, and
        asking for what ``worker`` asks for; ``None`` if there is none."""
        if self._options[worker] != self._options[0]:
            return None
        for spare in list(self._spares):
            actor, ping = spare
            if not self.ray.wait([ping], timeout=0)[0]:
                continue  # still starting
            self._spares.remove(spare)
            try:
                node = self.ray.get(ping)
            except Exception:  # it died meanwhile
                node = None
            if node is not None and node not in self._silent_nodes:
                return actor
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
        return None

    def _keep_spares(self) -> None:
        """Start spare actors up to ``spare_actors`` (once every worker is up: none competes with a
        worker's start for resources)."""
        while len(self._spares) < self.spare_actors:
            actor = self._remote.options(**self._options[0]).remote()
            self._spares.append((actor, actor.ping.options(concurrency_group="health").remote()))

    def _placement(self, worker: int) -> dict[str, Any]:
        """Actor ``worker``'s options: a replacement goes back to its predecessor's node while Ray
        counts it alive (soft: elsewhere once it is gone), unless the options place it already."""
        options, home = self._options[worker], self._homes.get(worker)
        placed = {"scheduling_strategy", "placement_group"} & set(options)
        if home is None or home in self._silent_nodes or placed:
            return options
        with contextlib.suppress(Exception):  # Ray cannot say: placed as Ray likes
            if any(node.get("NodeID") == home and node.get("Alive") for node in self.ray.nodes()):
                strategies = importlib.import_module("ray.util.scheduling_strategies")
                home_node = strategies.NodeAffinitySchedulingStrategy(home, soft=True)
                return {**options, "scheduling_strategy": home_node}
        return options

    def start_hint(self, worker: int) -> str:
        """Why actor ``worker`` may not have started: that Ray placed it and it has not answered,
        or the resources it asks for, if no node has them free now (it then waits for them)."""
        if self._placed(worker):
            return (": Ray placed its actor (its process runs), which did not answer (importing, or "
                    "building its envs; raise start_timeout)")
        waits = self._short_of(worker)
        if waits:
            return (f"{waits}. Ask for less in remote_config, start fewer actors, or give Ray more "
                    "(ray_init_config, more nodes)")
        return (f": its Ray actor asks for {self._asked(worker)}, which the cluster has free now, so it was "
                "placed but did not answer (importing, or building its envs; raise start_timeout)")

    def waits_for(self, worker: int) -> str:
        """What actor ``worker`` waits for, if Ray has not placed it and the cluster has not the
        resources it asks for free now (``""`` if it has them, or Ray cannot say). A placed actor
        holds its resources while it starts: they are not free then, and it waits for nothing."""
        return "" if self._placed(worker) else self._short_of(worker)

    def _short_of(self, worker: int) -> str:
        """The resources actor ``worker`` asks for that the cluster has not free now (``""`` if
        it has them, or Ray cannot say)."""
        try:
            free, total = self.ray.available_resources(), self.ray.cluster_resources()
        except Exception:  # Ray itself is gone: nothing more to say
            return ""
        asked = self._asked(worker)
        short = {name: amount for name, amount in asked.items() if free.get(name, 0.0) < amount}
        if not short:
            return ""
        have = {name: f"{free.get(name, 0.0):g} free of {total.get(name, 0.0):g}" for name in short}
        return (f": its Ray actor waits for resources: it asks for {asked} (remote_config; an actor that "
                f"runs worker processes asks for one CPU per worker), and the cluster has {have}")

    def _placed(self, worker: int) -> bool:
        """Whether Ray has started a process for actor ``worker`` (False if it cannot say)."""
        actor = self.actors.get(worker)
        if actor is None:
            return False
        try:  # the GCS's table: Ray's public state API needs the dashboard, which may not run
            state = importlib.import_module("ray._private.state").actors(actor_id=actor._actor_id.hex())
        except Exception:
            return False
        return bool(state.get("Pid"))

    def _asked(self, worker: int) -> dict[str, float]:
        options = self._options[worker]
        asks = {"CPU": float(options["num_cpus"]), "GPU": float(options.get("num_gpus") or 0),
                **{name: float(amount) for name, amount in (options.get("resources") or {}).items()}}
        return {name: amount for name, amount in asks.items() if amount > 0}

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
            answer = self._answer(worker, ref)
            if answer[0] == "ready":
                self.infos[worker] = answer[1]
                if len(self.infos) == len(self._options):
                    self._keep_spares()
            answers.append((worker, answer))
        return answers

    def silent(self, workers: list[int]) -> list[tuple[int, str]]:
        """The ones of ``workers`` that left a health ping unanswered for ``health_timeout`` s, and
        why; pings the others (at most every :data:`_PING_EVERY` s each)."""
        if self.health_timeout is None:
            return []
        now, lost = time.monotonic(), []
        for worker in workers:
            ping, sent = self._pings.get(worker, (None, 0.0))
            if ping is not None and self.ray.wait([ping], timeout=0)[0]:
                del self._pings[worker]  # answered (or the actor died: its calls say so)
                ping = None
            actor = self.actors.get(worker)
            if ping is None and actor is not None and now - self._last_ping.get(worker, 0.0) >= _PING_EVERY:
                self._pings[worker] = actor.ping.options(concurrency_group="health").remote(), now
                self._last_ping[worker] = now
            elif ping is not None and now - sent >= self.health_timeout:
                if worker in self.infos:
                    self._silent_nodes.add(self.infos[worker].node_id)
                lost.append((worker, f"its Ray actor answered no health check for health_timeout="
                                     f"{self.health_timeout:g} s: its process or its node stopped answering"
                                     f"{self._node_note(worker)}"))
        return lost

    def _node_note(self, worker: int) -> str:
        """Where actor ``worker`` ran, and whether Ray still counts that node alive."""
        info = self.infos.get(worker)
        if info is None or not info.node:
            return ""
        short = info.node.split()[1]
        with contextlib.suppress(Exception):  # Ray itself may be gone
            for node in self.ray.nodes():
                if str(node.get("NodeID", "")).startswith(short):
                    state = "alive for Ray" if node.get("Alive") else "dead: lost from the cluster"
                    return f" (it ran on {info.hostname}, {info.node}, which is {state})"
        return f" (it ran on {info.hostname}, {info.node}, which Ray no longer lists)"

    def _answer(self, worker: int, ref: Any) -> Message:
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
        except exceptions.RayError as error:  # the actor died, or its node was lost with the batch
            return "died", f"{type(error).__name__}: {why_died(str(error))}{self._node_note(worker)}"

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
        self._pings.pop(worker, None)
        info = self.infos.pop(worker, None)
        if info is not None and info.node_id:
            self._homes[worker] = info.node_id
        if info is not None and info.hostname == socket.gethostname():
            _kill_if_stopped(info.pid)  # Ray cannot end a stopped (SIGSTOP) process; SIGKILL can

    def can_write(self, replay_buffer: Any) -> bool:
        return is_ray_writer(replay_buffer)

    def prepare_threaded_starts(self) -> None:
        return  # actors start in their own processes, whatever this one runs

    def close(self) -> None:
        for actor, _ in self._spares:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
        self._spares.clear()
        if self.owns_ray and self.ray.is_initialized():
            with contextlib.suppress(Exception):
                self.ray.shutdown()


def why_died(text: str) -> str:
    """Ray's error text about a dead actor in one line: its first line, and where Ray says why (the
    sentences ``The actor is dead because ...``, after the actor's details; the exception that its
    creation raised, last), without Ray's list of common causes.

    Examples:
        >>> why_died("The actor died.\\n\\tpid: 7\\nThe actor is dead because it was killed by `ray.kill`.")
        'The actor died. The actor is dead because it was killed by `ray.kill`.'
    """
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)  # Ray colours the task's name
    lines = [line.strip() for line in plain.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    causes = [line.split(" Some common causes")[0] for line in lines[1:]
              if line.startswith("The actor is dead")]
    if "error raised in its creation task" in lines[0] and len(lines) > 1:
        causes.append(lines[-1])  # the exception the actor's constructor raised
    return " ".join([lines[0][:300], *causes])[:800]


def is_ray_writer(replay_buffer: Any) -> bool:
    """Whether ``replay_buffer`` is a Ray actor with ``extend``, which the actors write to themselves."""
    return callable(getattr(getattr(replay_buffer, "extend", None), "remote", None))


def _kill_if_stopped(pid: int) -> None:
    """SIGKILL process ``pid`` of this machine if it is stopped (state ``T``): Ray's kill leaves
    such a process behind. (An actor stopped on another machine stays: end it there.)"""
    with contextlib.suppress(OSError, IndexError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state in ("T", "t"):
            os.kill(pid, signal.SIGKILL)
