"""Where a collector's batches land, chosen once from what its rollout (or probe) found: the
``[N, T]`` buffers of a batch layout (:class:`BufferSlots`), or, for a TorchRL env whose data no
layout holds, each worker's whole TensorDict (:class:`WholeSlots`). The collector, the schedule,
the workers' setups and the delivery ask the slots, never which kind they are.

Worker ``w`` fills rows ``[w * M, (w + 1) * M)`` of a slot; a synchronous collector uses one slot
(two with ``prefetch``), an asynchronous one two per worker.

Examples:
    >>> from rlcollect.data.layout import BatchLayout, Field
    >>> layout = BatchLayout((Field(("observation",), (4,), torch.float32),),
    ...                      Field(("action",), (), torch.int64))
    >>> slots = allocate_slots(1, layout, workers=2, envs_per_worker=2, steps=3, shared=False, masked=False)
    >>> slots.batch(0, 2).batch_size, slots.rows(0, 1).batch_size, slots.stacked
    (torch.Size([4, 3]), torch.Size([2, 3]), False)
"""

from __future__ import annotations

import abc

import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import BatchLayout, Field
from rlcollect.workers.wire import unpack_into
from rlcollect.workers.worker import BatchReport

__all__ = ["BufferSlots", "Slots", "WholeSlots", "allocate_slots"]


class Slots(abc.ABC):
    """The slots of a collector's workers and the flags that preempt the workers filling one.

    Attributes:
        layout: the batch layout of the buffers (``None``: whole TensorDicts).
        stacked: whether a batch of several workers is a stack of their TensorDicts
            (``[workers, *batch, T]``) rather than one ``[N, T]`` buffer.
        writable: whether the workers can write a replay buffer themselves.
    """

    layout: BatchLayout | None = None
    stacked = False
    writable = False

    def __init__(self, envs_per_worker: int, stop_flags: torch.Tensor | None) -> None:
        self.envs_per_worker, self.stop_flags = envs_per_worker, stop_flags  # [slots] uint8

    #: The info fields laid out in the buffers (``None``: the env's own, whole).
    infos: tuple[Field, ...] | None = None

    @abc.abstractmethod
    def rows(self, slot: int, worker: int) -> TensorDictBase:
        """Worker ``worker``'s rows of ``slot``."""

    @abc.abstractmethod
    def batch(self, slot: int, workers: int) -> TensorDictBase:
        """Every worker's rows of ``slot``."""

    @abc.abstractmethod
    def take(self, report: BatchReport, worker: int) -> None:
        """Take in the rows a worker's report carries (none where it wrote them in place)."""

    @abc.abstractmethod
    def target(self, slot: int) -> BatchBuffers | None:
        """The buffers a rollout in this process fills for ``slot`` (``None``: it makes its own batch)."""

    @abc.abstractmethod
    def template(self) -> TensorDictBase:
        """A zero-filled batch shaped as a slot's (``NotImplementedError`` before any is collected,
        where batches are a TorchRL env's own TensorDicts)."""

    def storages(self, rows: slice) -> tuple[torch.Tensor, ...] | None:
        """What a worker writes its ``rows`` into in place (``None``: it sends them)."""
        return None


class BufferSlots(Slots):
    """Preallocated ``[N, T]`` buffers, one per slot (shared memory for worker processes)."""

    writable = True

    def __init__(self, buffers: list[BatchBuffers], envs_per_worker: int, stop_flags: torch.Tensor | None
                 ) -> None:
        super().__init__(envs_per_worker, stop_flags)
        self.buffers, self.layout = buffers, buffers[0].layout
        self.infos = self.layout.infos

    def rows(self, slot: int, worker: int) -> TensorDictBase:
        envs = self.envs_per_worker
        return self.buffers[slot].batch[worker * envs : (worker + 1) * envs]

    def batch(self, slot: int, workers: int) -> TensorDictBase:
        return self.buffers[slot].batch

    def take(self, report: BatchReport, worker: int) -> None:
        if report.data is not None:  # a worker elsewhere (a Ray actor) sends its rows
            unpack_into(report.data, self.rows(report.slot, worker))

    def storages(self, rows: slice) -> tuple[torch.Tensor, ...]:
        return tuple(buffers.storage[rows] for buffers in self.buffers)

    def target(self, slot: int) -> BatchBuffers:
        return self.buffers[slot]

    def template(self) -> TensorDictBase:
        return self.buffers[0].batch.clone().zero_()


class WholeSlots(Slots):
    """Each worker's whole TensorDict by (slot, worker): a TorchRL env's data, which no layout holds."""

    stacked = True

    def __init__(self, envs_per_worker: int, stop_flags: torch.Tensor | None) -> None:
        super().__init__(envs_per_worker, stop_flags)
        self.whole: dict[tuple[int, int], TensorDictBase] = {}

    def rows(self, slot: int, worker: int) -> TensorDictBase:
        return self.whole[slot, worker]

    def batch(self, slot: int, workers: int) -> TensorDictBase:
        out = LazyStackedTensorDict.maybe_dense_stack([self.whole[slot, w] for w in range(workers)], 0)
        out.names = [None] * (out.batch_dims - 1) + ["time"]
        return out

    def take(self, report: BatchReport, worker: int) -> None:
        assert report.batch is not None
        self.whole[report.slot, worker] = report.batch

    def target(self, slot: int) -> None:
        return None

    def template(self) -> TensorDictBase:
        raise NotImplementedError("fake_tensordict is not available: the batches are the TorchRL env's own "
                                  "tensordicts (no batch layout holds them), known once collected")


def allocate_slots(count: int, layout: BatchLayout | None, workers: int, envs_per_worker: int, steps: int,
                   *, shared: bool, masked: bool) -> Slots:
    """``count`` slots of ``workers * envs_per_worker`` envs and ``steps`` steps: buffers of
    ``layout`` (in shared memory if ``shared``), or whole TensorDicts without one; stop flags if
    ``masked``."""
    flags = torch.zeros(count, dtype=torch.uint8).share_memory_() if masked else None  # type: ignore[no-untyped-call]
    if layout is None:
        return WholeSlots(envs_per_worker, flags)
    buffers = BatchBuffers.allocate_slots(count, layout, workers * envs_per_worker, steps, shared=shared,
                                          masked=masked)
    return BufferSlots(buffers, envs_per_worker, flags)
