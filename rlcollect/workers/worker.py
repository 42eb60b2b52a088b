"""One worker: a :class:`Rollout` (or a ``TensorDictRollout``) for its envs, answering the parent's
small commands.

The same :class:`Worker` runs in a worker process
(:func:`~rlcollect.workers.process.process_main`, over a pipe) and in a Ray actor
(:class:`~rlcollect.workers.ray_transport.RayWorker`); only the transport differs. Commands
``(name, argument)`` and their answers:

- ``("collect", (slot, random, weights_payload))`` -> ``("done", BatchReport)``: pull the weights
  if their version moved, fill the worker's rows of slot ``slot`` (a shared-memory slot, or for a
  remote worker its own local one, returned in ``BatchReport.data``), extend the replay buffer if
  the worker writes it;
- ``("seed", (seed, new_trajectories))``, ``("load_state_dict", state)`` -> ``("ok", None)``;
- ``("state_dict", None)`` -> ``("ok", state)``;
- ``("call", (path, args, kwargs))`` -> ``("ok", value)``: the attribute at ``path`` of a
  :class:`WorkerView`, read (``args`` None) or called (the collector's ``call_workers``); a path
  that fails is answered ``("refused", WorkerFailure)`` and the worker carries on;
- ``("close", None)`` -> the worker closes its envs (a process exits, an actor answers ``ok``).

A TensorDict rollout (a TorchRL env the buffers cannot hold) has no slots: ``collect`` sends its
batch back whole, in ``BatchReport.batch``.

A worker answers its start with ``("ready", WorkerInfo)``. Any exception is answered with
``("error", WorkerFailure)``; the parent then restarts the worker or raises.

Example (in this process):
    >>> import cloudpickle
    >>> from rlcollect.rollout.engine import RolloutSpec
    >>> from rlcollect.weights.store import WeightStore
    >>> setup = WorkerSetup(worker_idx=1, num_workers=2, num_steps=5, env_offset=2, seed=0,
    ...                     spec=cloudpickle.dumps(RolloutSpec("CartPole-v1", num_envs=2)),
    ...                     weights=WeightStore({}, 2).receiver(1))
    >>> worker, (kind, info) = start_worker(setup)
    >>> kind, info.num_envs
    ('ready', 2)
    >>> kind, report = worker.handle("collect", (0, False, None))
    >>> kind, report.steps, report.data is not None  # no shared slots: the batch comes back
    ('done', 5, True)
    >>> worker.close()
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
import traceback
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.common.generators import derive_held_generators
from rlcollect.data.attributes import call_path, resolve_path
from rlcollect.envs import envpool_env
from rlcollect.envs.base import source_env
from rlcollect.envs.factory import copies_one_env
from rlcollect.envs.torchrl_env import dump_env_transform
from rlcollect.replay import flatten_batch
from rlcollect.rollout.build import Engine, make_rollout
from rlcollect.rollout.engine import RolloutSpec
from rlcollect.rollout.profiling import ProfileConfig, RolloutProfiler
from rlcollect.rollout.summary import EngineSummary
from rlcollect.workers.targets import batch_target
from rlcollect.workers.wire import Packed

__all__ = ["BatchReport", "Worker", "WorkerFailure", "WorkerInfo", "WorkerSetup", "build_rollout",
           "probe_worker", "start_worker"]


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker is started with (picklable; cloudpickled objects travel as ``spec`` bytes).

    Attributes:
        worker_idx, num_workers: its index; trajectory ids are ``local * num_workers + worker_idx``.
        spec: the :class:`~rlcollect.rollout.engine.RolloutSpec`, cloudpickled once by the parent.
        num_steps: steps per batch ``T``, derived once by the parent.
        env_offset: index of its first env among all envs (env ``i`` is seeded ``seed + i``).
        seed: ``None`` for unseeded envs.
        traj_start: first local trajectory id (continues after a restart).
        weights: the receiver of the weights (``pull(modules, seen, payload) -> version``).
        slots: its rows of the parent's shared-memory slots; ``None``: one local slot, and each
            batch travels back in :attr:`BatchReport.data`.
        stop_flags: ``[num_slots]`` uint8 raised by the parent to preempt (sync collectors).
        profile: profiling settings (this worker profiles if they select it).
        replay_buffer: a buffer this worker extends itself (shared, memmap, or a Ray actor).
        served_policy: the adapter through which a policy server acts for this worker's envs
            (:class:`~rlcollect.workers.inference.ServedPolicy`); ``None``: the spec's policy.
        own_weights: its policy keeps the weights its own factory gave it until an update for it
            (one ``policy_factory`` per worker); otherwise it takes the collector's before its
            first batch.
        init_fn: the user's ``worker_init_fn``, cloudpickled: called with ``worker_idx`` first.
        probe: build the rollout, answer ``("probed", EngineSummary)`` and wait for the whole
            setup (``("setup", WorkerSetup)``) before answering ``ready``: the parent lays out
            the slots from this worker's policy (see :func:`probe_worker`).
        deferred: start the process and wait for the whole setup, building nothing before: its
            interpreter starts while worker 0 builds the probe (a Ray actor's setup comes as its
            first command).
    """

    worker_idx: int
    num_workers: int
    spec: bytes
    num_steps: int
    env_offset: int
    seed: int | None
    weights: Any
    traj_start: int = 0
    slots: tuple[TensorDict, ...] | None = None
    stop_flags: torch.Tensor | None = None
    profile: ProfileConfig | None = None
    replay_buffer: Any = None
    served_policy: Any = None
    own_weights: bool = False
    init_fn: bytes | None = None
    probe: bool = False
    deferred: bool = False


@dataclass(frozen=True)
class WorkerInfo:
    """A worker's answer to its start: its envs, process, host (and Ray node), and when it was
    ready (``time.time()``)."""

    num_envs: int
    pid: int
    hostname: str
    ready_at: float = 0.0
    node: str = ""  # a Ray actor's node ("node <id> at <ip>"); empty for a process
    node_id: str = ""  # a Ray actor's node, Ray's whole id


@dataclass(frozen=True)
class BatchReport:
    """A worker's answer to ``collect``: which slot, how many steps, counters since its start."""

    slot: int
    steps: int
    policy_version: int
    next_traj_id: int
    frames: int
    collect_seconds: float
    episodes: int
    episode_records: dict[str, Any]  # the episodes completed in this batch (EpisodeRecords.drain())
    data: Packed | None = None  # the worker's rows, when they do not live in shared memory
    batch: TensorDictBase | None = None  # a TensorDict rollout's whole batch (no buffers to unpack into)
    batch_frames: int | None = None  # the batch's transitions (None, in a state saved before: steps x envs)


@dataclass(frozen=True)
class WorkerFailure:
    """An exception raised in a worker: the exception itself (if it pickles) and its traceback."""

    error: BaseException | None
    error_type: str
    message: str
    traceback: str

    @classmethod
    def from_exception(cls, error: BaseException) -> WorkerFailure:
        """Capture ``error`` with its traceback; keep the object only if it survives pickling (and
        its message only if ``str()`` of it works: an exception whose ``__str__`` raises is named)."""
        try:
            message = str(error)
        except Exception as failure:
            message = f"<its str() raised {type(failure).__name__}>"
        try:
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        except Exception:
            text = "".join(traceback.format_tb(error.__traceback__)) + f"{type(error).__name__}: {message}\n"
        try:
            cloudpickle.loads(cloudpickle.dumps(error))
            str(error)  # the parent shows it: one whose str() raises travels as its type and text
            kept: BaseException | None = error
        except Exception:
            kept = None
        return cls(kept, type(error).__name__, message, text)


class WorkerView:
    """What the parent's ``call_workers`` paths resolve on in a worker: the attributes of
    TorchRL's worker collectors that a worker has.

    Attributes:
        worker_idx: the worker's index.
        frames_per_batch: the frames of each of its batches.
        replay_buffer: the buffer it writes (``None`` where the parent writes).
        policy: its policy (``None`` for random actions or a policy server).
        policy_version: the version of the weights it collects with (0 before its first batch).
        env: the env it steps (as :attr:`rlcollect.Collector.env`).
    """

    def __init__(self, worker: Worker) -> None:
        self.worker_idx = worker.setup.worker_idx
        self.frames_per_batch = worker.setup.num_steps * worker.rollout.num_envs
        self.replay_buffer = worker.setup.replay_buffer
        self.policy = getattr(worker.rollout, "user_policy", None)
        self.policy_version = max(worker.version, 0)  # -1: the first weights are not pulled yet
        self.env = source_env(getattr(worker.rollout, "envs", None))

    def get_policy_version(self) -> int:
        """The version of the weights this worker collects with."""
        return int(self.policy_version)

    def _dump_env_transform(self, step: int | None = None) -> None:
        """TorchRL's worker call that has the env's transform write what it gathered (a video)."""
        dump_env_transform(self.env, step)

    def read(self, path: str) -> Any:
        """The attribute at ``path`` (a call that reads another path in each worker)."""
        return resolve_path(self, path)

    def cascade_execute(self, attr_path: str, *args: Any, **kwargs: Any) -> Any:
        return call_path(self, attr_path, args, kwargs)


class Worker:
    """The worker's state and command handlers (see the module docstring)."""

    def __init__(self, setup: WorkerSetup, rollout: Engine | None = None) -> None:
        spec: RolloutSpec = cloudpickle.loads(setup.spec)
        self.setup = setup = dataclasses.replace(setup, spec=b"")  # the policy's bytes are not kept
        self.post_collect_hook = spec.post_collect_hook
        if rollout is not None and spec.engine is not None:  # a probe's rollout; the worker's own
            rollout.close()  # engine (processes of its own) is built now
            rollout = None
        self.rollout = rollout = build_rollout(spec, setup) if rollout is None else rollout
        self.target = batch_target(rollout, setup.slots, num_steps=setup.num_steps,
                                   worker_idx=setup.worker_idx)
        flags = setup.stop_flags
        self.stop_flags: np.ndarray | None = flags.numpy() if flags is not None else None
        seed = setup.seed
        if seed is None:  # a forked worker starts with its parent's generators: draw its own
            torch.seed()
            np.random.seed()
            if copies_one_env(spec.create_env_fn):  # or it steps every other worker's episodes
                seed = own_seed()
        rollout.set_seed(seed)
        self.profiler = None
        if setup.profile is not None and setup.profile.should_profile_worker(setup.worker_idx):
            self.profiler = RolloutProfiler(setup.profile, setup.worker_idx)
        if spec.compile_policy and hasattr(setup.weights, "bind"):
            setup.weights.bind = False  # a compiled policy may keep its parameters: copy into them
        self.version = 0 if setup.own_weights else -1  # -1: pull the weights before the first batch

    def info(self) -> WorkerInfo:
        return WorkerInfo(self.rollout.num_envs, os.getpid(), socket.gethostname(), time.time())

    def handle(self, command: str, argument: Any) -> tuple[str, Any]:
        """Run one command; an exception becomes ``("error", WorkerFailure)``."""
        try:
            if command == "collect":
                return "done", self.collect(*argument)
            if command == "seed":
                self.rollout.set_seed(argument[0], new_trajectories=argument[1])
                return "ok", None
            if command == "state_dict":
                return "ok", {"rollout": self.rollout.state_dict(), "policy_version": self.version}
            if command == "load_state_dict":
                state, self.version = argument["rollout"], int(argument["policy_version"])
                if getattr(self.setup.weights, "bind", False):  # the modules run on the store's copies:
                    state, self.version = {**state, "models": {}}, -1  # bound again at the next pull
                self.rollout.load_state_dict(state)
                return "ok", None
            if command == "close":
                self.close()
                return "ok", None
            if command == "call":  # call_workers: (path, args or None to read, kwargs)
                return self._call(*argument)
            raise ValueError(f"unknown worker command {command!r}")
        except BaseException as error:
            return "error", WorkerFailure.from_exception(error)

    def _call(self, path: str, args: tuple[Any, ...] | None, kwargs: dict[str, Any]) -> tuple[str, Any]:
        """Read (``args`` None) or call the attribute at ``path`` of :class:`WorkerView`; an error
        is ``("refused", WorkerFailure)``: the caller's mistake, the worker carries on."""
        view = WorkerView(self)
        try:
            return "ok", resolve_path(view, path) if args is None else call_path(view, path, args, kwargs)
        except Exception as error:
            return "refused", WorkerFailure.from_exception(error)

    def collect(self, slot: int, random: bool, weights_payload: Any) -> BatchReport:
        rollout = self.rollout
        self.version = self.setup.weights.pull(rollout.models, self.version, weights_payload)
        if self.profiler is not None:
            self.profiler.before_rollout()
        stop = self.stop_flags[slot : slot + 1] if self.stop_flags is not None else None
        before = rollout.frames
        batch, steps = rollout.collect_batch(self.target.buffers(slot), self.setup.num_steps, random=random,
                                             policy_version=self.version, stop=stop)
        if self.profiler is not None:
            self.profiler.after_rollout()
        if self.post_collect_hook is not None:
            self.post_collect_hook(batch)
        sink = self.setup.replay_buffer
        if sink is not None:
            remote = getattr(sink.extend, "remote", None)  # a Ray actor: wait for its write
            if remote is not None:
                import ray

                ray.get(remote(flatten_batch(batch)))
            else:
                sink.extend(flatten_batch(batch))
        data, whole = self.target.sent(batch, writes_replay=sink is not None)
        return BatchReport(
            slot=slot, steps=steps, policy_version=self.version,
            next_traj_id=rollout.traj_ids.next_local_id, frames=rollout.frames,
            collect_seconds=rollout.collect_seconds, episodes=rollout.episodes.count,
            episode_records=rollout.episodes.records.drain(),
            data=data, batch=whole, batch_frames=rollout.frames - before,
        )

    def close(self) -> None:
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler = None
        self.rollout.close()


def build_rollout(spec: RolloutSpec, setup: WorkerSetup) -> Engine:
    """The worker's rollout for ``spec``, placed as ``setup`` says (its envs' seeds, trajectory
    ids); the process runs one torch thread (the parent's setting is left alone) and one EnvPool
    thread per pool it builds (unless asked)."""
    torch.set_num_threads(1)
    envpool_env.POOL_THREADS = 1
    if spec.engine is not None:
        rollout: Engine = spec.engine(spec, setup)
    else:
        rollout = make_rollout(spec, env_offset=setup.env_offset, traj_stride=setup.num_workers,
                               traj_offset=setup.worker_idx, traj_start=setup.traj_start,
                               served_policy=setup.served_policy)
    derive_held_generators(getattr(rollout, "user_policy", None), setup.env_offset)  # own streams per copy
    return rollout


def own_seed() -> int:
    """A seed from fresh entropy, 30 bits (EnvPool takes a C ``int``, plus the envs' offsets)."""
    return int(np.random.SeedSequence().generate_state(1)[0] >> 2)


def start_worker(setup: WorkerSetup, rollout: Engine | None = None) -> tuple[Worker | None, tuple[str, Any]]:
    """Build the worker (around ``rollout`` if :func:`probe_worker` built it); return it with its
    first answer (``ready`` or ``error``)."""
    try:
        if setup.init_fn is not None and rollout is None:  # before anything of the worker's is built
            cloudpickle.loads(setup.init_fn)(setup.worker_idx)
        worker = Worker(setup, rollout)
        return worker, ("ready", worker.info())
    except BaseException as error:
        if rollout is not None:
            rollout.close()
        return None, ("error", WorkerFailure.from_exception(error))


def probe_worker(setup: WorkerSetup) -> tuple[Engine | None, tuple[str, Any]]:
    """A worker's first phase where the parent has no policy of its own to lay out the slots with:
    build the rollout (its policy from the spec's ``policy_factory``, in this process alone) and
    answer ``("probed", EngineSummary)``; the rollout is kept for :func:`start_worker`."""
    try:
        if setup.init_fn is not None:
            cloudpickle.loads(setup.init_fn)(setup.worker_idx)
        rollout = build_rollout(cloudpickle.loads(setup.spec), setup)
    except BaseException as error:
        return None, ("error", WorkerFailure.from_exception(error))
    try:
        return rollout, ("probed", EngineSummary.of(rollout).portable())
    except BaseException as error:
        rollout.close()
        return None, ("error", WorkerFailure.from_exception(error))
