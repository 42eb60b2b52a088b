"""TorchRL 0.14's collector names on rlcollect's engine: change one import line to switch.

Code written against TorchRL imports its collectors from ``torchrl.collectors``; importing the same
names from here runs rlcollect's collectors instead:

.. code-block:: python

    # from torchrl.collectors import Collector, MultiSyncCollector
    from rlcollect.torchrl import Collector, MultiSyncCollector

What this module gives today: the names, and the legacy aliases TorchRL still accepts
(``SyncDataCollector``, ``MultiSyncDataCollector``, ``MultiaSyncDataCollector``,
``DataCollectorBase``), bound to rlcollect's collectors with their own arguments, and TorchRL's
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

from typing import Any

from rlcollect import collectors
from rlcollect.collectors import BaseCollector, ProfileConfig
from rlcollect.collectors.options import check_flag, check_int
from rlcollect.weights import WeightUpdaterBase

#: TorchRL's own arguments the collectors here take (validated by ``CollectorOptions``).
TORCHRL_ARGUMENTS = ("cat_results", "extend_buffer", "use_buffers", "reset_when_done",
                     "auto_register_policy_transforms", "compact_obs", "trust_policy", "cudagraph_policy")


def _torchrl_init(collector: Any, cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Build ``collector`` as ``cls`` with TorchRL's layout by default and TorchRL's own arguments."""
    collector._extra_options = {name: kwargs.pop(name) for name in TORCHRL_ARGUMENTS if name in kwargs}
    kwargs.setdefault("layout", "torchrl")
    cls.__init__(collector, *args, **kwargs)


#: What ``Collector(backend=...)`` builds on: this process, worker processes, Ray actors.
BACKENDS = ("direct", "process", "ray")
_SELECTORS = ("backend", "backend_options", "num_collectors", "sync")


class Collector(collectors.Collector):
    """:class:`rlcollect.Collector` with TorchRL's batch layout by default (``layout="torchrl"``)
    and TorchRL's arguments (:data:`TORCHRL_ARGUMENTS`).

    As TorchRL 0.14's ``Collector``, it builds the multi-process or Ray collector when told to:
    ``num_collectors=N`` (or a list of env constructors) with ``backend="process"`` (the default
    then) gives a :class:`MultiSyncCollector` (``sync=True``) or :class:`MultiAsyncCollector`
    (``sync=False``, the default), ``backend="ray"`` a :class:`RayCollector`;
    ``backend_options`` are more arguments for it.
    """

    def __new__(cls, *args: Any, backend: str | None = None, backend_options: dict[str, Any] | None = None,
                num_collectors: int | None = None, sync: bool | None = None, **kwargs: Any) -> Any:
        if cls is not Collector or all(v is None for v in (backend, backend_options, num_collectors, sync)):
            return super().__new__(cls)
        if num_collectors is not None:
            check_int("num_collectors", num_collectors, minimum=1, allowed="a positive int")
        backend = backend or ("process" if num_collectors is not None else "direct")
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} is not one of {BACKENDS}")
        if sync is not None:
            check_flag("sync", sync)
        options = dict(backend_options or {})
        clash = sorted(set(options) & (set(kwargs) | set(_SELECTORS) | {"create_env_fn", "policy"}))
        if clash:
            raise ValueError(f"backend_options repeats {clash}: give each argument once")
        if backend == "direct":
            if num_collectors not in (None, 1) or sync is not None or options:
                raise ValueError("backend='direct' collects in this process: num_collectors (1 at most), "
                                 "sync and backend_options do not apply")
            return super().__new__(cls)
        if len(args) > 2:
            raise TypeError("Collector takes at most create_env_fn and policy positionally")
        env_fn = args[0] if args else kwargs.pop("create_env_fn")
        policy = args[1] if len(args) > 1 else kwargs.pop("policy", None)
        listed = isinstance(env_fn, (list, tuple))
        count = len(env_fn) if listed else (num_collectors or 1)
        if listed and num_collectors not in (None, count):
            raise ValueError(f"num_collectors={num_collectors} but create_env_fn lists {count} env "
                             "constructors")
        kwargs.update(options)
        if backend == "ray":
            return RayCollector(env_fn[0] if listed else env_fn, policy, num_collectors=count,
                                sync=bool(sync), **kwargs)
        multi = MultiSyncCollector if sync else MultiAsyncCollector
        return multi(list(env_fn) if listed else [env_fn] * count, policy, **kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for name in _SELECTORS:  # backend="direct": chosen by __new__
            kwargs.pop(name, None)
        _torchrl_init(self, collectors.Collector, args, kwargs)


class MultiSyncCollector(collectors.MultiSyncCollector):
    """:class:`rlcollect.MultiSyncCollector` with TorchRL's batch layout and arguments; a batch is
    grouped by worker as ``cat_results`` says (``"stack"`` by default, as in TorchRL)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _torchrl_init(self, collectors.MultiSyncCollector, args, kwargs)


class MultiAsyncCollector(collectors.MultiAsyncCollector):
    """:class:`rlcollect.MultiAsyncCollector` with TorchRL's batch layout and arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _torchrl_init(self, collectors.MultiAsyncCollector, args, kwargs)


class RayCollector(collectors.RayCollector):
    """:class:`rlcollect.RayCollector` with TorchRL's batch layout and arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _torchrl_init(self, collectors.RayCollector, args, kwargs)


#: TorchRL's names from before 0.11, which it still accepts.
SyncDataCollector = Collector
MultiSyncDataCollector = MultiSyncCollector
MultiaSyncDataCollector = MultiAsyncCollector
DataCollectorBase = BaseCollector

__all__ = [
    "BaseCollector",
    "Collector",
    "DataCollectorBase",
    "MultiAsyncCollector",
    "MultiSyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "ProfileConfig",
    "RayCollector",
    "SyncDataCollector",
    "WeightUpdaterBase",
]
