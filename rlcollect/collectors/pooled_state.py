"""The state of a collector with workers, declared once for the parts of
:class:`~rlcollect.collectors.pooled.PooledCollector` that live in their own modules
(:mod:`~rlcollect.collectors.pool_batches`, :mod:`~rlcollect.collectors.pool_requests`);
``PooledCollector._build`` and ``_allocate`` set it.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from rlcollect.collectors.delivery import Delivery
from rlcollect.collectors.options import CollectorOptions
from rlcollect.data.buffers import BatchBuffers
from rlcollect.rollout.episodes import EpisodeRecords
from rlcollect.weights.schemes import WeightChannel, WeightSyncScheme
from rlcollect.weights.watch import UnsentEdits
from rlcollect.workers.pool import WorkerPool
from rlcollect.workers.worker import BatchReport

__all__ = ["PooledState"]


class PooledState:
    """What a collector with workers holds (see :class:`~rlcollect.collectors.pooled.PooledCollector`)."""

    options: CollectorOptions
    _busy: threading.RLock  # BaseCollector's: held while a batch is being made
    num_workers: int
    num_envs: int
    num_envs_per_worker: int
    frames_per_batch: int
    total_frames: int
    sync: bool
    _pool: WorkerPool
    _delivery: Delivery
    _weights: WeightChannel
    _unsent: UnsentEdits
    _models: dict[str, torch.nn.Module]
    _weight_sync_schemes: dict[str, WeightSyncScheme] | None
    _receiver_schemes: dict[str, WeightSyncScheme] | None
    _frames: int
    _batches: int
    _last_lag: int
    _startup_seconds: float
    _state_keys: tuple[str, ...]
    _num_slots: int  # 2 with prefetch or asynchronous workers (one filled while one is read), else 1
    _num_steps: int  # T
    _slots: list[BatchBuffers]  # empty where each worker sends its batches back whole
    _stop_flags: torch.Tensor | None  # [slots] uint8: preempt the workers filling a slot
    _tensordict: bool  # batches are a TorchRL env's own TensorDicts, sent back whole
    _whole: dict[tuple[int, int], TensorDictBase]  # (slot, worker): a worker's whole batch
    _reports: list[BatchReport | None]
    _redo: dict[int, int]  # worker -> slot whose batch collected ahead set_seed dropped: to fill again
    _returns: deque[float]
    _lengths: deque[int]
    _episode_records: EpisodeRecords

    if TYPE_CHECKING:  # the collector's own (PooledCollector, BaseCollector)
        def _ensure_started(self) -> None: ...
        def _rows(self, slot: int, worker: int) -> Any: ...
        def _poll_receivers(self) -> None: ...
        def _in_warmup(self, collected: int, in_flight: int = 0) -> bool: ...
        @property
        def _state_kind(self) -> str: ...
