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
from rlcollect.weights.forms import as_weights

__all__ = ["TorchRLStats", "note_acting_weights", "torchrl_stats", "update_and_note", "worker_state_dict",
           "worker_stats"]


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
        if collector.options.layout.reports_policy_version():
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
    """rlcollect's state, with TorchRL's layout beside it: ``"worker0"``, ``"worker1"``, ... each
    worker's state (the objects of the ``"workers"`` list, which a load reads) with TorchRL's
    ``"policy_state_dict"`` (the policy's weights that worker acts with: those last sent to it, a
    ``state_dict()``-like dict of tensors; left out where only a ``policy_factory`` made them) and
    ``"env_state_dict"`` (empty: the envs' state is in the worker's own)."""
    state: dict[str, Any] = PooledCollector.state_dict(self)
    acting = self.__dict__.get("_torchrl_acting", {})
    for index, worker in enumerate(state["workers"]):
        entry = {**worker, "env_state_dict": {}}
        if index in acting:
            entry["policy_state_dict"] = dict(acting[index])
        state[f"worker{index}"] = entry
    return state


def note_acting_weights(collector: Any, source: Any = None, worker_ids: list[int] | None = None) -> None:
    """Remember the policy weights ``worker_ids`` (``None``: every worker) act with from now:
    ``source`` (``None``: the collector's policy module, as it is now), copied; nothing for a
    collector without workers, or without a policy module here."""
    if not isinstance(collector, PooledCollector):
        return
    if source is None:
        source = collector._models.get("policy")
        if source is None:
            return
    weights = as_weights(source).flatten_keys(".")
    copied = {key: value.clone() for key, value in weights.items()}
    acting = collector.__dict__.setdefault("_torchrl_acting", {})
    for worker in range(collector.num_workers) if worker_ids is None else worker_ids:
        acting[worker] = copied


def update_and_note(self: Any, forms: dict[str, Any], worker_ids: list[int] | None) -> None:
    """The pooled collector's ``_update_weights``, then :func:`note_acting_weights` for the policy."""
    PooledCollector._update_weights(self, forms, worker_ids)
    if "policy" in forms:
        note_acting_weights(self, forms["policy"], worker_ids)
