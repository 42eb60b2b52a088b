"""RayCollector: the workers are Ray actors, on this machine or across a cluster."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from typing_extensions import Unpack  # typing has it from Python 3.11

from rlcollect.collectors.arguments import SharedArguments, argument_names, check_accepted, named_as
from rlcollect.collectors.checks import check_int, check_seconds
from rlcollect.collectors.collector import Collector
from rlcollect.collectors.multi import MultiSyncCollector
from rlcollect.collectors.nested import nested_spec
from rlcollect.collectors.options import CollectorOptions
from rlcollect.collectors.pooled import PooledCollector
from rlcollect.envs.factory import EnvSource
from rlcollect.rollout.engine import RolloutSpec
from rlcollect.workers.ray_transport import RayTransport

__all__ = ["RayCollector"]


def _actor_arguments(collector_class: Any, collector_kwargs: Any, nested: bool) -> dict[str, Any]:
    """``collector_kwargs`` checked: the arguments of each actor's ``collector_class``."""
    if not (nested or isinstance(collector_class, type) and issubclass(collector_class, Collector)):
        raise TypeError(f"collector_class must be Collector or MultiSyncCollector (or a subclass), "
                        f"got {collector_class!r}")
    if collector_kwargs is not None and not isinstance(collector_kwargs, Mapping):
        raise TypeError(f"collector_kwargs must be a dict, got {type(collector_kwargs).__name__}")
    kwargs = dict(collector_kwargs or {})
    other_class = {"num_envs"} if nested else {"num_workers", "num_envs_per_worker"}
    reserved = sorted(set(kwargs) & (set(_RESERVED) | other_class))
    if reserved:
        raise ValueError(f"collector_kwargs must not set {reserved}: give them to RayCollector itself")
    unknown = sorted(set(kwargs) - set(CollectorOptions.__dataclass_fields__) - {"num_envs"})
    if unknown:
        raise TypeError(f"collector_kwargs has unknown arguments {unknown}")
    return kwargs

# RayCollector's own arguments: collector_kwargs may not set them
_RESERVED = ("frames_per_batch", "total_frames", "seed", "replay_buffer", "return_same_td", "split_trajs",
             "trajs_per_batch", "traj_format", "prefetch", "max_worker_restarts", "timeout", "start_timeout",
             "start_method", "postproc", "post_collect_hook",
             "storing_device", "weight_sync_schemes", "weight_updater", "check", "obs_dtype", "info_keys")


class RayCollector(PooledCollector):
    """Collects in ``num_collectors`` Ray actors, each stepping its envs as a worker process does.

    The actors are the same workers as :class:`~rlcollect.MultiSyncCollector`'s processes, reached
    through Ray: one batch per actor crosses the network per iteration (as numpy arrays), weights
    cross it once per update (one ``ray.put``, pulled by each actor when its version moved). Seeds,
    trajectory ids (actor ``a`` of ``A`` hands out ``local * A + a``), versions, restarts and
    ``state_dict`` work exactly as for the multi-process collectors.

    Args:
        create_env_fn: env source for every actor (an env id or a picklable factory).
        policy: as for :class:`~rlcollect.Collector`; pickled into each actor's setup.
        num_collectors: Ray actors ``A``.
        collector_class: :class:`~rlcollect.Collector` (default: each actor steps its ``num_envs``
            envs in its own process) or :class:`~rlcollect.MultiSyncCollector` (each actor runs
            ``num_workers`` worker processes of ``num_envs_per_worker`` envs on its node: one actor
            per node; ``remote_config`` then asks for ``num_workers`` CPUs by default).
        collector_kwargs: per-actor arguments of ``collector_class`` (``num_envs``, or
            ``num_workers`` and ``num_envs_per_worker``; ``models``, ``policy_factory``,
            ``max_frames_per_traj``, ``init_random_frames``, ...); not RayCollector's own ones.
        policy_factory: builds the policy in each actor (the same as in ``collector_kwargs``, at
            the top level as TorchRL's ``RayCollector`` takes it; with ``policy`` as well,
            ``policy`` is where the actors' weights come from).
        frames_per_batch: frames per yielded batch: all actors' (sync) or one actor's (async);
            rounded up to whole steps of every env, with a warning.
        total_frames: frames to collect before iteration stops, in whole batches (20 with
            8-frame batches: 3 batches, 24 frames, as in TorchRL); -1 for no end.
        sync: ``True``: a batch is every actor's rows, ``[A * M, T]``; ``False``: each batch is
            whichever actor's ``[M, T]`` is ready first, and actors never wait.
        prefetch: (sync) actors collect the next batch while the current one is used.
        ray_init_config: ``ray.init`` arguments when Ray is not initialised yet; with an
            ``"address"`` (or ``RAY_ADDRESS`` set) it connects to that cluster, else it starts a
            local one. Ray is shut down at :meth:`shutdown` only if this collector initialised it.
        remote_config: Ray actor options (``num_cpus`` default 1, ``num_gpus``, ``resources``,
            ``scheduling_strategy`` (``"SPREAD"``, a node affinity, a placement group's bundle),
            ``runtime_env``, ...): one dict for every actor, or a list of one dict per actor. A
            replacement actor goes back to its predecessor's node while Ray counts that node
            alive, unless its options place it.
        max_actor_restarts: restarts allowed per actor (it died, its env raised, or it hung for
            ``timeout``); past them the original error is raised here.
        timeout: seconds an actor may take to collect one batch before it is deemed hung.
        start_timeout: seconds an actor may take to start or restart (placement, imports, envs);
            a replacement not ready by then counts as one more failure of the actor. Other actors
            keep delivering while one restarts (``sync=False``).
        health_timeout: seconds an actor may leave a health ping unanswered (pings run beside its
            batches, every half second) before it is deemed silent, its process or node stopped,
            and restarted: found long before ``timeout``. ``None`` turns the check off. It must
            exceed the longest time one env call holds Python's GIL.
        spare_actors: actors kept started and idle once every actor is up (each holds the
            resources it asks for): a failed actor's replacement takes one and starts in the time
            its envs take to build, not an interpreter's start and imports (seconds); a new spare
            then starts. Only where every actor asks for the same ``remote_config``.
        **arguments: the :class:`~rlcollect.collectors.arguments.SharedArguments`: ``seed``,
            ``check`` and ``obs_dtype`` apply in each actor; ``postproc``, ``split_trajs``,
            ``return_same_td``, ``storing_device``, ``post_collect_hook``, ``trajs_per_batch`` and
            ``traj_format`` in this process. ``replay_buffer`` may be a Ray actor with ``extend``
            (the actors write to it themselves, only a small report comes back);
            ``weight_sync_schemes`` are :class:`~rlcollect.weights.RayWeightSyncScheme` (default)
            or ``NoWeightSyncScheme``.

    The env is built once in this process to learn its spaces and check the policy; the actors
    build their own. With ``policy_factory`` and no ``policy`` (one process per actor), actor 0
    builds it instead, at construction: the factory runs in the actors only (on the nodes and
    devices their ``remote_config`` asks for).

    Raises:
        ImportError: Ray is not installed (``pip install rlcollect[ray]``).
        ValueError, TypeError: a bad argument (named in the message), at construction.

    Examples:
        >>> from rlcollect import RayCollector
        >>> with RayCollector("CartPole-v1", num_collectors=2, collector_kwargs={"num_envs": 4},
        ...                   frames_per_batch=800, total_frames=1600, seed=0,
        ...                   ray_init_config={"num_cpus": 2}) as collector:  # doctest: +SKIP
        ...     for batch in collector:
        ...         print(batch.shape, batch["policy_version"].max().item())
        ...         collector.update_policy_weights_()
        torch.Size([8, 100]) 0
        torch.Size([8, 100]) 1
    """

    #: The keyword arguments the constructor takes besides those it names.
    accepted_arguments: ClassVar[frozenset[str]] = argument_names(SharedArguments)
    _worker_probes = True  # an actor answers probe_in_worker's two-phase start

    def __init__(
        self,
        create_env_fn: EnvSource,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        num_collectors: int,
        collector_class: type[Collector] = Collector,
        collector_kwargs: Mapping[str, Any] | None = None,
        policy_factory: Callable[..., Any] | None = None,
        sync: bool = True,
        prefetch: bool = False,
        ray_init_config: Mapping[str, Any] | None = None,
        remote_config: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        max_actor_restarts: int = 3,
        timeout: float = 120.0,
        start_timeout: float = 120.0,
        health_timeout: float | None = 10.0,
        spare_actors: int = 0,
        **arguments: Unpack[SharedArguments],
    ) -> None:
        check_accepted(type(self), arguments)
        nested = isinstance(collector_class, type) and issubclass(collector_class, MultiSyncCollector)
        inner = _actor_arguments(collector_class, collector_kwargs, nested)
        if policy_factory is not None:
            if inner.get("policy_factory") is not None:
                raise ValueError("policy_factory was given twice: as RayCollector's argument and in "
                                 "collector_kwargs; give it once")
            inner["policy_factory"] = policy_factory
        if ray_init_config is not None and not isinstance(ray_init_config, Mapping):
            raise TypeError(f"ray_init_config must be a dict, got {type(ray_init_config).__name__}")
        configs = _remote_configs(remote_config)
        inner_names = {"num_workers": "nested_workers"} if nested else {"num_envs": "num_envs_per_worker"}
        inner = {inner_names.get(name, name): value for name, value in inner.items()}
        renamed = {"num_workers": "num_collectors", "max_worker_restarts": "max_actor_restarts",
                   **{option: argument for argument, option in inner_names.items()}}
        with named_as(renamed):
            options = CollectorOptions(
                create_env_fn=create_env_fn, policy=policy, frames_per_batch=frames_per_batch,
                total_frames=total_frames, num_workers=num_collectors, sync=sync, prefetch=prefetch,
                max_worker_restarts=max_actor_restarts, timeout=timeout, start_timeout=start_timeout,
                **inner, **arguments)
        self.num_collectors = options.num_workers
        if len(configs) not in (1, options.num_workers):
            raise ValueError(f"remote_config lists {len(configs)} dicts for num_collectors="
                             f"{options.num_workers}: give one per actor, or one dict for all of them")
        remote = [{"num_cpus": options.nested_workers, **configs[a % len(configs)]}
                  for a in range(options.num_workers)]
        health = None if health_timeout is None else check_seconds("health_timeout", health_timeout)
        spares = check_int("spare_actors", spare_actors, minimum=0, allowed="an int >= 0")
        self._build(options, lambda: RayTransport(dict(ray_init_config or {}), remote, health_timeout=health,
                                                  spare_actors=spares))

    def _worker_spec(self, worker: int) -> RolloutSpec:
        """As the pool's, with a :class:`NestedRollout` engine when each actor runs processes."""
        return nested_spec(super()._worker_spec(worker), self.options.nested_workers, MultiSyncCollector)

    @property
    def actor_pids(self) -> list[int]:
        """Process ids of the actors (their current processes, after restarts)."""
        return [pid for pid in self.worker_pids if pid is not None]

    @property
    def actor_hosts(self) -> list[str]:
        """Host names of the actors' nodes."""
        return [info.hostname for info in self._pool.infos if info is not None]

    @property
    def actor_nodes(self) -> list[str]:
        """Ray node ids of the actors (hosts of a cluster may share a name); they change when a
        replacement starts on another node."""
        return [info.node_id for info in self._pool.infos if info is not None]

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, in actor order."""
        transport = self._pool.transport
        assert isinstance(transport, RayTransport)
        return [transport.actors[a] for a in sorted(transport.actors)]

    def __repr__(self) -> str:
        mode = "sync" if self.sync else "async"
        return (f"RayCollector(num_collectors={self.num_collectors}, {mode}, "
                f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames})")


def _remote_configs(remote_config: Any) -> list[Mapping[str, Any]]:
    """``remote_config`` as a list of Ray actor options: one dict (for every actor) or one per actor."""
    if remote_config is None:
        return [{}]
    entries = [remote_config] if isinstance(remote_config, Mapping) else remote_config
    listed = isinstance(entries, (list, tuple)) and bool(entries)
    if not listed or not all(isinstance(entry, Mapping) for entry in entries):
        raise TypeError("remote_config must be a dict, or a list of dicts (one per actor), got "
                        f"{remote_config!r}")
    for entry in entries:
        clash = sorted({"max_restarts", "max_task_retries"} & set(entry))
        if clash:
            raise ValueError(f"remote_config must not set {clash}: use max_actor_restarts")
    return list(entries)
