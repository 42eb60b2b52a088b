"""The multi-process collectors: worker processes on this machine, batches in shared memory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

from typing_extensions import Self, Unpack  # typing has them from Python 3.11

from rlcollect.collectors.arguments import (
    CollectorArguments,
    WorkerArguments,
    argument_names,
    check_accepted,
    named_as,
)
from rlcollect.collectors.nested import nested_spec
from rlcollect.collectors.options import CollectorOptions
from rlcollect.collectors.pooled import PooledCollector
from rlcollect.collectors.probe import worker_processes
from rlcollect.envs.factory import EnvSource
from rlcollect.rollout.engine import RolloutSpec

__all__ = ["MultiAsyncCollector", "MultiSyncCollector"]


class MultiProcessArguments(CollectorArguments, WorkerArguments, total=False):
    """The keyword arguments of the multi-process collectors besides those they name."""


class _MultiProcessCollector(PooledCollector):
    """The constructor both multi-process collectors share (see :class:`MultiSyncCollector`)."""

    _sync: bool
    _hooks_in_workers = True
    _worker_probes = True  # a process answers probe_in_worker's two-phase start

    #: The keyword arguments the constructor takes besides those it names.
    accepted_arguments: ClassVar[frozenset[str]] = argument_names(CollectorArguments, WorkerArguments)

    def __init__(
        self,
        create_env_fn: EnvSource | Sequence[EnvSource],
        policy: Any = None,
        *,
        frames_per_batch: int | Sequence[int],
        total_frames: int = -1,
        num_workers: int | None = None,
        num_envs_per_worker: int = 1,
        preemptive_threshold: float | None = None,
        prefetch: bool = False,
        update_at_each_batch: bool = False,
        collector_class: type | None = None,
        collector_kwargs: Mapping[str, Any] | None = None,
        **arguments: Unpack[MultiProcessArguments],
    ) -> None:
        check_accepted(type(self), arguments)
        if num_workers is None:
            if not isinstance(create_env_fn, (list, tuple)):
                raise ValueError("num_workers is required unless create_env_fn is a list (one per worker)")
            num_workers = len(create_env_fn)
        with named_as({"nested_workers": "num_workers"}):
            options = CollectorOptions(
                create_env_fn=create_env_fn, policy=policy,
                frames_per_batch=cast(int, frames_per_batch),  # a per-worker list: their sum, when checked
                total_frames=total_frames, num_workers=num_workers, num_envs_per_worker=num_envs_per_worker,
                preemptive_threshold=preemptive_threshold, prefetch=prefetch,
                update_at_each_batch=update_at_each_batch, sync=self._sync,
                nested_workers=_nested_workers(collector_class, collector_kwargs), **arguments)
        self._build(options, worker_processes(options))

    @classmethod
    def from_options(cls, options: CollectorOptions) -> Self:
        """A collector of ``options`` (checked once, by :class:`CollectorOptions`; ``options.sync``
        must be this class's): how another collector, or :mod:`rlcollect.torchrl`, builds one.

        Examples:
            >>> options = CollectorOptions(create_env_fn="CartPole-v1", frames_per_batch=4, num_workers=2)
            >>> with MultiSyncCollector.from_options(options) as collector:
            ...     collector.next().shape
            torch.Size([2, 2])
        """
        if options.sync != cls._sync:
            raise ValueError(f"{cls.__name__}.from_options needs options.sync={cls._sync}, got "
                             f"{options.sync}")
        collector = cls.__new__(cls)
        collector._build(options, worker_processes(options))
        return collector

    def _worker_spec(self, worker: int) -> RolloutSpec:
        """As the pool's, with a :class:`NestedRollout` engine when each worker runs processes."""
        return nested_spec(super()._worker_spec(worker), self.options.nested_workers, MultiSyncCollector)


class MultiSyncCollector(_MultiProcessCollector):
    """Collects in ``num_workers`` processes; each batch is all workers' rows, in worker order.

    Workers write into shared-memory slots; only a small message per worker and batch crosses
    the process boundary. Batches equal the single-process :class:`Collector`'s with the same
    total envs and seed (deterministic policy), trajectory ids aside (unique, but numbered per
    worker: worker ``w`` of ``W`` hands out ``local * W + w``).

    Args:
        create_env_fn: an env source for all workers, or a list with one per worker.
        policy: as for :class:`Collector`; ``policy_factory`` builds it in each worker instead.
        frames_per_batch: frames per batch over all workers (rounded up to a multiple of
            ``num_workers * M``, with a warning); or a list of one (equal) count per worker.
        total_frames: frames to collect before iteration stops, in whole batches (20 with
            8-frame batches: 3 batches, 24 frames, as in TorchRL); -1 for no end.
        num_workers: worker processes (defaults to ``len(create_env_fn)`` for a list).
        num_envs_per_worker: envs ``M`` stepped by each worker (every worker must have as many).
        preemptive_threshold: once ``int(threshold * num_workers)`` workers finished a batch
            (TorchRL's count: a threshold under 1 always stops the last one), the others stop
            at their next step, each after one step at least (``0``: every worker, at once);
            their missing frames are masked in ``("collector", "mask")``; ``1``: none stops.
        prefetch: workers collect the next batch while the current one is being used (one
            version of policy lag, stamped in ``policy_version``).
        update_at_each_batch: pull the policy's weights into the workers before each batch.
        collector_class: ``MultiSyncCollector`` (with ``collector_kwargs={"num_workers": K}``)
            makes each worker a collector of ``K`` processes of its own (``M`` envs each); weight
            updates cascade to them and each frame keeps the version that chose it. Default:
            each worker steps its envs itself.
        collector_kwargs: the arguments of each worker's ``collector_class``.
        **arguments: the :class:`~rlcollect.collectors.arguments.CollectorArguments` and
            :class:`~rlcollect.collectors.arguments.WorkerArguments` (``seed``, ``timeout``,
            ``start_method``, ...). ``weight_sync_schemes`` default to
            :class:`~rlcollect.weights.SharedMemWeightSyncScheme` (also
            ``MultiProcessWeightSyncScheme`` and ``NoWeightSyncScheme``); ``pre_collect_hook``
            and ``post_collect_hook`` run in each worker (on that worker's batch, in the
            collector's layout, as TorchRL's workers do) and must pickle.

    Each worker process runs torch with one
    thread; this process's settings are left alone.
    Scripts that create it must guard their entry point with ``if __name__ == "__main__":``
    (a forkserver or spawned worker imports the main module again).

    Examples:
        >>> from rlcollect import MultiSyncCollector
        >>> with MultiSyncCollector("CartPole-v1", num_workers=2, num_envs_per_worker=2,
        ...                         frames_per_batch=40, total_frames=80, seed=0) as collector:
        ...     shapes = [batch.shape for batch in collector]
        >>> shapes
        [torch.Size([4, 10]), torch.Size([4, 10])]
    """

    _sync = True


class MultiAsyncCollector(_MultiProcessCollector):
    """Collects in ``num_workers`` processes; each batch is one worker's ``[M, T]`` rows.

    Each worker owns two shared-memory slots and starts its next batch as soon as it reported
    one, so workers never wait for each other or for the learner. ``frames_per_batch`` is per
    yielded batch (one worker's), as in TorchRL. Arguments as :class:`MultiSyncCollector`
    (``preemptive_threshold`` and ``prefetch`` do not apply).

    Examples:
        >>> from rlcollect import MultiAsyncCollector
        >>> with MultiAsyncCollector("CartPole-v1", num_workers=2, frames_per_batch=10,
        ...                          total_frames=40, seed=0) as collector:
        ...     shapes = {batch.shape for batch in collector}
        >>> shapes
        {torch.Size([1, 10])}
    """

    _sync = False


def _nested_workers(collector_class: type | None, collector_kwargs: Mapping[str, Any] | None) -> Any:
    """The processes inside each worker that ``collector_class`` / ``collector_kwargs`` ask for."""
    from rlcollect.collectors.collector import Collector

    kwargs = dict(collector_kwargs or {})
    single = isinstance(collector_class, type) and issubclass(collector_class, Collector)
    if collector_class is None or single:
        if kwargs:
            raise ValueError(f"collector_kwargs={kwargs!r} needs collector_class=MultiSyncCollector "
                             "(the default workers take this collector's own arguments)")
        return 1
    if not (isinstance(collector_class, type) and issubclass(collector_class, MultiSyncCollector)):
        raise TypeError(f"collector_class must be Collector or MultiSyncCollector, got {collector_class!r}")
    if set(kwargs) != {"num_workers"}:
        raise ValueError(f"collector_kwargs for a nested MultiSyncCollector takes only num_workers, got "
                         f"{sorted(kwargs)}: the other arguments are this collector's own")
    return kwargs["num_workers"]  # checked with the other options
