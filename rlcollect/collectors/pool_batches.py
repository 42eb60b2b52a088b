"""How a collector with workers gets its batches: it hands each worker a batch to fill (with the
newest weights), waits for the workers' reports, takes in their rows and episodes, and yields
the batches. The schedule is chosen once, when the collector is built: :class:`SyncSchedule`
yields a batch when every worker filled its rows of a slot, :class:`AsyncSchedule` as soon as one
worker did.

A synchronous collector uses one slot (two with ``prefetch``: the workers fill the next while the
learner reads this one), an asynchronous one two per worker (it fills one while its last batch is
read); where the batches land is the slots' (:mod:`~rlcollect.collectors.slots`).
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from tensordict import TensorDictBase

from rlcollect.collectors.delivery import Delivery
from rlcollect.collectors.options import CollectorOptions
from rlcollect.collectors.slots import Slots
from rlcollect.rollout.episodes import EpisodeRecords
from rlcollect.weights.schemes import WeightChannel
from rlcollect.weights.watch import UnsentEdits
from rlcollect.workers.pool import PoolClosed, WorkerPool
from rlcollect.workers.worker import BatchReport

__all__ = ["AsyncSchedule", "Hooks", "Schedule", "SyncSchedule"]


@dataclass(frozen=True)
class Hooks:
    """What the schedule asks of its collector before a batch is handed out: take the newest
    received weights, whether actions are random, an update per batch, and (a policy server)
    which slot a worker's envs are served into."""

    receive: Callable[[], None]
    in_warmup: Callable[[int, int], bool]
    update: Callable[[int], None]
    assign: Callable[[int, int], None] | None = None


class Schedule(abc.ABC):
    """The batches of a collector's workers, handed out and gathered, and what was counted of them."""

    def __init__(self, pool: WorkerPool, slots: Slots, options: CollectorOptions, delivery: Delivery,
                 weights: WeightChannel, unsent: UnsentEdits, hooks: Hooks, *, steps: int,
                 total_frames: int, infos: Any = ()) -> None:
        self.pool, self.slots, self.options, self.delivery = pool, slots, options, delivery
        self.weights, self.unsent, self.hooks = weights, unsent, hooks
        self.num_workers, self.steps = pool.num_workers, steps
        self.total_frames = total_frames
        self.frames = self.batches = self.last_lag = 0
        self.reports: list[BatchReport | None] = [None] * self.num_workers
        self.returns: deque[float] = deque(maxlen=100)
        self.lengths: deque[int] = deque(maxlen=100)
        self.episode_records = EpisodeRecords(infos=infos)  # until episodes()

    # what the collector lays out for this kind of schedule, asked before it is built
    @staticmethod  # noqa: B027 (the synchronous schedule applies every option)
    def check(options: CollectorOptions) -> None:
        """Refuse the options this kind of schedule does not apply."""

    @staticmethod
    @abc.abstractmethod
    def batch_workers(workers: int) -> int:
        """The workers whose rows one batch holds."""

    @staticmethod
    @abc.abstractmethod
    def slot_count(options: CollectorOptions) -> int:
        """The slots each worker fills in turn."""

    @abc.abstractmethod
    def iterator(self) -> Iterator[TensorDictBase | None]:
        """The batches, as the delivery hands them out."""

    @abc.abstractmethod
    def drop_ahead(self) -> None:
        """Drop the batches collected ahead and not handed out yet (``set_seed``)."""

    @abc.abstractmethod
    def pending_batches(self, reports: int) -> int:
        """The batches that ``reports`` finished, not handed out, make."""

    def dispatch(self, worker: int, slot: int, receive: bool = True, random: bool | None = None) -> None:
        """Hand ``worker`` its next batch (into ``slot``), with the newest weights received first
        (``receive``; a synchronous batch receives once for all its workers, and decides once
        whether its actions are ``random``)."""
        if self.hooks.assign is not None:
            self.hooks.assign(worker, slot)
        if receive:
            self.unsent.requested()
            self.hooks.receive()
        if self.options.update_at_each_batch:
            self.hooks.update(worker)
        if random is None:
            random = self.hooks.in_warmup(self.frames, self.frames_in_flight())
        self.pool.collect(worker, (slot, random, self.weights.payload(worker)))

    def frames_in_flight(self) -> int:
        return len(self.pool.busy()) * self.slots.envs_per_worker * self.steps

    def account(self, worker: int, report: BatchReport) -> int:
        """Take in a worker's report (its rows, if they came with it); return the batch's frames."""
        self.slots.take(report, worker)
        self.weights.release(worker)
        self.reports[worker] = report
        records = report.episode_records
        self.returns.extend(records["return"].tolist())
        self.lengths.extend(records["length"].tolist())
        self.episode_records.add({**records, "worker": np.full(len(records["return"]), worker)})
        self.last_lag = int(self.weights.versions[worker]) - report.policy_version
        frames = report.batch_frames
        return report.steps * self.slots.envs_per_worker if frames is None else frames

    def more_wanted(self, frames_in_flight: int) -> bool:
        return self.total_frames < 0 or self.frames + frames_in_flight < self.total_frames

    def refuse_if_closed(self) -> None:
        """The stream ended because the workers were shut down (not because every frame was
        collected): an error, as a shut down collector's next batch is in every collector."""
        if self.pool.closed:
            raise PoolClosed("the workers were shut down: build a new collector to collect more")


class SyncSchedule(Schedule):
    """A batch is every worker's rows of a slot; late workers are preempted past
    ``preemptive_threshold``; with ``prefetch`` the workers fill the other slot meanwhile."""

    @staticmethod
    def batch_workers(workers: int) -> int:
        return workers

    @staticmethod
    def slot_count(options: CollectorOptions) -> int:
        return 2 if options.prefetch else 1

    def iterator(self) -> Iterator[TensorDictBase | None]:
        prefetch = self.options.prefetch
        slot = self.batches % (2 if prefetch else 1)
        if not self.pool.busy() and self.more_wanted(0):
            self._dispatch_all(slot)
        while self.pool.busy():
            self.frames += self._gather(slot)
            self.batches += 1
            if prefetch and self.more_wanted(0):
                self._dispatch_all(slot ^ 1)  # workers fill the other slot while this one is used
            yield from self.delivery.outputs(self.slots.batch(slot, self.num_workers))
            if prefetch:
                slot ^= 1
            elif self.more_wanted(0):  # after the learner had the batch: its new weights are used
                self._dispatch_all(slot)
        self.refuse_if_closed()

    def _dispatch_all(self, slot: int) -> None:
        if self.slots.stop_flags is not None:
            self.slots.stop_flags[slot] = 0
        self.unsent.requested()
        self.hooks.receive()  # once: every worker of a synchronous batch runs the same version
        random = self.hooks.in_warmup(self.frames, self.frames_in_flight())  # the whole batch, as in TorchRL
        for worker in range(self.num_workers):
            self.dispatch(worker, slot, receive=False, random=random)

    def _gather(self, slot: int) -> int:
        """Wait for every worker's rows of ``slot``; preempt the late ones; return the frames."""
        waiting, frames = set(range(self.num_workers)), 0
        threshold = self.options.preemptive_threshold  # TorchRL's count: under 1, the last is stopped
        needed = None if threshold is None or threshold >= 1 else int(threshold * self.num_workers)
        while waiting:
            if needed is not None and self.num_workers - len(waiting) >= needed:
                assert self.slots.stop_flags is not None
                self.slots.stop_flags[slot] = 1  # the rest stop at their next step (0: every one, now)
            for worker, report in self.pool.wait(sorted(waiting)):
                frames += self.account(worker, report)
                waiting.discard(worker)
        return frames

    def drop_ahead(self) -> None:
        return  # nothing is collected ahead of the batch asked for

    def pending_batches(self, reports: int) -> int:
        return reports // self.num_workers


class AsyncSchedule(Schedule):
    """A batch is one worker's rows, yielded as soon as it reports; the worker fills its other
    slot meanwhile."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._redo: dict[int, int] = {}  # worker -> slot whose batch drop_ahead dropped: to fill again

    @staticmethod
    def check(options: CollectorOptions) -> None:
        if options.preemptive_threshold is not None:
            raise ValueError("preemptive_threshold applies to synchronous collection only")
        if options.prefetch:
            raise ValueError("prefetch=True applies to synchronous collection only: asynchronous "
                             "workers never wait anyway")

    @staticmethod
    def batch_workers(workers: int) -> int:
        return 1

    @staticmethod
    def slot_count(options: CollectorOptions) -> int:
        return 2

    def iterator(self) -> Iterator[TensorDictBase | None]:
        pool = self.pool
        while True:
            self._dispatch_idle()
            if not pool.busy():
                break
            worker, report = pool.wait_one(sorted(pool.busy()))
            self.frames += self.account(worker, report)
            self.batches += 1
            if self.more_wanted(self.frames_in_flight()):
                self.dispatch(worker, report.slot ^ 1)  # it fills its other slot meanwhile
            yield from self.delivery.outputs(self.slots.rows(report.slot, worker))
        self.refuse_if_closed()

    def _dispatch_idle(self) -> None:
        """Hand a batch to each idle worker while more frames are wanted: every worker at the
        start, later those whose batch collected ahead was dropped (into its freed slot)."""
        pool = self.pool
        for worker in range(self.num_workers):
            if worker not in pool.busy() and self.more_wanted(self.frames_in_flight()):
                self.dispatch(worker, self._redo.pop(worker, self.batches % 2))

    def drop_ahead(self) -> None:
        for worker, report in self.pool.discard_pending():
            self.weights.release(worker)
            self._redo[worker] = report.slot  # free again: the worker collects into it anew

    def pending_batches(self, reports: int) -> int:
        return reports
