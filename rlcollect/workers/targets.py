"""Where a worker's batch goes, chosen once when the worker is built: into the parent's
shared-memory slots (:class:`SharedRows`), into a local buffer sent back packed (:class:`SentRows`:
a remote worker, a Ray actor), or, for a TensorDict rollout whose data no layout holds, the
rollout's own TensorDict sent back whole (:class:`WholeBatch`). A worker that writes the replay
buffer itself sends nothing back.

Examples:
    >>> from rlcollect.rollout.build import make_rollout
    >>> from rlcollect.rollout.engine import RolloutSpec
    >>> rollout = make_rollout(RolloutSpec("CartPole-v1", num_envs=2))
    >>> rollout.set_seed(0)  # as a worker does: the envs reset
    >>> target = batch_target(rollout, None, num_steps=4, worker_idx=0)
    >>> batch, _ = rollout.collect_batch(target.buffers(0), 4)
    >>> data, whole = target.sent(batch, writes_replay=False)
    >>> type(target).__name__, data is not None, whole is None
    ('SentRows', True, True)
    >>> rollout.close()
"""

from __future__ import annotations

from tensordict import TensorDict, TensorDictBase

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import BatchLayout
from rlcollect.rollout.build import Engine
from rlcollect.workers.wire import Packed, pack

__all__ = ["BatchTarget", "SentRows", "SharedRows", "WholeBatch", "batch_target"]

#: What a report carries back: the rows packed, or a whole batch (neither: nothing to send)
Sent = tuple[Packed | None, TensorDictBase | None]


class BatchTarget:
    """The buffers a worker's rollout fills for a slot, and what its report carries back."""

    def buffers(self, slot: int) -> BatchBuffers | None:
        """The buffers the rollout fills for slot ``slot`` (``None``: it makes its own batch)."""
        return None

    def sent(self, batch: TensorDictBase, *, writes_replay: bool) -> Sent:
        """What the report carries: the rows packed, or the whole batch (nothing where the
        parent reads them in place, or the worker wrote them to the replay buffer)."""
        return None, None


class SharedRows(BatchTarget):
    """The worker's rows of the parent's shared-memory slots: the parent reads them in place."""

    def __init__(self, slots: list[BatchBuffers]) -> None:
        self.slots = slots

    def buffers(self, slot: int) -> BatchBuffers:
        return self.slots[slot]


class SentRows(BatchTarget):
    """One local buffer, sent back packed after each batch (a worker without shared memory)."""

    def __init__(self, local: BatchBuffers) -> None:
        self.local = local

    def buffers(self, slot: int) -> BatchBuffers:
        return self.local

    def sent(self, batch: TensorDictBase, *, writes_replay: bool) -> Sent:
        return (None if writes_replay else pack(batch)), None


class WholeBatch(BatchTarget):
    """A TensorDict rollout's own batch, sent back as it is."""

    def sent(self, batch: TensorDictBase, *, writes_replay: bool) -> Sent:
        return None, (None if writes_replay else batch)


def batch_target(rollout: Engine, shared: tuple[TensorDict, ...] | None, *, num_steps: int,
                 worker_idx: int) -> BatchTarget:
    """The target of a worker's batches: ``shared`` slot storages (the parent's, this worker's
    rows), a local buffer without them, or the whole batch for a rollout without a layout.

    Raises:
        ValueError: the worker's envs do not fit the shared slots (another number of envs, or
            other spaces than the first worker's).
    """
    layout: BatchLayout | None = rollout.layout
    if layout is None:
        return WholeBatch()
    if shared is None:
        return SentRows(BatchBuffers.allocate(layout, rollout.num_envs, num_steps))
    rows = int(shared[0].batch_size[0])
    if rows != rollout.num_envs:
        raise ValueError(f"worker {worker_idx} built {rollout.num_envs} envs, the first worker {rows}: "
                         "every worker must have the same number of envs")
    if misfit := BatchBuffers.misfit(shared[0], layout):
        raise ValueError(f"worker {worker_idx}'s envs do not fit the first worker's batches ({misfit}): "
                         "every worker's envs must have the same observation and action spaces (one "
                         "batch holds them all)")
    return SharedRows([BatchBuffers(storage, layout, num_steps) for storage in shared])
