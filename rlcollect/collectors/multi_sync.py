"""MultiSyncCollector: every batch holds all workers' envs, ``[num_workers * M, T]``."""

from __future__ import annotations

import math
from collections.abc import Iterator

from tensordict import TensorDictBase

from rlcollect.collectors.multi_base import MultiCollectorBase

__all__ = ["MultiSyncCollector"]


class MultiSyncCollector(MultiCollectorBase):
    """Collects in ``num_workers`` processes; each batch is all workers' rows, in worker order.

    Workers write into shared-memory slots; only a small message per worker and batch crosses
    the process boundary. Batches equal the single-process :class:`Collector`'s with the same
    total envs and seed (deterministic policy), trajectory ids aside (unique, but numbered per
    worker).

    Args:
        create_env_fn: an env source for all workers, or a list with one per worker.
        policy: as for :class:`Collector`; ``policy_factory`` builds it in each worker instead.
        num_workers: worker processes (defaults to ``len(create_env_fn)`` for a list).
        num_envs_per_worker: envs ``M`` stepped by each worker.
        frames_per_batch: frames per batch over all workers (rounded up to a multiple of
            ``num_workers * M``).
        preemptive_threshold: once this fraction of workers finished a batch, the others stop
            at their next step; their missing frames are masked in ``("collector", "mask")``.
        prefetch: workers collect the next batch while the current one is being used (one
            version of policy lag, stamped in ``policy_version``).
        update_at_each_batch: pull the policy's weights into the workers before each batch.
        max_worker_restarts: restarts allowed per worker after a crash or an env error.
        timeout: seconds a worker may take to start or to collect one batch before it is deemed
            hung (and restarted); also bounds ``shutdown``.
        start_method: ``"spawn"`` (default), ``"forkserver"`` or ``"fork"``.
        models: other modules by model id for ``update_policy_weights_(weights_dict=...)``;
            they are pickled together with the env factory and policy, so shared objects stay
            shared in the worker.
        **others: as for :class:`Collector`.

    Scripts that create it must guard their entry point with ``if __name__ == "__main__":``
    (``spawn`` imports the main module in every worker).

    Example:
        >>> from rlcollect import MultiSyncCollector
        >>> with MultiSyncCollector("CartPole-v1", num_workers=2, num_envs_per_worker=2,
        ...                         frames_per_batch=40, total_frames=80, seed=0) as collector:
        ...     shapes = [batch.shape for batch in collector]
        >>> shapes
        [torch.Size([4, 10]), torch.Size([4, 10])]
    """

    _sync = True

    def iterator(self) -> Iterator[TensorDictBase | None]:
        self._ensure_started()
        slot = self._batches % len(self._slots)
        if not self._pool.busy() and self._more_wanted(0):
            self._dispatch_all(slot)
        while self._pool.busy():
            frames = self._gather(slot)
            self._frames += frames
            self._batches += 1
            if self.prefetch and self._more_wanted(0):
                self._dispatch_all(slot ^ 1)  # workers fill the other slot while this one is used
            yield from self._delivery.outputs(self._slots[slot].batch)
            if self.prefetch:
                slot ^= 1
            elif self._more_wanted(0):  # after the learner had the batch: its new weights are used
                self._dispatch_all(slot)

    def _dispatch_all(self, slot: int) -> None:
        self._stop_flags[slot] = 0
        for worker in range(self.num_workers):
            self._dispatch(worker, slot)

    def _gather(self, slot: int) -> int:
        """Wait for every worker's rows of ``slot``; preempt the late ones; return the frames."""
        waiting = set(range(self.num_workers))
        frames = 0
        needed = None if self.preemptive_threshold is None else math.ceil(
            self.preemptive_threshold * self.num_workers
        )
        while waiting:
            for worker, report in self._pool.wait(sorted(waiting)):
                frames += self._account(worker, report)
                waiting.discard(worker)
            if needed is not None and self.num_workers - len(waiting) >= needed:
                self._stop_flags[slot] = 1  # the rest stop at their next step
        return frames
