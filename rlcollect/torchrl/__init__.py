"""TorchRL 0.14's collector names on rlcollect's engine: change one import line to switch.

Code written against TorchRL imports its collectors from ``torchrl.collectors``; importing the same
names from here runs rlcollect's collectors instead:

.. code-block:: python

    # from torchrl.collectors import Collector, MultiSyncCollector
    from rlcollect.torchrl import Collector, MultiSyncCollector

What this module gives today: the names (``Collector`` with ``num_collectors`` / ``backend``,
``MultiCollector(sync=...)``, ``AsyncCollector``), and the legacy aliases TorchRL still accepts
(``SyncDataCollector``, ``MultiSyncDataCollector``, ``MultiaSyncDataCollector``,
``aSyncDataCollector``, ``DataCollectorBase``), bound to rlcollect's collectors with their own
arguments and TorchRL's (:data:`TORCHRL_ARGUMENTS`), and TorchRL's
batch layout by default (``layout="torchrl"``, see :mod:`rlcollect.data.torchrl_layout`: root
``done`` / ``terminated`` / ``truncated``, ``[T]`` batches for one unbatched env,
``policy_version`` only with ``track_policy_version=True``). TorchRL's own collector tests, vendored
in ``tests/torchrl_suite/`` with this one import changed, measure how far that goes.

Examples:
    >>> from torchrl.envs import GymEnv
    >>> from rlcollect.torchrl import Collector, SyncDataCollector
    >>> SyncDataCollector is Collector
    True
    >>> with Collector(GymEnv("CartPole-v1"), frames_per_batch=16, total_frames=16, seed=0) as collector:
    ...     print([batch.batch_size for batch in collector], collector.get_policy_version())
    [torch.Size([16])] None
"""

from __future__ import annotations

import abc
import importlib
import os
import sys
import warnings
from typing import Any

import torch

from rlcollect import collectors
from rlcollect.collectors import AsyncBatchedCollector, BaseCollector, CollectorStats, ProfileConfig
from rlcollect.collectors.options import check_flag, check_int
from rlcollect.collectors.pooled import PooledCollector
from rlcollect.data.formats import TorchRLLayout
from rlcollect.torchrl.arguments import idle_seconds, none_means_default
from rlcollect.torchrl.translate import TORCHRL_ARGUMENTS, take_torchrl_arguments  # noqa: F401 (documented)
from rlcollect.weights import WeightUpdaterBase

#: The core option only the collectors here take (a TorchRL env's policy transforms).
_CORE_OPTIONS = frozenset({"auto_register_policy_transforms"})


def _torchrl_init(collector: Any, cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Build ``collector`` as ``cls`` with TorchRL's layout by default and TorchRL's own arguments.

    ``None`` means the default for every argument whose default is not ``None``, as in TorchRL
    (whose trainers pass ``None`` for each argument they leave unset)."""
    none_means_default(cls, kwargs)
    translation = take_torchrl_arguments(kwargs)
    if kwargs.get("trajs_per_batch") is not None and kwargs.get("traj_format") is None \
            and kwargs.get("replay_buffer") is None:
        warnings.warn("trajs_per_batch without traj_format yields 'padded' batches ([n, max_len] with a "
                      "mask); as in TorchRL, the default will change to 'cat' in torchrl v0.16: pass "
                      "traj_format='padded' or 'cat'", FutureWarning, stacklevel=4)
    layout = kwargs.setdefault("layout", "torchrl")
    collector._torchrl_layout = None
    if layout == "torchrl":  # an object of this collector's own: _exclude_private_keys switches it
        kwargs["layout"] = collector._torchrl_layout = TorchRLLayout()
    kwargs.update(translation.core_arguments())
    idle = os.environ.get("MAX_IDLE_COUNT")
    if idle is not None and cls is not collectors.Collector and "timeout" not in kwargs:
        kwargs["timeout"] = idle_seconds(idle)
    if translation.num_threads is not None:  # TorchRL's: the torch threads of this process
        torch.set_num_threads(translation.num_threads)
    cls.__init__(collector, *args, **kwargs)
    translation.apply(collector)


class TorchRLStats(dict[str, Any]):
    """What ``stats()`` returns in this module: TorchRL's snapshot, a JSON-serializable dict
    (``frames``, ``batches``, ``total_frames``, ``completed``, ``requested_frames_per_batch``,
    ``policy_version`` when tracked; ``workers``, ``workers_alive``, ``worker_frames`` and
    ``worker_<i>/<counter>`` for the collectors with workers), whose attributes are rlcollect's
    :class:`~rlcollect.collectors.CollectorStats` (``stats().fps``, ``stats().mean_return``).

    Examples:
        >>> stats = TorchRLStats({"frames": 16}, CollectorStats(frames=16, fps=100.0))
        >>> stats["frames"], stats.fps
        (16, 100.0)
    """

    def __init__(self, entries: dict[str, Any], native: CollectorStats) -> None:
        super().__init__(entries)
        self.native = native

    def __getattr__(self, name: str) -> Any:
        if name == "native":  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.native, name)


_WORKER_VIEWS = ("aggregate", "per_worker", "both")


def _torchrl_stats(collector: Any, native: CollectorStats, workers: str | None) -> TorchRLStats:
    """TorchRL's ``stats()`` entries from rlcollect's counters; ``workers`` is ``None`` for a
    collector without workers, else TorchRL's view: ``"aggregate"``, ``"per_worker"``, ``"both"``."""
    if workers is not None and workers not in _WORKER_VIEWS:
        raise ValueError(f"workers must be one of 'aggregate', 'per_worker' or 'both', got {workers!r}")
    entries: dict[str, Any] = {}
    if workers in (None, "aggregate", "both"):
        entries.update(frames=native.frames, batches=native.batches)
        if collector.total_frames >= 0:
            entries["total_frames"] = collector.total_frames
            entries["completed"] = native.frames >= collector.total_frames
        entries["requested_frames_per_batch"] = collector.requested_frames_per_batch
        if collector.options.track_policy_version:
            entries["policy_version"] = native.policy_version
    if workers is not None:
        # a worker that dies is restarted or fails the collector at once: all are alive while it runs
        entries.update(workers=len(native.workers),
                       workers_alive=0 if collector._pool.closed else len(native.workers),
                       worker_frames=sum(worker.frames for worker in native.workers))
        if workers in ("per_worker", "both"):
            for i, worker in enumerate(native.workers):
                for name in ("frames", "fps", "episodes", "restarts", "policy_version"):
                    entries[f"worker_{i}/{name}"] = getattr(worker, name)
    return TorchRLStats(entries, native)


def _worker_stats(self: Any, workers: str = "aggregate", *, timeout: float | None = None) -> TorchRLStats:
    """TorchRL's snapshot (:class:`TorchRLStats`) of a collector with workers; ``timeout`` is
    accepted (nothing is waited for: the counters are this process's)."""
    return _torchrl_stats(self, PooledCollector.stats(self), workers)


class _PrivateKeys:
    """TorchRL's attributes: the ``_exclude_private_keys`` switch (batches in TorchRL's layout
    leave out the keys with a part that starts with ``_``, a policy's private state, unless it is
    set to False) and the ``interruptor``."""

    _torchrl_layout: TorchRLLayout | None = None

    @property
    def interruptor(self) -> None:
        """TorchRL's interruptor object: rlcollect builds none (``preemptive_threshold`` is a flag
        per batch slot the workers read at each step)."""
        return None

    @property
    def _exclude_private_keys(self) -> bool:
        return self._torchrl_layout is None or not self._torchrl_layout.private_keys

    @_exclude_private_keys.setter
    def _exclude_private_keys(self, value: bool) -> None:
        if self._torchrl_layout is not None:
            self._torchrl_layout.private_keys = not value


def _worker_state_dict(self: Any) -> dict[str, Any]:
    """rlcollect's state, whose ``"workers"`` list TorchRL's layout also names ``"worker0"``,
    ``"worker1"``, ... (the same objects: each worker's ``"policy_version"`` and rollout state)."""
    state: dict[str, Any] = PooledCollector.state_dict(self)
    state.update({f"worker{index}": worker for index, worker in enumerate(state["workers"])})
    return state


#: ``Collector(backend=...)``: this process, worker processes, Ray actors (rlcollect's collectors),
#: or TorchRL's own RPC / torch.distributed / submitit collectors (see :func:`_dispatch`).
BACKENDS = ("direct", "process", "ray", "rpc", "distributed", "submitit")
_ALIASES = {"multiprocessing": "process", "threading": "thread"}
#: What ``backend_options`` may not hold: the selectors.
_RESERVED = ("backend", "backend_options", "num_collectors", "num_workers", "sync")
#: The backends handed to TorchRL's collectors: (module, class).
_TORCHRL_BACKENDS = {"rpc": ("torchrl.collectors.distributed.rpc", "RPCCollector"),
                     "distributed": ("torchrl.collectors.distributed.generic", "DistributedCollector"),
                     "submitit": ("torchrl.collectors.distributed.generic", "DistributedCollector")}


def _context_backend() -> str | None:
    """The backend an enclosing ``torchrl.service_backend(...)`` block sets, if TorchRL is loaded."""
    backends = sys.modules.get("torchrl._comm.backends")
    getter = getattr(backends, "_get_service_backend", None)
    return None if getter is None else getter()


def _dispatch(args: tuple[Any, ...], kwargs: dict[str, Any], backend: str | None,
              backend_options: dict[str, Any] | None, num_collectors: int | None,
              sync: bool | None) -> tuple[tuple[Any, ...], dict[str, Any]] | Any:
    """TorchRL 0.14's ``Collector(...)`` selection, its checks and messages: the arguments for a
    direct :class:`Collector` (a pair), or the collector the backend builds."""
    if len(args) > 2:
        raise TypeError("Collector accepts at most create_env_fn and policy positionally.")
    if num_collectors is not None:
        if isinstance(num_collectors, bool) or not isinstance(num_collectors, int):
            raise TypeError(f"num_collectors must be a positive integer, got {num_collectors!r}.")
        if num_collectors < 1:
            raise ValueError(f"num_collectors must be a positive integer, got {num_collectors!r}.")
    context = _context_backend() if backend is None else None
    chosen = backend or context or ("process" if num_collectors is not None else "direct")
    chosen = _ALIASES.get(chosen, chosen)
    if chosen not in BACKENDS:
        where = " (selected by an enclosing torchrl.service_backend context.)" if context else ""
        raise ValueError(f"Collector does not support backend={chosen!r}. Expected one of "
                         f"{list(BACKENDS)}{where}")
    options = dict(backend_options or {})
    reserved = sorted(set(options) & set(_RESERVED))
    if reserved:
        raise ValueError(f"backend_options contains reserved selector keys: {reserved}.")
    duplicates = sorted(set(options) & (set(kwargs) | set(("create_env_fn", "policy")[:len(args)])))
    if duplicates:
        raise ValueError(f"Backend options duplicate top-level collector arguments: {duplicates}.")
    env_fn = args[0] if args else kwargs.pop("create_env_fn", None)
    rest = args[1:]
    listed = isinstance(env_fn, (list, tuple))
    if chosen == "direct":
        if num_collectors not in (None, 1):
            raise ValueError("backend='direct' supports at most one collector.")
        if sync is not None:
            raise ValueError("sync is only valid for non-direct collectors.")
        if options:
            raise ValueError("backend_options are only valid for non-direct collectors.")
        if listed:
            if len(env_fn) != 1:
                raise ValueError("backend='direct' requires exactly one environment constructor, "
                                 f"got {len(env_fn)}.")
            env_fn = env_fn[0]
        return (env_fn, *rest), kwargs
    if sync is not None:
        check_flag("sync", sync)
    if listed:
        if not env_fn:
            raise ValueError("create_env_fn must contain at least one environment.")
        if num_collectors is not None and num_collectors != len(env_fn):
            raise ValueError("num_collectors does not match the number of environment constructors: "
                             f"{num_collectors} != {len(env_fn)}.")
        env_fns = list(env_fn)
    else:
        env_fns = [env_fn] * (num_collectors or 1)
    kwargs.update(options)
    sync = bool(sync)
    if chosen == "ray":
        return RayCollector(env_fns[0] if not listed else env_fns, *rest, num_collectors=len(env_fns),
                            sync=sync, **kwargs)
    if chosen == "process":
        return (MultiSyncCollector if sync else MultiAsyncCollector)(env_fns, *rest, **kwargs)
    if chosen == "submitit" and kwargs.setdefault("launcher", "submitit") != "submitit":
        raise ValueError(f"backend='submitit' requires launcher='submitit', got {kwargs['launcher']!r}.")
    module, name = _TORCHRL_BACKENDS[chosen]
    try:
        target = getattr(importlib.import_module(module), name)
    except ImportError as error:
        raise ImportError(f"backend={chosen!r} runs TorchRL's own {name}: install TorchRL "
                          f"(pip install 'rlcollect[torchrl]'); {error}") from error
    return target(env_fns, *rest, sync=sync, **kwargs)


class _CollectorType(abc.ABCMeta):
    """``Collector(..., backend=..., num_collectors=..., sync=...)`` selects the collector as
    TorchRL 0.14's does (:func:`_dispatch`)."""

    def __call__(cls, *args: Any, backend: str | None = None, backend_options: dict[str, Any] | None = None,
                 num_collectors: int | None = None, sync: bool | None = None, **kwargs: Any) -> Any:
        selectors = (backend, backend_options, num_collectors, sync)
        if cls is not Collector:
            if any(value is not None for value in selectors):
                raise TypeError("backend, backend_options, num_collectors and sync are only supported "
                                "when constructing Collector directly.")
            return super().__call__(*args, **kwargs)
        if all(value is None for value in selectors) and _context_backend() in (None, "direct"):
            return super().__call__(*args, **kwargs)
        chosen = _dispatch(args, kwargs, backend, backend_options, num_collectors, sync)
        if isinstance(chosen, tuple):
            return super().__call__(*chosen[0], **chosen[1])
        return chosen


class Collector(_PrivateKeys, collectors.Collector, metaclass=_CollectorType):
    """:class:`rlcollect.Collector` with TorchRL's batch layout by default (``layout="torchrl"``)
    and TorchRL's arguments (:data:`TORCHRL_ARGUMENTS`).

    As TorchRL 0.14's ``Collector``, it builds the multi-process or Ray collector when told to:
    ``num_collectors=N`` (or a list of env constructors) with ``backend="process"`` (the default
    then; ``"multiprocessing"`` too) gives a :class:`MultiSyncCollector` (``sync=True``) or
    :class:`MultiAsyncCollector` (``sync=False``, the default), ``backend="ray"`` a
    :class:`RayCollector`; ``backend_options`` are more arguments for it. An enclosing
    ``torchrl.service_backend(...)`` block chooses the backend when none is given.
    ``backend="rpc"``, ``"distributed"`` and ``"submitit"`` build TorchRL's own ``RPCCollector``
    / ``DistributedCollector`` (rlcollect has no such transport): TorchRL collects then.
    """

    accepted_arguments = collectors.Collector.accepted_arguments | _CORE_OPTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _torchrl_init(self, collectors.Collector, args, kwargs)

    def stats(self) -> TorchRLStats:  # type: ignore[override]
        """TorchRL's snapshot (:class:`TorchRLStats`)."""
        return _torchrl_stats(self, super().stats(), None)


class _MultiCollectorType(abc.ABCMeta):
    """``MultiCollector(..., sync=...)`` builds the synchronous or the asynchronous collector."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is not MultiCollector:
            return super().__call__(*args, **kwargs)
        if "sync" not in kwargs:
            raise TypeError("MultiCollector needs sync=True (MultiSyncCollector: a batch holds every "
                            "worker's frames) or sync=False (MultiAsyncCollector: one worker's batch at a "
                            "time)")
        sync = check_flag("sync", kwargs.pop("sync"))
        return (MultiSyncCollector if sync else MultiAsyncCollector)(*args, **kwargs)


class MultiCollector(BaseCollector, metaclass=_MultiCollectorType):
    """TorchRL's ``MultiCollector``: ``MultiCollector(envs, policy, sync=True)`` is a
    :class:`MultiSyncCollector`, ``sync=False`` a :class:`MultiAsyncCollector`; both are
    instances of this class."""


class MultiSyncCollector(_PrivateKeys, collectors.MultiSyncCollector, MultiCollector):
    """:class:`rlcollect.MultiSyncCollector` with TorchRL's batch layout and arguments; a batch is
    grouped by worker as ``cat_results`` says (``"stack"`` by default, as in TorchRL).
    ``frames_per_batch`` may be a list, one (equal) count per worker: a batch holds their sum."""

    accepted_arguments = collectors.MultiSyncCollector.accepted_arguments | _CORE_OPTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _torchrl_init(self, collectors.MultiSyncCollector, args, kwargs)

    stats = _worker_stats  # type: ignore[assignment]  # TorchRL's signature and dict
    state_dict = _worker_state_dict


class MultiAsyncCollector(_PrivateKeys, collectors.MultiAsyncCollector, MultiCollector):
    """:class:`rlcollect.MultiAsyncCollector` with TorchRL's batch layout and arguments.
    ``frames_per_batch`` may be a list of one count per worker: as in TorchRL 0.14, each worker's
    batches then hold their sum."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        frames = kwargs.get("frames_per_batch")
        env_fn = args[0] if args else kwargs.get("create_env_fn")
        workers = len(env_fn) if isinstance(env_fn, (list, tuple)) else kwargs.get("num_workers")
        if isinstance(frames, (list, tuple)) and len(frames) == workers:
            kwargs["frames_per_batch"] = sum(
                check_int(f"frames_per_batch[{i}]", count, minimum=1, allowed="a positive int")
                for i, count in enumerate(frames))
        _torchrl_init(self, collectors.MultiAsyncCollector, args, kwargs)

    accepted_arguments = collectors.MultiAsyncCollector.accepted_arguments | _CORE_OPTIONS

    stats = _worker_stats  # type: ignore[assignment]  # TorchRL's signature and dict
    state_dict = _worker_state_dict


class AsyncCollector(MultiAsyncCollector):
    """TorchRL's ``AsyncCollector``: one env constructor collected in one worker process, so that
    collection runs while the learner trains (a :class:`MultiAsyncCollector` of one worker)."""

    def __init__(self, create_env_fn: Any, policy: Any = None, **kwargs: Any) -> None:
        if "num_workers" in kwargs:
            raise TypeError("AsyncCollector runs one worker: use MultiAsyncCollector for num_workers")
        super().__init__([create_env_fn], policy, num_workers=1, **kwargs)  # per-worker lists: of one


#: TorchRL's ``RayCollector`` arguments that rlcollect's gives each actor's collector.
_RAY_COLLECTOR_ARGUMENTS = ("device", "env_device", "policy_device", "exploration_type", "init_random_frames",
                            "max_frames_per_traj", "policy_factory", "pre_collect_hook", "reset_at_each_iter")


class RayCollector(_PrivateKeys, collectors.RayCollector):
    """:class:`rlcollect.RayCollector` with TorchRL's batch layout, arguments and defaults:
    ``sync=False``; the actors' collector arguments (``device``, ``exploration_type``,
    ``max_frames_per_traj``, ...) at the top level as well as in ``collector_kwargs``;
    ``remote_configs`` (one dict, or one per actor: equal), ``num_workers_per_collector`` (envs per
    actor), ``update_after_each_batch``, ``use_env_creator`` (accepted; envs are always built in the
    actors) and ``max_weight_update_interval`` (-1 or 0: weights go out on each update)."""

    def __init__(self, create_env_fn: Any, policy: Any = None, **kwargs: Any) -> None:
        kwargs.setdefault("sync", False)
        inner = dict(kwargs.pop("collector_kwargs", None) or {})
        for name in _RAY_COLLECTOR_ARGUMENTS:
            value = kwargs.pop(name, None)
            if value is not None:
                inner[name] = value
        if kwargs.pop("update_after_each_batch", False):
            inner["update_at_each_batch"] = True
        envs = kwargs.pop("num_workers_per_collector", 1)
        if envs != 1:
            inner["num_envs"] = check_int("num_workers_per_collector", envs, minimum=1,
                                          allowed="a positive int")
        check_flag("use_env_creator", kwargs.pop("use_env_creator", False))
        interval = kwargs.pop("max_weight_update_interval", -1)
        if interval not in (-1, 0):
            raise ValueError(f"max_weight_update_interval={interval!r} is not supported: the actors "
                             "receive the weights at each update_policy_weights_() (-1 or 0)")
        remote = kwargs.pop("remote_configs", None)
        if isinstance(remote, (list, tuple)):
            if any(entry != remote[0] for entry in remote):
                raise ValueError("remote_configs lists different resources per actor; rlcollect's actors "
                                 "share one remote_config: give one dict")
            remote = remote[0] if remote else None
        if remote is not None:
            kwargs["remote_config"] = remote
        if isinstance(create_env_fn, (list, tuple)):
            kwargs.setdefault("num_collectors", len(create_env_fn))
        if inner:
            kwargs["collector_kwargs"] = inner
        _torchrl_init(self, collectors.RayCollector, (create_env_fn, policy), kwargs)

    accepted_arguments = collectors.RayCollector.accepted_arguments | _CORE_OPTIONS

    stats = _worker_stats  # type: ignore[assignment]  # TorchRL's signature and dict


#: TorchRL's names from before 0.11, which it still accepts.
SyncDataCollector = Collector
MultiSyncDataCollector = MultiSyncCollector
MultiaSyncDataCollector = MultiAsyncCollector
aSyncDataCollector = AsyncCollector
DataCollectorBase = BaseCollector

__all__ = [
    "AsyncBatchedCollector",
    "AsyncCollector",
    "BaseCollector",
    "Collector",
    "DataCollectorBase",
    "MultiAsyncCollector",
    "MultiCollector",
    "MultiSyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "ProfileConfig",
    "RayCollector",
    "SyncDataCollector",
    "TorchRLStats",
    "WeightUpdaterBase",
    "aSyncDataCollector",
]
