"""RayCollector: one of our collectors in each Ray actor, on this machine or across a cluster.

Each actor builds a :class:`~rlcollect.Collector` (or a :class:`~rlcollect.MultiSyncCollector`) and
answers one ``collect`` request with one batch. Per iteration one batch per actor crosses the
network; weights cross it once per update (one ``ray.put``, fetched by each node once). Actors
pull weights lazily: every request names the newest weights' ObjectRef and version, and the
actor fetches them only when the version moved.

Layout, seeds and ids follow the batch contract: in sync mode a batch is every actor's
``[M_a, T]`` rows concatenated in actor order; env ``i`` counted over all actors is seeded with
``seed + i``; trajectory ids are unique over all actors (actor ``a`` of ``A`` hands out
``local * A + a``) and never reused, restarts included.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.collectors._validate import check_device, check_frames, check_positive_int
from rlcollect.collectors.base import BaseCollector
from rlcollect.collectors.collector import Collector
from rlcollect.collectors.delivery import make_delivery
from rlcollect.collectors.multi_sync import MultiSyncCollector
from rlcollect.collectors.stats import CollectorStats
from rlcollect.distributed._bookkeeping import teardown, total_stats
from rlcollect.distributed._ray import connect, import_ray
from rlcollect.distributed._wire import Packed, unpack
from rlcollect.distributed.actor import ActorInfo, ActorSpec, CollectorClass
from rlcollect.distributed.actor_pool import ActorPool
from rlcollect.envs.factory import EnvSource
from rlcollect.weights.forms import as_weights
from rlcollect.workers.worker import describe_unpicklable

__all__ = ["RayCollector"]

# set by RayCollector itself for every actor; the user gives them to RayCollector
_RESERVED = ("frames_per_batch", "total_frames", "seed", "replay_buffer", "return_same_td",
             "split_trajs", "trajs_per_batch", "traj_format")
_GRACE = 5.0  # seconds the actors get to close their envs before they are killed


def _is_actor_handle(sink: Any) -> bool:
    """Whether ``sink`` is a Ray actor (or anything else whose ``extend`` has a ``.remote``)."""
    return callable(getattr(getattr(sink, "extend", None), "remote", None))


def _check_keys(model_id: str, weights: TensorDictBase, module: torch.nn.Module) -> None:
    """Raise ``KeyError`` if ``weights`` hold a key that ``module`` lacks (as the actors would)."""
    known = set(TensorDict.from_module(module).keys(True, True))
    unknown = set(weights.keys(True, True)) - known
    if unknown:
        raise KeyError(f"weights for {model_id!r} hold {sorted(map(str, unknown))} which the module does "
                       f"not have (it has {sorted(map(str, known))})")


class RayCollector(BaseCollector):
    """Collects in ``num_collectors`` Ray actors, each running one of our collectors.

    Args:
        create_env_fn: env source for every actor (an env id or a picklable factory).
        policy: as for :class:`~rlcollect.Collector`; pickled once into the object store.
        num_collectors: Ray actors ``A``.
        collector_class: what each actor runs: :class:`~rlcollect.Collector` (default) or
            :class:`~rlcollect.MultiSyncCollector` (worker processes inside each actor).
        collector_kwargs: more arguments of ``collector_class`` (``num_envs``,
            ``num_workers`` / ``num_envs_per_worker``, ``models``, ``init_random_frames`` per
            actor, ...); not the ones RayCollector sets itself (frames, seed, sink, regrouping).
        frames_per_batch: frames per yielded batch: all actors' (sync) or one actor's (async);
            rounded up to whole steps of every env, with a warning.
        total_frames: frames to collect before iteration stops; -1 for no end.
        sync: ``True``: a batch is every actor's rows, ``[sum of M_a, T]``; ``False``: each batch
            is whichever actor's ``[M_a, T]`` is ready first, and actors never wait.
        prefetch: (sync) actors collect the next batch while the current one is used (one
            version of policy lag, stamped in ``policy_version``).
        ray_init_config: ``ray.init`` arguments when Ray is not initialised yet; with an
            ``"address"`` (or ``RAY_ADDRESS`` set) it connects to that cluster, else it starts a
            local one. Ray is shut down at :meth:`shutdown` only if this collector initialised it.
        remote_config: Ray actor options (``num_cpus`` default 1, ``num_gpus``, ``resources``,
            ``runtime_env``, ...).
        max_actor_restarts: restarts allowed per actor (it died, its env raised, or it hung for
            ``timeout``); past them the original error is raised here.
        timeout: seconds an actor may take for one batch, or to come back after a restart.
        seed: env ``i`` over all actors is reset with ``seed + i`` (``None``: unseeded).
        replay_buffer: a Ray actor with ``extend`` (the actors write to it themselves, only
            a small report comes back) or any local object with ``extend`` (this process writes);
            iteration then yields ``None``; see :meth:`start`.
        postproc, split_trajs, storing_device, post_collect_hook, trajs_per_batch, traj_format:
            applied here to each batch, as for :class:`~rlcollect.Collector` (use
            ``collector_kwargs={"postproc": ...}`` to run a postproc in the actors instead).

    Raises:
        ImportError: Ray is not installed (``pip install rlcollect[ray]``).
        ValueError, TypeError: a bad argument (named in the message), at construction.

    Example:
        >>> from rlcollect.distributed import RayCollector
        >>> with RayCollector("CartPole-v1", num_collectors=2, collector_kwargs={"num_envs": 4},
        ...                   frames_per_batch=800, total_frames=1600, seed=0,
        ...                   ray_init_config={"num_cpus": 2}) as collector:  # doctest: +SKIP
        ...     for batch in collector:
        ...         print(batch.shape, batch["policy_version"].max().item())
        ...         collector.update_policy_weights_()
        torch.Size([8, 100]) 0
        torch.Size([8, 100]) 1
    """

    def __init__(
        self,
        create_env_fn: EnvSource,
        policy: Any = None,
        *,
        num_collectors: int,
        collector_class: CollectorClass = Collector,
        collector_kwargs: Mapping[str, Any] | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        sync: bool = True,
        prefetch: bool = False,
        ray_init_config: Mapping[str, Any] | None = None,
        remote_config: Mapping[str, Any] | None = None,
        max_actor_restarts: int = 3,
        timeout: float = 120.0,
        seed: int | None = None,
        replay_buffer: Any = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool = False,
        storing_device: Any = None,
        post_collect_hook: Callable[[TensorDictBase], None] | None = None,
        trajs_per_batch: int | None = None,
        traj_format: str | None = None,
    ) -> None:
        # -- arguments ----------------------------------------------------------------------
        self.num_collectors = num = check_positive_int("num_collectors", num_collectors)
        if not (isinstance(collector_class, type)
                and issubclass(collector_class, (Collector, MultiSyncCollector))):
            raise TypeError(f"collector_class must be Collector or MultiSyncCollector (or a subclass), "
                            f"got {collector_class!r}")
        if collector_kwargs is not None and not isinstance(collector_kwargs, Mapping):
            raise TypeError(f"collector_kwargs must be a dict, got {type(collector_kwargs).__name__}")
        kwargs = dict(collector_kwargs or {})
        reserved = sorted(set(kwargs) & set(_RESERVED))
        if reserved:
            raise ValueError(f"collector_kwargs must not set {reserved}: give them to RayCollector itself")
        self.requested_frames_per_batch = check_positive_int("frames_per_batch", frames_per_batch)
        self.total_frames = check_frames("total_frames", total_frames, allow_endless=True)
        self.sync, self.prefetch = bool(sync), bool(prefetch)
        if prefetch and not sync:
            raise ValueError("prefetch=True applies to sync=True only: async actors never wait anyway")
        if isinstance(max_actor_restarts, bool) or not isinstance(max_actor_restarts, int) \
                or max_actor_restarts < 0:
            raise ValueError(f"max_actor_restarts must be an int >= 0, got {max_actor_restarts!r}")
        self.max_actor_restarts = max_actor_restarts
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        options = dict(remote_config or {})
        clash = sorted({"max_restarts", "max_task_retries"} & set(options))
        if clash:
            raise ValueError(f"remote_config must not set {clash}: use max_actor_restarts")
        options.setdefault("num_cpus", 1)
        self._sink_remote = _is_actor_handle(replay_buffer)
        parent_side = {"postproc": postproc, "split_trajs": split_trajs, "storing_device": storing_device,
                       "post_collect_hook": post_collect_hook, "trajs_per_batch": trajs_per_batch}
        if self._sink_remote and any(parent_side.values()):
            given = [name for name, value in parent_side.items() if value]
            raise ValueError(f"with a Ray actor replay_buffer the actors write their batches, so {given} "
                             "cannot run here: pass postproc / post_collect_hook in collector_kwargs")
        self.replay_buffer = replay_buffer
        self._delivery = make_delivery(
            return_same_td=True,  # every batch is a fresh object already
            storing_device=check_device("storing_device", storing_device), split_trajs=split_trajs,
            postproc=postproc, post_collect_hook=post_collect_hook,
            replay_buffer=None if self._sink_remote else replay_buffer,
            trajs_per_batch=trajs_per_batch, traj_format=traj_format,
        )
        self._reference_models: dict[str, torch.nn.Module] = dict(kwargs.get("models") or {})
        if isinstance(policy, torch.nn.Module):
            self._reference_models["policy"] = policy
        self._model_ids = set(self._reference_models)
        if kwargs.get("policy_factory") is not None:
            self._model_ids.add("policy")
        describe_unpicklable({"create_env_fn": create_env_fn, "policy": policy,
                              **{f"collector_kwargs[{k!r}]": v for k, v in kwargs.items()}})
        spec = ActorSpec(
            create_env_fn, policy, collector_class, kwargs,
            frames_per_batch=-(self.requested_frames_per_batch // -num) if self.sync else frames_per_batch,
            num_actors=num, sink=replay_buffer if self._sink_remote else None,
        )

        self._frames = self._batches = self._last_lag = 0
        self._collector_class = collector_class
        self._started = self._closed = False

        # -- Ray and the actors -------------------------------------------------------------
        self._ray = ray = import_ray()
        self._owns_ray = connect(dict(ray_init_config or {}), num * math.ceil(options["num_cpus"]))
        try:
            self._pool = ActorPool(ray, spec, num_actors=num, options=options,
                                   max_restarts=max_actor_restarts, timeout=self.timeout, seed=seed)
        except BaseException:
            teardown(ray, [], self._owns_ray, 0.0)
            raise
        self._finalizer = weakref.finalize(self, teardown, ray, self._pool.actors, self._owns_ray, _GRACE)
        try:
            self._check_layout(self._pool.start())
        except BaseException:
            self.shutdown()
            raise

    def _check_layout(self, infos: list[ActorInfo]) -> None:
        self.num_envs_per_actor = [info.num_envs for info in infos]
        self.num_envs = sum(self.num_envs_per_actor)
        steps = {info.frames_per_batch // info.num_envs for info in infos}
        if self.sync and len(steps) > 1:
            raise ValueError(f"the actors collect {sorted(steps)} steps per batch: in sync mode every actor "
                             "must have the same number of envs")
        per_actor = [info.frames_per_batch for info in infos]
        self.frames_per_batch = sum(per_actor) if self.sync else max(per_actor)
        if self.frames_per_batch != self.requested_frames_per_batch:
            warnings.warn(
                f"frames_per_batch={self.requested_frames_per_batch} is not a multiple of the "
                f"{self.num_envs if self.sync else max(self.num_envs_per_actor)} envs per batch; "
                f"collecting {self.frames_per_batch} frames per batch",
                stacklevel=3,
            )

    def __enter__(self) -> RayCollector:
        return self

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, in actor order."""
        return self._pool.actors

    @property
    def actor_pids(self) -> list[int]:
        """Process ids of the actors (their current processes, after restarts)."""
        return list(self._pool.pids)

    @property
    def actor_hosts(self) -> list[str]:
        """Host names of the actors' nodes."""
        return list(self._pool.hosts)

    def _quiesce(self) -> None:
        self._pool.drain()  # batches under way finish (and are written); none is handed out

    # -- iteration ---------------------------------------------------------------------------
    def _more_wanted(self, frames_in_flight: int) -> bool:
        return self.total_frames < 0 or self._frames + frames_in_flight < self.total_frames

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the collector was shut down")

    def _start(self) -> None:
        self._check_open()
        if self._started:
            return
        self._started = True
        config = self._profile_config
        if config is not None:
            template = str(Path(str(config.save_path or "collector_profile_{worker_idx}.json")).absolute())
            nested = not issubclass(self._collector_class, Collector)  # the actors have workers too
            for actor in config.workers:
                path = template.replace("{worker_idx}", f"{actor}_{{worker_idx}}" if nested else str(actor))
                actor_config = dataclasses.replace(config, workers=[0], save_path=path)
                self._pool.ask("enable_profile", [(actor_config,)], [actor])

    def _take(self, actor: int) -> Packed | None:
        batch, report = self._pool.take(actor)
        counters = self._pool.counters[actor]
        counters.frames += report.frames
        counters.batches += 1
        counters.policy_version = report.policy_version
        self._frames += report.frames
        self._last_lag = self._pool.versions[actor] - report.policy_version
        return batch

    def iterator(self) -> Iterator[TensorDictBase | None]:
        self._start()
        return self._sync_batches() if self.sync else self._async_batches()

    def _sync_batches(self) -> Iterator[TensorDictBase | None]:
        pool, everyone = self._pool, set(range(self.num_collectors))
        if not pool.busy() and self._more_wanted(0):
            for actor in everyone:
                pool.dispatch(actor)
        while pool.busy():
            pool.wait(everyone, every=True)
            parts = [self._take(actor) for actor in range(self.num_collectors)]
            self._batches += 1
            if self.prefetch and self._more_wanted(0):
                for actor in everyone:
                    pool.dispatch(actor)
            if self._sink_remote:
                yield None
            else:
                yield from self._delivery.outputs(unpack(parts))  # type: ignore[arg-type]
            if not self.prefetch and self._more_wanted(0):  # the learner's new weights are used
                for actor in everyone:
                    pool.dispatch(actor)

    def _async_batches(self) -> Iterator[TensorDictBase | None]:
        pool = self._pool

        def in_flight() -> int:
            return len(pool.busy()) * self.frames_per_batch

        for actor in range(self.num_collectors):
            if actor not in pool.busy() and self._more_wanted(in_flight()):
                pool.dispatch(actor)
        while pool.busy():
            pool.wait(pool.busy(), every=False)
            actor = next(iter(pool.ready))
            batch = self._take(actor)
            self._batches += 1
            if self._more_wanted(in_flight()):
                pool.dispatch(actor)  # it collects its next batch while this one is used
            if batch is None:
                yield None
            else:
                yield from self._delivery.outputs(unpack([batch]))

    # -- weights -----------------------------------------------------------------------------
    def _update_weights(self, forms: dict[str, Any], worker_ids: list[int] | None) -> None:
        """One ``ray.put`` of ``{model_id: weights}``; the chosen actors pull it at their next batch."""
        self._check_open()
        unknown = sorted(set(forms) - self._model_ids)
        if unknown:
            raise KeyError(f"unknown model id(s) {unknown}; known: {sorted(self._model_ids)}")
        ids = list(range(self.num_collectors)) if worker_ids is None else list(worker_ids)
        bad = [a for a in ids if not (isinstance(a, int) and 0 <= a < self.num_collectors)]
        if bad:
            raise ValueError(f"worker_ids {bad} out of range for num_collectors={self.num_collectors}")
        weights = {}
        for model_id, source in forms.items():
            if source is None:
                if model_id not in self._reference_models:
                    raise ValueError(f"there is no {model_id!r} module in this process to pull weights from "
                                     "(the actors build it): pass the weights")
                source = self._reference_models[model_id]
            weights[model_id] = as_weights(source)
            reference = self._reference_models.get(model_id)
            if reference is not None:  # a mistake is cheaper here than in every actor
                _check_keys(model_id, weights[model_id], reference)
        self._pool.push_weights(self._ray.put(weights), weights, ids)

    # -- profiling, seeds, state, stats -----------------------------------------------------
    def enable_profile(self, **kwargs: Any) -> None:
        """Profile the first rollouts of the actors in ``workers`` (actor indices, default ``[0]``).

        Arguments as :meth:`BaseCollector.enable_profile`. Each chosen actor writes its Chrome
        trace on its own node at ``save_path`` (made absolute here; ``{worker_idx}`` becomes the
        actor index, followed by ``_{worker}`` when the actors run a MultiSyncCollector).

        Raises:
            ValueError: an actor index out of range.
        """
        super().enable_profile(**kwargs)
        assert self._profile_config is not None
        bad = [w for w in self._profile_config.workers if not 0 <= w < self.num_collectors]
        if bad:
            self._profile_config = None
            raise ValueError(f"workers {bad} out of range for num_collectors={self.num_collectors}")

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Reset env ``i`` (over all actors) now with ``seed + i``.

        Returns:
            ``seed`` plus the number of envs of all actors.
        """
        self._check_open()
        self._pool.drain()
        self._pool.ask("set_seed", [(seed + offset,) for offset in self._pool.env_offsets])
        self._pool.seed = seed  # restarted actors take their seeds from it
        return seed + self.num_envs

    def state_dict(self) -> dict[str, Any]:
        """Every actor's state (after the batches in flight complete) and this side's counters."""
        self._check_open()
        pool = self._pool
        pool.drain()
        return {
            "frames": self._frames,
            "batches": self._batches,
            "versions": list(pool.versions),
            "next_traj_id": list(pool.next_traj),
            "actor_counts": [(c.frames, c.batches) for c in pool.counters],
            "actors": pool.ask("state_dict", [()] * self.num_collectors),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore every actor and the counters from :meth:`state_dict` (same number of actors)."""
        self._check_open()
        states = list(state_dict["actors"])
        if len(states) != self.num_collectors:
            raise ValueError(
                f"the state holds {len(states)} actors, this collector has {self.num_collectors}")
        pool = self._pool
        pool.drain()
        pool.ready.clear()
        pool.ask("load_state_dict", [(state,) for state in states])
        self._frames, self._batches = int(state_dict["frames"]), int(state_dict["batches"])
        pool.versions = [int(v) for v in state_dict["versions"]]
        pool.next_traj = [int(n) for n in state_dict["next_traj_id"]]
        for counters, (frames, batches) in zip(pool.counters, state_dict["actor_counts"], strict=True):
            counters.frames, counters.batches = int(frames), int(batches)
        for actor, state in enumerate(states):  # what a restarted actor must pull again
            ref = self._ray.put(state["weights"]) if state["weights"] else None
            pool.weight_refs[actor] = {k: (ref, int(state["version"])) for k in state["weights"]}

    def stats(self) -> CollectorStats:
        """Totals, with each actor's counters (and restarts) in ``workers``."""
        versions = self._pool.versions
        actors = [
            counters.stats(versions[a], versions[a] - counters.policy_version)
            for a, counters in enumerate(self._pool.counters)
        ]
        return total_stats(actors, frames=self._frames, batches=self._batches, policy_lag=self._last_lag)

    # -- shutdown ----------------------------------------------------------------------------
    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        """Stop background collection, close and kill every actor, stop Ray if this started it; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._stop_background(timeout)
        finally:
            self._finalizer.detach()
            self._pool.shutdown(_GRACE if timeout is None else timeout, close_env)
            teardown(self._ray, [], self._owns_ray, 0.0)  # stops Ray if this collector started it

    def __repr__(self) -> str:
        mode = "sync" if self.sync else "async"
        return (f"RayCollector(num_collectors={self.num_collectors}, {mode}, "
                f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames})")
