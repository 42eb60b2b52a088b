"""TorchRL's ``stats()`` and ``state_dict()`` forms, from rlcollect's counters and states.

Examples:
    >>> stats = TorchRLStats({"frames": 16}, CollectorStats(frames=16, fps=100.0))
    >>> stats["frames"], stats.fps
    (16, 100.0)
"""

from __future__ import annotations

from typing import Any

from rlcollect.collectors import CollectorStats
from rlcollect.collectors.pooled import PooledCollector

__all__ = ["TorchRLStats", "torchrl_stats", "worker_state_dict", "worker_stats"]


class TorchRLStats(dict[str, Any]):
    """What ``stats()`` returns in this module: TorchRL's snapshot, a JSON-serializable dict
    (``frames``, ``batches``, ``total_frames``, ``completed``, ``requested_frames_per_batch``,
    ``policy_version`` when tracked; ``workers``, ``workers_alive``, ``worker_frames`` and
    ``worker_<i>/<counter>`` for the collectors with workers), whose attributes are rlcollect's
    :class:`~rlcollect.collectors.CollectorStats` (``stats().fps``, ``stats().mean_return``).

    Examples:
        >>> TorchRLStats({"frames": 16}, CollectorStats(frames=16, fps=100.0)).fps
        100.0
    """

    def __init__(self, entries: dict[str, Any], native: CollectorStats) -> None:
        super().__init__(entries)
        self.native = native

    def __getattr__(self, name: str) -> Any:
        if name == "native":  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.native, name)


_WORKER_VIEWS = ("aggregate", "per_worker", "both")


def torchrl_stats(collector: Any, native: CollectorStats, workers: str | None) -> TorchRLStats:
    """TorchRL's ``stats()`` entries from rlcollect's counters; ``workers`` is ``None`` for a
    collector without workers, else TorchRL's view: ``"aggregate"``, ``"per_worker"``, ``"both"``."""
    if workers is not None and workers not in _WORKER_VIEWS:
        raise ValueError(f"workers must be one of 'aggregate', 'per_worker' or 'both', got {workers!r}")
    entries: dict[str, Any] = {}
    if workers in (None, "aggregate", "both"):
        entries.update(frames=native.frames, batches=native.batches)
        if collector.total_frames >= 0:
            entries["total_frames"] = collector.total_frames
            entries["completed"] = native.frames >= collector.total_frames
        entries["requested_frames_per_batch"] = collector.requested_frames_per_batch
        if collector.options.track_policy_version:
            entries["policy_version"] = native.policy_version
    if workers is not None:
        # a worker that dies is restarted or fails the collector at once: all are alive while it runs
        entries.update(workers=len(native.workers),
                       workers_alive=0 if collector._pool.closed else len(native.workers),
                       worker_frames=sum(worker.frames for worker in native.workers))
        if workers in ("per_worker", "both"):
            for i, worker in enumerate(native.workers):
                for name in ("frames", "fps", "episodes", "restarts", "policy_version"):
                    entries[f"worker_{i}/{name}"] = getattr(worker, name)
    return TorchRLStats(entries, native)


def worker_stats(self: Any, workers: str = "aggregate", *, timeout: float | None = None) -> TorchRLStats:
    """TorchRL's snapshot (:class:`TorchRLStats`) of a collector with workers; ``timeout`` is
    accepted (nothing is waited for: the counters are this process's)."""
    return torchrl_stats(self, PooledCollector.stats(self), workers)


def worker_state_dict(self: Any) -> dict[str, Any]:
    """rlcollect's state, whose ``"workers"`` list TorchRL's layout also names ``"worker0"``,
    ``"worker1"``, ... (the same objects: each worker's ``"policy_version"`` and rollout state)."""
    state: dict[str, Any] = PooledCollector.state_dict(self)
    state.update({f"worker{index}": worker for index, worker in enumerate(state["workers"])})
    return state
