"""The multi-process collectors: worker processes on this machine, batches in shared memory."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType

from rlcollect.collectors.nested import nested_spec
from rlcollect.collectors.options import CollectorOptions
from rlcollect.collectors.pooled import PooledCollector, worker_processes
from rlcollect.envs.factory import EnvSource
from rlcollect.rollout.engine import RolloutSpec
from rlcollect.weights.schemes import WeightSyncScheme

__all__ = ["MultiAsyncCollector", "MultiSyncCollector"]


class _MultiProcessCollector(PooledCollector):
    """The constructor both multi-process collectors share (see :class:`MultiSyncCollector`)."""

    _sync: bool
    _hooks_in_workers = True

    def __init__(
        self,
        create_env_fn: EnvSource | Sequence[EnvSource],
        policy: Any = None,
        *,
        num_workers: int | None = None,
        num_envs_per_worker: int = 1,
        frames_per_batch: int | Sequence[int],
        total_frames: int = -1,
        policy_factory: Callable[[], Any] | None = None,
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        init_random_frames: int | None = 0,
        max_frames_per_traj: int | None = None,
        reset_at_each_iter: bool = False,
        set_truncated: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool = False,
        exploration_type: str | InteractionType = InteractionType.RANDOM,
        return_same_td: bool = False,
        device: Any = None,
        env_device: Any = None,
        policy_device: Any = None,
        storing_device: Any = None,
        compile_policy: bool | dict[str, Any] = False,
        pre_collect_hook: Callable[[], None] | None = None,
        post_collect_hook: Callable[[TensorDictBase], None] | None = None,
        seed: int | None = None,
        models: Mapping[str, torch.nn.Module] | None = None,
        preemptive_threshold: float | None = None,
        prefetch: bool = False,
        update_at_each_batch: bool = False,
        max_worker_restarts: int = 3,
        timeout: float = 60.0,
        start_timeout: float = 120.0,
        start_method: str = "auto",
        replay_buffer: Any = None,
        trajs_per_batch: int | None = None,
        traj_format: str | None = None,
        weight_sync_schemes: Mapping[str, WeightSyncScheme] | None = None,
        weight_updater: Any = None,
        check: str = "full",
        obs_dtype: Any = None,
        layout: str = "rlcollect",
        track_policy_version: bool = False,
        collector_class: type | None = None,
        collector_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if num_workers is None:
            if not isinstance(create_env_fn, (list, tuple)):
                raise ValueError("num_workers is required unless create_env_fn is a list (one per worker)")
            num_workers = len(create_env_fn)
        nested_workers = _nested_workers(collector_class, collector_kwargs)
        options = CollectorOptions.from_arguments({**locals(), "sync": self._sync, **self._extra_options})
        self._build(options, worker_processes(options))

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
        num_workers: worker processes (defaults to ``len(create_env_fn)`` for a list).
        num_envs_per_worker: envs ``M`` stepped by each worker (every worker must have as many).
        frames_per_batch: frames per batch over all workers (rounded up to a multiple of
            ``num_workers * M``, with a warning); or a list of one (equal) count per worker.
        create_env_kwargs: keyword arguments of the env factory, or a list with one per worker.
        preemptive_threshold: once this fraction of workers finished a batch, the others stop
            at their next step (``0``: once the first one finished); their missing frames are
            masked in ``("collector", "mask")``.
        prefetch: workers collect the next batch while the current one is being used (one
            version of policy lag, stamped in ``policy_version``).
        update_at_each_batch: pull the policy's weights into the workers before each batch.
        pre_collect_hook: called before each batch, in each worker (it must pickle).
        post_collect_hook: called in each worker with that worker's batch, in the collector's
            layout, as TorchRL's workers do (it must pickle).
        max_worker_restarts: restarts allowed per worker after a crash or an env error.
        timeout: seconds a worker may take to collect one batch (or answer another command)
            before it is deemed hung (and restarted); also the default bound of ``shutdown``.
        start_timeout: seconds a worker may take to start or restart (import torch, build its
            envs) before it is deemed hung; generous (120 s) so that a loaded machine does not
            fail at start-up. A positive number, like ``timeout``.
        start_method: ``"auto"`` (default: fork while this process has no other thread and no
            CUDA, else a forkserver that preloads torch, tensordict and Gymnasium once),
            ``"spawn"``, ``"forkserver"`` or ``"fork"``.
        models: other modules by model id for ``update_policy_weights_(weights_dict=...)``;
            they are pickled together with the env factory and policy, so shared objects stay
            shared in the worker.
        weight_sync_schemes: ``{model_id: WeightSyncScheme}``: how weights reach the workers
            (default :class:`~rlcollect.weights.SharedMemWeightSyncScheme`; also
            ``MultiProcessWeightSyncScheme`` and ``NoWeightSyncScheme``).
        weight_updater: a legacy :class:`~rlcollect.weights.WeightUpdaterBase` (or its class)
            called by ``update_policy_weights_`` instead of the schemes.
        collector_class: ``MultiSyncCollector`` (with ``collector_kwargs={"num_workers": K}``)
            makes each worker a collector of ``K`` processes of its own (``M`` envs each); weight
            updates cascade to them and each frame keeps the version that chose it. Default:
            each worker steps its envs itself.
        collector_kwargs: the arguments of each worker's ``collector_class``.
        check: what is checked of the envs' and the policy's data: ``"full"`` (default: every
            value's shape and type before it is written, every batch's values against the
            spaces), ``"batch"`` (only the values, per batch) or ``"off"``; a failed check raises
            :class:`~rlcollect.data.checks.BadDataError` naming the env, the step and the value.
        obs_dtype: store floating-point observations in this dtype (``"float32"``, ``"float64"``,
            ``"float16"`` or the torch / numpy dtype), cast once as they are written; the policy
            sees them so (MuJoCo's float64 observations for a float32 network). Integer and
            boolean observations (images, discrete states) are kept. ``None`` (default): the
            space's dtype.

    The other arguments are as for :class:`Collector`. Each worker process runs torch with one
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
