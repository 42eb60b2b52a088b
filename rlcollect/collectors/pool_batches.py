"""How a collector with workers gets its batches: it hands each worker a batch to fill (with the
newest weights), waits for the workers' reports, takes in their rows and episodes, and yields
the batches: a synchronous one when every worker filled its rows of a slot, an asynchronous one
as soon as one worker did (a part of :class:`~rlcollect.collectors.pooled.PooledCollector`).

Worker ``w`` fills rows ``[w * M, (w + 1) * M)`` of a slot; a synchronous collector uses one slot
(two with ``prefetch``: the workers fill the next while the learner reads this one), an
asynchronous one two per worker (it fills one while its last batch is read).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from tensordict import LazyStackedTensorDict, TensorDictBase

from rlcollect.collectors.pooled_state import PooledState
from rlcollect.workers.pool import PoolClosed
from rlcollect.workers.wire import unpack_into
from rlcollect.workers.worker import BatchReport

__all__ = ["WorkerBatches"]


class WorkerBatches(PooledState):
    """The batches of a collector's workers, handed out and gathered (a part of
    :class:`~rlcollect.collectors.pooled.PooledCollector`)."""

    if TYPE_CHECKING:  # the collector's own (BaseCollector's weight API)
        def update_policy_weights_(self, policy_or_weights: Any = None, *, worker_ids: Any = None,
                                   **kwargs: Any) -> None: ...

    def _rows(self, slot: int, worker: int) -> TensorDictBase:
        if self._tensordict:
            return self._whole[slot, worker]
        envs = self.num_envs_per_worker
        return self._slots[slot].batch[worker * envs : (worker + 1) * envs]

    def _slot_batch(self, slot: int) -> TensorDictBase:
        """Every worker's rows of ``slot``: a synchronous batch. Whole TensorDict batches are
        stacked, ``[workers, *batch, T]``."""
        if not self._tensordict:
            return self._slots[slot].batch
        parts = [self._whole[slot, worker] for worker in range(self.num_workers)]
        out = LazyStackedTensorDict.maybe_dense_stack(parts, 0)
        out.names = [None] * (out.batch_dims - 1) + ["time"]
        return out

    def _dispatch(self, worker: int, slot: int, receive: bool = True, random: bool | None = None) -> None:
        """Hand ``worker`` its next batch (into ``slot``), with the newest weights received first
        (``receive``; a synchronous batch receives once for all its workers, and decides once
        whether its actions are ``random``)."""
        if receive:  # a batch of its own (else _dispatch_all's, counted there)
            self._unsent.requested()
            if self._receiver_schemes:
                self._poll_receivers()
        if self.options.update_at_each_batch:
            self.update_policy_weights_(worker_ids=[worker])
        if random is None:
            random = self._in_warmup(self._frames, self._frames_in_flight())
        self._pool.collect(worker, (slot, random, self._weights.payload(worker)))

    def _frames_in_flight(self) -> int:
        return len(self._pool.busy()) * self.num_envs_per_worker * self._num_steps

    def _dispatch_all(self, slot: int) -> None:
        if self._stop_flags is not None:
            self._stop_flags[slot] = 0
        self._unsent.requested()
        if self._receiver_schemes:  # once: every worker of a synchronous batch runs the same version
            self._poll_receivers()
        random = self._in_warmup(self._frames, self._frames_in_flight())  # the whole batch, as in TorchRL
        for worker in range(self.num_workers):
            self._dispatch(worker, slot, receive=False, random=random)

    def _account(self, worker: int, report: BatchReport) -> int:
        """Take in a worker's report (its rows, if they came with it); return the batch's frames."""
        if report.data is not None:
            unpack_into(report.data, self._rows(report.slot, worker))
        if report.batch is not None:
            self._whole[report.slot, worker] = report.batch
        self._weights.release(worker)
        self._reports[worker] = report
        records = report.episode_records
        self._returns.extend(records["return"].tolist())
        self._lengths.extend(records["length"].tolist())
        self._episode_records.add({**records, "worker": np.full(len(records["return"]), worker)})
        self._last_lag = int(self._weights.versions[worker]) - report.policy_version
        frames = report.batch_frames
        return report.steps * self.num_envs_per_worker if frames is None else frames

    def _more_wanted(self, frames_in_flight: int) -> bool:
        return self.total_frames < 0 or self._frames + frames_in_flight < self.total_frames

    # -- iteration --------------------------------------------------------------------------------
    def iterator(self) -> Iterator[TensorDictBase | None]:
        self._ensure_started()
        return self._sync_batches() if self.sync else self._async_batches()

    def _sync_batches(self) -> Iterator[TensorDictBase | None]:
        prefetch = self.options.prefetch
        slot = self._batches % self._num_slots
        if not self._pool.busy() and self._more_wanted(0):
            self._dispatch_all(slot)
        while self._pool.busy():
            self._frames += self._gather(slot)
            self._batches += 1
            if prefetch and self._more_wanted(0):
                self._dispatch_all(slot ^ 1)  # workers fill the other slot while this one is used
            yield from self._delivery.outputs(self._slot_batch(slot))
            if prefetch:
                slot ^= 1
            elif self._more_wanted(0):  # after the learner had the batch: its new weights are used
                self._dispatch_all(slot)
        self._refuse_if_closed()

    def _refuse_if_closed(self) -> None:
        """The stream ended because the workers were shut down (not because every frame was
        collected): an error, as a shut down collector's next batch is in every collector."""
        if self._pool.closed:
            raise PoolClosed("the workers were shut down: build a new collector to collect more")

    def _gather(self, slot: int) -> int:
        """Wait for every worker's rows of ``slot``; preempt the late ones; return the frames."""
        waiting, frames = set(range(self.num_workers)), 0
        threshold = self.options.preemptive_threshold  # TorchRL's count: under 1, the last is stopped
        needed = None if threshold is None or threshold >= 1 else int(threshold * self.num_workers)
        while waiting:
            if needed is not None and self.num_workers - len(waiting) >= needed:
                assert self._stop_flags is not None
                self._stop_flags[slot] = 1  # the rest stop at their next step (0: every one, now)
            for worker, report in self._pool.wait(sorted(waiting)):
                frames += self._account(worker, report)
                waiting.discard(worker)
        return frames

    def _dispatch_idle(self) -> None:
        """Hand a batch to each idle worker while more frames are wanted: every worker at the
        start, later those whose batch collected ahead ``set_seed`` dropped (into its freed slot)."""
        pool = self._pool
        for worker in range(self.num_workers):
            if worker not in pool.busy() and self._more_wanted(len(pool.busy()) * self.frames_per_batch):
                self._dispatch(worker, self._redo.pop(worker, self._batches % 2))

    def _async_batches(self) -> Iterator[TensorDictBase | None]:
        pool = self._pool
        while True:
            self._dispatch_idle()
            if not pool.busy():
                break
            worker, report = pool.wait_one(sorted(pool.busy()))
            self._frames += self._account(worker, report)
            self._batches += 1
            if self._more_wanted(len(pool.busy()) * self.frames_per_batch):
                self._dispatch(worker, report.slot ^ 1)  # it fills its other slot meanwhile
            yield from self._delivery.outputs(self._rows(report.slot, worker))
        self._refuse_if_closed()
