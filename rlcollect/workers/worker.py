"""The worker process: one :class:`Rollout` writing into the parent's shared-memory slots.

The parent sends small commands through a pipe; the worker answers each with one small message.
Observations never cross the pipe: ``collect`` names a slot, the worker fills its rows of that
slot and answers with the step count and a few counters.

Commands (``(name, argument)``) and answers:

- ``("collect", (slot, random))`` -> ``("done", BatchReport)``
- ``("seed", (seed, new_trajectories))``, ``("reset", None)``, ``("profile", ProfileConfig)``,
  ``("load_state_dict", state)`` -> ``("ok", None)``
- ``("state_dict", None)`` -> ``("ok", state)``
- ``("close", None)`` -> the worker exits.

Any exception is answered with ``("error", WorkerFailure)`` and the worker exits; the parent
decides whether to restart it.
"""

from __future__ import annotations

import contextlib
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.data.buffers import BatchBuffers
from rlcollect.replay import flatten_batch
from rlcollect.rollout.engine import Rollout, RolloutSpec
from rlcollect.rollout.profiling import ProfileConfig, RolloutProfiler
from rlcollect.weights.store import WorkerWeights

__all__ = ["BatchReport", "WorkerFailure", "WorkerSetup", "worker_main"]


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker process is started with (everything picklable)."""

    worker_idx: int
    num_workers: int
    spec_bytes: bytes  # the RolloutSpec, cloudpickled once by the parent
    env_offset: int  # index of its first env among all envs (seeding)
    seed: int | None
    traj_start: int  # first local trajectory id (continues after a restart)
    slots: tuple[TensorDict, ...]  # its rows of every shared-memory slot
    stop_flags: torch.Tensor  # [num_slots] uint8, raised by the parent to preempt
    weights: WorkerWeights
    profile: ProfileConfig | None = None
    replay_buffer: Any = None  # a shared / memmap buffer this worker extends itself


@dataclass(frozen=True)
class BatchReport:
    """A worker's answer to ``collect``: which slot, how many steps, counters since last time."""

    slot: int
    steps: int
    policy_version: int
    next_traj_id: int
    frames: int
    collect_seconds: float
    episodes: int
    returns: tuple[float, ...]  # returns of episodes completed in this batch
    lengths: tuple[int, ...]


@dataclass(frozen=True)
class WorkerFailure:
    """An exception raised in a worker: the exception itself (if it pickles) and its traceback."""

    error: BaseException | None
    error_type: str
    message: str
    traceback: str

    @classmethod
    def from_exception(cls, error: BaseException) -> WorkerFailure:
        """Capture ``error`` with its traceback; keep the object only if it survives pickling."""
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        try:
            cloudpickle.loads(cloudpickle.dumps(error))
            kept: BaseException | None = error
        except Exception:
            kept = None
        return cls(kept, type(error).__name__, str(error), text)


def _report(rollout: Rollout, slot: int, steps: int, version: int, seen_episodes: int) -> BatchReport:
    new = min(rollout.episodes.count - seen_episodes, len(rollout.episodes.returns))
    returns = tuple(list(rollout.episodes.returns)[len(rollout.episodes.returns) - new :])
    lengths = tuple(list(rollout.episodes.lengths)[len(rollout.episodes.lengths) - new :])
    return BatchReport(
        slot=slot,
        steps=steps,
        policy_version=version,
        next_traj_id=rollout.traj_ids.next_local_id,
        frames=rollout.frames,
        collect_seconds=rollout.collect_seconds,
        episodes=rollout.episodes.count,
        returns=returns,
        lengths=lengths,
    )


def worker_main(setup: WorkerSetup, conn: Connection) -> None:
    """Entry point of a worker process (runs until ``close``, an error, or the parent's exit)."""
    torch.set_num_threads(1)
    try:
        spec: RolloutSpec = cloudpickle.loads(setup.spec_bytes)
        rollout = Rollout(
            spec,
            env_offset=setup.env_offset,
            traj_stride=setup.num_workers,
            traj_offset=setup.worker_idx,
            traj_start=setup.traj_start,
        )
        steps_per_batch = rollout.config.num_steps
        slots = [BatchBuffers(slot, rollout.layout, steps_per_batch) for slot in setup.slots]
        stop_flags: np.ndarray = setup.stop_flags.numpy()
        preemptible = slots[0].mask is not None
        rollout.set_seed(setup.seed)
        profiler = None
        if setup.profile is not None and setup.profile.should_profile_worker(setup.worker_idx):
            profiler = RolloutProfiler(setup.profile, setup.worker_idx)
        version = -1  # pull the store's weights before the first batch
        conn.send(("ready", rollout.num_envs))
    except BaseException as error:
        conn.send(("error", WorkerFailure.from_exception(error)))
        return
    try:
        while True:
            try:
                command, argument = conn.recv()
            except (EOFError, OSError):  # the parent is gone
                break
            if command == "close":
                break
            if command == "collect":
                slot, random = argument
                version = setup.weights.pull(rollout.models, version)
                seen_episodes = rollout.episodes.count
                if profiler is not None:
                    profiler.before_rollout()
                steps = rollout.collect(
                    slots[slot],
                    random=random,
                    policy_version=version,
                    stop=stop_flags[slot : slot + 1] if preemptible else None,
                )
                if profiler is not None:
                    profiler.after_rollout()
                if setup.replay_buffer is not None:
                    setup.replay_buffer.extend(flatten_batch(slots[slot].batch))
                conn.send(("done", _report(rollout, slot, steps, version, seen_episodes)))
            elif command == "seed":
                seed, new_trajectories = argument
                rollout.set_seed(seed, new_trajectories=new_trajectories)
                conn.send(("ok", None))
            elif command == "reset":
                rollout.reset()
                conn.send(("ok", None))
            elif command == "state_dict":
                conn.send(("ok", {"rollout": rollout.state_dict(), "policy_version": version}))
            elif command == "load_state_dict":
                rollout.load_state_dict(argument["rollout"])
                version = int(argument["policy_version"])
                conn.send(("ok", None))
            else:
                raise ValueError(f"unknown worker command {command!r}")
    except BaseException as error:
        with contextlib.suppress(BrokenPipeError, OSError):
            conn.send(("error", WorkerFailure.from_exception(error)))
    finally:
        if profiler is not None:
            profiler.stop()
        rollout.close()


def describe_unpicklable(objects: dict[str, Any]) -> None:
    """Raise ``TypeError`` naming the first object ``cloudpickle`` cannot serialise."""
    for name, value in objects.items():
        try:
            cloudpickle.dumps(value)
        except Exception as error:
            raise TypeError(
                f"{name} ({value!r}) cannot be sent to a worker process: {error}. Define it at "
                "module level or build it inside the env factory / policy_factory instead"
            ) from None
