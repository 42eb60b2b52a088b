"""MultiAsyncCollector: yields whichever worker's batch is ready first, ``[M, T]``."""

from __future__ import annotations

from collections.abc import Iterator

from tensordict import TensorDictBase

from rlcollect.collectors.multi_base import MultiCollectorBase

__all__ = ["MultiAsyncCollector"]


class MultiAsyncCollector(MultiCollectorBase):
    """Collects in ``num_workers`` processes; each batch is one worker's ``[M, T]`` rows.

    Each worker owns two shared-memory slots and starts its next batch as soon as it reported
    one, so workers never wait for each other or for the learner. ``frames_per_batch`` is per
    yielded batch (one worker's), as in TorchRL. Arguments as :class:`MultiSyncCollector`
    (``preemptive_threshold`` and ``prefetch`` do not apply).

    Example:
        >>> from rlcollect import MultiAsyncCollector
        >>> with MultiAsyncCollector("CartPole-v1", num_workers=2, frames_per_batch=10,
        ...                          total_frames=40, seed=0) as collector:
        ...     shapes = {batch.shape for batch in collector}
        >>> shapes
        {torch.Size([1, 10])}
    """

    _sync = False

    def iterator(self) -> Iterator[TensorDictBase | None]:
        self._ensure_started()
        envs = self.num_envs_per_worker
        next_slot = [self._batches % 2] * self.num_workers
        for worker in range(self.num_workers):
            if worker not in self._pool.busy() and self._more_wanted(self._frames_in_flight()):
                self._dispatch(worker, next_slot[worker])
        while self._pool.busy():
            worker, report = self._pool.wait_one(sorted(self._pool.busy()))
            self._frames += self._account(worker, report)
            self._batches += 1
            next_slot[worker] = report.slot ^ 1
            if self._more_wanted(self._frames_in_flight()):
                self._dispatch(worker, next_slot[worker])  # it fills its other slot meanwhile
            rows = self._slots[report.slot].batch[worker * envs : (worker + 1) * envs]
            yield from self._delivery.outputs(rows)

    def _frames_in_flight(self) -> int:
        return len(self._pool.busy()) * self.frames_per_batch
