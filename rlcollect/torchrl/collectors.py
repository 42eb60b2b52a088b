"""TorchRL's collector classes on rlcollect's collectors (see :mod:`rlcollect.torchrl`).

Each class is rlcollect's collector of the same job with TorchRL's batch layout by default and
TorchRL's own arguments, translated (:mod:`rlcollect.torchrl.translate`) before the core
collector is built; ``Collector(backend=..., num_collectors=...)`` selects as TorchRL 0.14 does
(:mod:`rlcollect.torchrl.backends`).

Examples:
    >>> from rlcollect.torchrl.collectors import Collector
    >>> with Collector("CartPole-v1", frames_per_batch=8, total_frames=8) as collector:
    ...     [batch.batch_size for batch in collector]
    [torch.Size([1, 8])]
"""

from __future__ import annotations

import abc
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from rlcollect import collectors
from rlcollect.collectors import BaseCollector
from rlcollect.collectors.checks import check_flag, check_int
from rlcollect.common.callers import outside_stacklevel
from rlcollect.envs.torchrl_env import dump_env_transform
from rlcollect.policies.devices import warn_unmovable
from rlcollect.torchrl.accessors import TorchRLAccessors
from rlcollect.torchrl.arguments import check_ray_replay_buffer, idle_seconds, none_means_default
from rlcollect.torchrl.backends import Selection, context_backend, select
from rlcollect.torchrl.layout import TorchRLLayout
from rlcollect.torchrl.signatures import ASYNC, COLLECTOR, MULTI, RAY, RAY_DEFAULTS, torchrl_signature
from rlcollect.torchrl.stats import TorchRLStats, note_acting_weights, torchrl_stats, worker_stats
from rlcollect.torchrl.translate import WorkerInit, take_torchrl_arguments
from rlcollect.torchrl.worker_calls import WorkerCalls

__all__ = ["AsyncCollector", "Collector", "DataCollectorBase", "MultiAsyncCollector", "MultiCollector",
           "MultiSyncCollector", "ProfilerHook", "RayCollector"]


#: The core option only the collectors here take (a TorchRL env's policy transforms).
_CORE_OPTIONS = frozenset({"auto_register_policy_transforms"})


def _torchrl_init(collector: Any, cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Build ``collector`` as ``cls`` with TorchRL's layout by default and TorchRL's own arguments.

    ``None`` means the default for every argument whose default is not ``None``, as in TorchRL
    (whose trainers pass ``None`` for each argument they leave unset)."""
    none_means_default(cls, kwargs)
    if kwargs.get("weight_sync_schemes") is not None and kwargs.get("weight_updater") is not None:
        if cls is not collectors.Collector:  # as TorchRL's multi-process collectors
            raise TypeError("Cannot specify both weight_sync_schemes and weight_updater.")
        kwargs.pop("weight_updater")  # TorchRL's Collector: the schemes win, the updater is dropped
    translation = take_torchrl_arguments(kwargs)
    if cls is not collectors.Collector:  # TorchRL's collectors with workers take init_fn
        WorkerInit.take(kwargs)
    policy = args[1] if len(args) > 1 else kwargs.get("policy")
    if policy is not None:  # TorchRL warns when a policy device cannot be checked against the policy
        device = kwargs.get("policy_device", kwargs.get("device"))
        warn_unmovable(policy, device, trust_policy=translation.trust_policy)
    if kwargs.get("trajs_per_batch") is not None and kwargs.get("traj_format") is None \
            and kwargs.get("replay_buffer") is None:
        warnings.warn("trajs_per_batch without traj_format yields 'padded' batches ([n, max_len] with a "
                      "mask); as in TorchRL, the default will change to 'cat' in torchrl v0.16: pass "
                      "traj_format='padded' or 'cat'", FutureWarning, stacklevel=outside_stacklevel())
    layout = translation.layout  # an object of this collector's own: _exclude_private_keys switches it
    collector._torchrl_layout = layout if isinstance(layout, TorchRLLayout) else None
    kwargs.update(translation.core_arguments())
    idle = os.environ.get("MAX_IDLE_COUNT")
    if idle is not None and cls is not collectors.Collector and "timeout" not in kwargs:
        kwargs["timeout"] = idle_seconds(idle)
    if translation.num_threads is not None:  # TorchRL's: the torch threads of this process
        torch.set_num_threads(translation.num_threads)
    cls.__init__(collector, *args, **kwargs)
    translation.apply(collector)
    if getattr(collector, "policy", None) is not None:  # workers built by a policy_factory: their own
        note_acting_weights(collector)  # TorchRL's state_dict shows what each worker acts with


class _Deprecated(type(BaseCollector)):  # type: ignore[misc]  # BaseCollector's metaclass
    """Building a class of TorchRL's deprecated names warns (DeprecationWarning), as in TorchRL
    0.11; any :class:`BaseCollector` is an instance of it."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"{cls.__name__} has been deprecated and will be removed in v0.13. Please use "
                      f"{cls.__bases__[0].__name__} instead.", DeprecationWarning,
                      stacklevel=outside_stacklevel())
        return super().__call__(*args, **kwargs)

    def __instancecheck__(cls, instance: Any) -> bool:
        return super().__instancecheck__(instance) or isinstance(instance, cls.__bases__[0])


class DataCollectorBase(BaseCollector, metaclass=_Deprecated):
    """TorchRL's name from before 0.11 for :class:`~rlcollect.BaseCollector`: subclass it as that."""


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
        if all(value is None for value in selectors) and context_backend() in (None, "direct"):
            return super().__call__(*args, **kwargs)
        chosen = select(args, kwargs, backend, backend_options, num_collectors, sync)
        if chosen.kind == "direct":
            return super().__call__(*chosen.args, **chosen.kwargs)
        return _build(chosen)


def _build(chosen: Selection) -> Any:
    """The collector with workers ``chosen`` says."""
    if chosen.kind == "ray":
        env_fns = chosen.env_fns if chosen.listed else chosen.env_fns[0]
        return RayCollector(env_fns, *chosen.args, num_collectors=len(chosen.env_fns), sync=chosen.sync,
                            **chosen.kwargs)
    if chosen.kind == "process":
        built = MultiSyncCollector if chosen.sync else MultiAsyncCollector
        return built(chosen.env_fns, *chosen.args, **chosen.kwargs)
    return chosen.target(chosen.env_fns, *chosen.args, sync=chosen.sync, **chosen.kwargs)


@torchrl_signature(COLLECTOR)
class Collector(TorchRLAccessors, collectors.Collector, metaclass=_CollectorType):  # type: ignore[misc]  # worker_idx: None
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
        return torchrl_stats(self, super().stats(), None)

    def _dump_env_transform(self, step: int | None = None) -> None:
        """TorchRL's call (its ``Evaluator`` makes it): the env's transform writes what it gathered."""
        dump_env_transform(self.env, step)

    def reset(self, index: Any = None, **kwargs: Any) -> None:
        """Reset every env now, as TorchRL's ``reset()``; TorchRL's partial reset (``index``,
        or keyword arguments for the env's ``reset``) is refused, naming it."""
        if index is not None or kwargs:
            raise ValueError(f"Collector.reset(index={index!r}, **{kwargs!r}): rlcollect resets every env "
                             "of the collector (reset()); TorchRL's partial reset of the envs at index, "
                             "and keyword arguments to the env's reset, are not supported")
        super().reset()

    def enable_profile(self, **kwargs: Any) -> None:
        """rlcollect's (the profiler runs inside the rollout); ``post_collect_hook`` then reads
        a :class:`ProfilerHook` until :meth:`disable_profile`, as in TorchRL."""
        super().enable_profile(**kwargs)
        if not isinstance(self.post_collect_hook, ProfilerHook):
            self.post_collect_hook = ProfilerHook(self.post_collect_hook)

    def disable_profile(self) -> None:
        """rlcollect's, and the ``post_collect_hook`` from before :meth:`enable_profile` back."""
        super().disable_profile()
        hook = self.post_collect_hook
        if isinstance(hook, ProfilerHook):
            self.post_collect_hook = hook.replaced


class ProfilerHook:
    """The ``post_collect_hook`` of TorchRL's ``Collector`` while profiling is enabled. It runs
    the hook it stands in for (``replaced``, which TorchRL's skips meanwhile), named
    ``post_collect_hook`` in the trace; the profiler itself runs inside the rollout."""

    def __init__(self, replaced: Callable[[TensorDictBase], None] | None) -> None:
        self.replaced = replaced

    def __call__(self, batch: TensorDictBase) -> None:
        if self.replaced is not None:
            with torch.profiler.record_function("post_collect_hook"):
                self.replaced(batch)


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


@torchrl_signature(MULTI)
class MultiSyncCollector(WorkerCalls, TorchRLAccessors, collectors.MultiSyncCollector, MultiCollector):  # type: ignore[misc]  # TorchRL's stats()
    """:class:`rlcollect.MultiSyncCollector` with TorchRL's batch layout and arguments; a batch is
    grouped by worker as ``cat_results`` says (``"stack"`` by default, as in TorchRL).
    ``frames_per_batch`` may be a list, one (equal) count per worker: a batch holds their sum."""

    accepted_arguments = collectors.MultiSyncCollector.accepted_arguments | _CORE_OPTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _torchrl_init(self, collectors.MultiSyncCollector, args, kwargs)



@torchrl_signature(MULTI)
class MultiAsyncCollector(WorkerCalls, TorchRLAccessors, collectors.MultiAsyncCollector, MultiCollector):  # type: ignore[misc]  # TorchRL's stats()
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



@torchrl_signature(ASYNC)
class AsyncCollector(MultiAsyncCollector):
    """TorchRL's ``AsyncCollector``: one env constructor collected in one worker process, so that
    collection runs while the learner trains (a :class:`MultiAsyncCollector` of one worker)."""

    def __init__(self, create_env_fn: Any, policy: Any = None, **kwargs: Any) -> None:
        if "num_workers" in kwargs:
            raise TypeError("AsyncCollector runs one worker: use MultiAsyncCollector for num_workers")
        super().__init__([create_env_fn], policy, num_workers=1, **kwargs)  # per-worker lists: of one


#: TorchRL's ``RayCollector`` arguments that rlcollect's gives each actor's collector.
_RAY_COLLECTOR_ARGUMENTS = ("device", "env_device", "policy_device", "exploration_type", "init_random_frames",
                            "max_frames_per_traj", "policy_factory", "pre_collect_hook", "reset_at_each_iter",
                            "compile_policy")


@torchrl_signature(RAY, **RAY_DEFAULTS)
class RayCollector(TorchRLAccessors, collectors.RayCollector):  # type: ignore[misc]  # worker_idx: None
    """:class:`rlcollect.RayCollector` with TorchRL's batch layout, arguments and defaults:
    ``sync=False``; the actors' collector arguments (``device``, ``exploration_type``,
    ``max_frames_per_traj``, ...) at the top level as well as in ``collector_kwargs``;
    ``remote_configs`` (one dict, or one per actor), ``num_workers_per_collector`` (envs per
    actor), ``update_after_each_batch``, ``use_env_creator`` (accepted; envs are always built in the
    actors) and ``max_weight_update_interval`` (-1 or 0: weights go out on each update)."""

    def __init__(self, create_env_fn: Any, policy: Any = None, **kwargs: Any) -> None:
        kwargs.setdefault("sync", False)
        check_ray_replay_buffer(kwargs.get("replay_buffer"))
        inner = dict(kwargs.pop("collector_kwargs", None) or {})
        for name in _RAY_COLLECTOR_ARGUMENTS:
            value = kwargs.pop(name, None)
            if value is not None:
                inner[name] = value
        if kwargs.pop("update_after_each_batch", False):
            inner["update_at_each_batch"] = True
        inner_class = kwargs.get("collector_class")
        multi = (collectors.MultiSyncCollector, collectors.MultiAsyncCollector)
        nested = isinstance(inner_class, type) and issubclass(inner_class, multi)
        if nested:  # each actor runs processes; they collect its batches together (TorchRL's docs page)
            kwargs["collector_class"] = collectors.MultiSyncCollector
        envs = kwargs.pop("num_workers_per_collector", 1)
        if envs != 1 or nested:  # TorchRL: copies of the env maker, one per process of a multi collector
            inner["num_workers" if nested else "num_envs"] = check_int(
                "num_workers_per_collector", envs, minimum=1, allowed="a positive int")
        check_flag("use_env_creator", kwargs.pop("use_env_creator", False))
        interval = kwargs.pop("max_weight_update_interval", -1)
        if interval not in (-1, 0):
            raise ValueError(f"max_weight_update_interval={interval!r} is not supported: the actors "
                             "receive the weights at each update_policy_weights_() (-1 or 0)")
        remote = kwargs.pop("remote_configs", None)
        if remote is not None:
            kwargs["remote_config"] = remote
        if isinstance(create_env_fn, (list, tuple)):
            kwargs.setdefault("num_collectors", len(create_env_fn))
        if inner:
            kwargs["collector_kwargs"] = inner
        _torchrl_init(self, collectors.RayCollector, (create_env_fn, policy), kwargs)

    accepted_arguments = collectors.RayCollector.accepted_arguments | _CORE_OPTIONS

    stats = worker_stats  # type: ignore[assignment]  # TorchRL's signature and dict


