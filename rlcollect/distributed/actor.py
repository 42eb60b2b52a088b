"""The body of one Ray actor: one of our collectors, driven one batch per request.

:class:`CollectorActor` is a plain class; :class:`~rlcollect.distributed.RayCollector` turns it into
a Ray actor class (``ray.remote``) when it starts, so this module imports no Ray at import time.
The parent talks to each actor with a handful of small calls:

- ``setup(spec, seed, traj_base, weights, version)``: build the collector (again, after a restart);
- ``collect(weights, version)``: pull the weights if ``version`` is newer, collect one batch,
  relabel its trajectory ids and policy versions into the parent's spaces, and return it (or
  write it to a Ray actor sink and return only the report);
- ``set_seed``, ``state_dict``, ``load_state_dict``, ``enable_profile``, ``stats``, ``close``.

Weights travel as ``[{model_id: (ObjectRef, version)}]``, each ObjectRef holding one update's
``{model_id: TensorDict}``: the list keeps Ray from fetching the objects with every request; the
actor fetches them only when the version moved.

Example (without Ray: the same object runs in this process):
    >>> spec = ActorSpec("CartPole-v1", None, Collector, {"num_envs": 2}, frames_per_batch=8,
    ...                  num_actors=2)
    >>> actor = CollectorActor(actor_idx=1)
    >>> actor.setup(spec, seed=0, traj_base=0, weights=None, version=0).num_envs
    2
    >>> packed, report = actor.collect(None, 0)
    >>> batch = unpack([packed])
    >>> batch["collector", "traj_ids"][:, 0].tolist()  # local ids 0, 1 -> 0 * 2 + 1, 1 * 2 + 1
    [1, 3]
    >>> report.frames
    8
    >>> actor.close()
"""

from __future__ import annotations

import dataclasses
import os
import socket
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDictBase

from rlcollect.collectors.base import BaseCollector
from rlcollect.collectors.collector import Collector
from rlcollect.collectors.multi_sync import MultiSyncCollector
from rlcollect.collectors.stats import CollectorStats
from rlcollect.distributed._wire import Packed, pack, unpack  # noqa: F401 (unpack: doctest)
from rlcollect.replay import flatten_batch
from rlcollect.rollout.profiling import ProfileConfig

__all__ = ["ActorInfo", "ActorReport", "ActorSpec", "CollectorActor", "CollectorClass", "WeightBox"]

CollectorClass = type[Collector] | type[MultiSyncCollector]  # what an actor can run

# [{model_id: (ObjectRef of a TensorDict of weights, version it was written at)}], or None
WeightBox = list[dict[str, tuple[Any, int]]] | None


@dataclass(frozen=True)
class ActorSpec:
    """What every actor builds its collector from (put in the object store once).

    Attributes:
        create_env_fn, policy: as for the collector.
        collector_class: :class:`Collector`, :class:`MultiSyncCollector` or a subclass.
        collector_kwargs: further keyword arguments of ``collector_class``.
        frames_per_batch: frames per batch of one actor.
        num_actors: actors sharing the trajectory-id space (ids are strided by it).
        sink: a Ray actor handle with ``extend.remote``, written by the actors themselves.
    """

    create_env_fn: Any
    policy: Any
    collector_class: CollectorClass = Collector
    collector_kwargs: Mapping[str, Any] = field(default_factory=dict)
    frames_per_batch: int = 1
    num_actors: int = 1
    sink: Any = None


@dataclass(frozen=True)
class ActorInfo:
    """What ``setup`` answers: the actor's envs, frames per batch, process and host."""

    num_envs: int
    frames_per_batch: int
    pid: int
    hostname: str


@dataclass(frozen=True)
class ActorReport:
    """Sent with every batch: its frames, the newest weights version, the next free trajectory id."""

    frames: int
    policy_version: int
    next_traj_id: int  # first unused id of this actor's local space (before striding)
    stats: CollectorStats  # of the actor's collector since it was (re)built


class CollectorActor:
    """One collector in one process, serving the parent's requests (see the module docstring).

    Args:
        actor_idx: this actor's index among the parent's actors.

    The actor holds nothing else until :meth:`setup`, which the parent calls again after every
    restart (Ray re-runs only this constructor), so no constructor argument has to outlive a crash.
    """

    def __init__(self, actor_idx: int) -> None:
        torch.set_num_threads(1)
        self.spec: ActorSpec | None = None
        self.actor_idx = actor_idx
        self.collector: BaseCollector | None = None
        self._batches: Iterator[TensorDictBase | None] | None = None
        self._traj_base = self._next_traj = 0
        self._version = 0  # newest weights version applied (the parent's numbering)
        self._by_local: list[int] = [0]  # parent's version by the collector's own version stamp
        self._weights: dict[str, TensorDictBase] = {}  # the newest weights applied, by model id

    # -- building ----------------------------------------------------------------------------
    def setup(
        self, spec: ActorSpec | list[Any], seed: int | None, traj_base: int, weights: WeightBox, version: int
    ) -> ActorInfo:
        """Build the collector: envs seeded from ``seed``, local trajectory ids from ``traj_base``.

        ``spec`` is the :class:`ActorSpec` or ``[ObjectRef]`` of it (fetched here, once per node).
        """
        self.close()
        if isinstance(spec, list):
            import ray

            spec = ray.get(spec[0])
        assert isinstance(spec, ActorSpec)
        self.spec = spec
        with warnings.catch_warnings():  # the parent warns about rounding, once, for all actors
            warnings.filterwarnings("ignore", message=r"frames_per_batch=\d+ is not a multiple")
            self.collector = spec.collector_class(
                spec.create_env_fn,
                spec.policy,
                frames_per_batch=spec.frames_per_batch,
                total_frames=-1,
                seed=seed,  # env i of this actor: seed + i at its first reset
                return_same_td=True,  # relabelling below makes the (shallow) copy
                **dict(spec.collector_kwargs),
            )
        self._batches = iter(self.collector)
        self._traj_base = self._next_traj = traj_base
        self._version, self._by_local, self._weights = 0, [0], {}
        self._pull(weights, version)
        return ActorInfo(
            num_envs=int(getattr(self.collector, "num_envs")),  # noqa: B009 (both classes have it)
            frames_per_batch=self.collector.frames_per_batch,
            pid=os.getpid(),
            hostname=socket.gethostname(),
        )

    def _built(self) -> BaseCollector:
        if self.collector is None:
            raise RuntimeError(f"actor {self.actor_idx} has no collector: setup() was not called")
        return self.collector

    # -- collection --------------------------------------------------------------------------
    def collect(self, weights: WeightBox, version: int) -> tuple[Packed | None, ActorReport]:
        """Collect one batch with the newest weights; return it relabelled and packed for the wire
        (see :func:`~rlcollect.distributed._wire.unpack`), or write it to the sink and return ``None``."""
        collector = self._built()
        self._pull(weights, version)
        assert self._batches is not None
        batch = next(self._batches)
        if batch is None:
            raise RuntimeError("the actor's collector yielded no batch (is a replay_buffer set in it?)")
        out = self._relabel(batch)
        report = ActorReport(
            frames=out.numel(), policy_version=self._version, next_traj_id=self._next_traj,
            stats=collector.stats(),
        )
        assert self.spec is not None
        if self.spec.sink is not None:
            import ray

            ray.get(self.spec.sink.extend.remote(flatten_batch(out)))
            return None, report
        return pack(out), report

    def _relabel(self, batch: TensorDictBase) -> TensorDictBase:
        """A shallow copy with ids in the parent's space and versions in the parent's numbering."""
        out = batch.clone(False)
        local = batch.get(("collector", "traj_ids")) + self._traj_base  # [N, T]
        self._next_traj = max(self._next_traj, int(local.max()) + 1)
        assert self.spec is not None
        out.set(("collector", "traj_ids"), local * self.spec.num_actors + self.actor_idx)
        if self._by_local != list(range(len(self._by_local))):
            table = torch.tensor(self._by_local, dtype=torch.int64)
            out.set("policy_version", table[batch.get("policy_version")])
        return out

    # -- weights -----------------------------------------------------------------------------
    def _pull(self, weights: WeightBox, version: int) -> None:
        """Apply the models written after the last pull, oldest first ("policy" first on ties)."""
        if weights is None or version <= self._version:
            return
        import ray

        entries = weights[0]
        changed = sorted(
            (written, model_id != "policy", model_id)
            for model_id, (_, written) in entries.items()
            if written > self._version
        )
        refs = list({entries[model_id][0] for _, _, model_id in changed})  # one object per update
        updates = dict(zip(refs, ray.get(refs), strict=True))
        fresh = {model_id: updates[entries[model_id][0]][model_id] for _, _, model_id in changed}
        if fresh:
            self._built().update_policy_weights_(weights_dict=fresh)
            self._by_local.append(version)
            self._weights.update(fresh)
        self._version = version

    # -- control -----------------------------------------------------------------------------
    def set_seed(self, seed: int) -> int:
        """Seed the collector's envs from ``seed`` (it adds its own env indices)."""
        return self._built().set_seed(seed)

    def enable_profile(self, config: ProfileConfig) -> None:
        """Profile this actor's collector (before its first batch)."""
        fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        self._built().enable_profile(**fields)

    def state_dict(self) -> dict[str, Any]:
        """The collector's state with this actor's id base, version table and newest weights."""
        return {
            "collector": self._built().state_dict(),
            "traj_base": self._traj_base,
            "next_traj_id": self._next_traj,
            "version": self._version,
            "by_local": list(self._by_local),
            "weights": {k: v.clone() for k, v in self._weights.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; the next batches continue the saved run."""
        self._built().load_state_dict(state["collector"])
        self._traj_base, self._next_traj = int(state["traj_base"]), int(state["next_traj_id"])
        self._version, self._by_local = int(state["version"]), list(state["by_local"])
        self._weights = dict(state["weights"])

    def stats(self) -> CollectorStats:
        """The collector's counters since it was (re)built."""
        return self._built().stats()

    def close(self) -> None:
        """Shut the collector down (its envs, and its worker processes if it has any)."""
        collector, self.collector, self._batches = self.collector, None, None
        if collector is not None:
            collector.shutdown()

