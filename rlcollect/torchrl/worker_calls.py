"""TorchRL's view of a multi-process collector's workers, for the collectors of
:mod:`rlcollect.torchrl`: ``stats`` and ``state_dict`` with TorchRL's entries per worker, the
worker calls (``get_distant_attr``, ``map_fn``, ``_dump_env_transform``) as TorchRL's workers answer
them, and the ``pipes`` a legacy weight updater sends its updates through.

Examples:
    >>> from rlcollect.torchrl import MultiSyncCollector
    >>> with MultiSyncCollector(["CartPole-v1"] * 2, frames_per_batch=8) as collector:
    ...     state = collector.state_dict()
    ...     sorted(key for key in state if key.startswith("worker"))
    ['worker0', 'worker1', 'workers']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlcollect.data.attributes import call_path, resolve_path, worker_entries
from rlcollect.torchrl.pipes import worker_pipes
from rlcollect.torchrl.stats import update_and_note, worker_state_dict, worker_stats

__all__ = ["WorkerCalls"]


class WorkerCalls:
    """TorchRL's view of a collector's workers, shared by the multi-process collectors here: its
    ``stats`` and ``state_dict`` entries per worker, ``map_fn``, ``_dump_env_transform`` and the
    ``pipes`` a legacy weight updater sends its updates through (:mod:`rlcollect.torchrl.pipes`)."""

    stats = worker_stats
    state_dict = worker_state_dict
    _update_weights = update_and_note
    pipes = property(worker_pipes)

    def get_distant_attr(self, attr: str) -> list[Any]:
        """Each worker's attribute at ``attr``; a path into the replay buffer that the collector
        extends itself is read on that buffer (:meth:`_shared_buffer`)."""
        if self._shared_buffer(attr):
            return [resolve_path(self, attr)] * self.num_workers
        results: list[Any] = super().get_distant_attr(attr)  # type: ignore[misc]
        return results

    def _shared_buffer(self, path: str) -> bool:
        """Whether ``path`` leads into the collector's replay buffer while its workers hold none.
        TorchRL's workers share the collector's buffer, so their ``replay_buffer`` is the one the
        collector extends; rlcollect's workers extend only a buffer they can write themselves (an
        rlcollect ``ReplayBuffer`` on shared storage), and the collector extends the others."""
        if path != "replay_buffer" and not path.startswith("replay_buffer."):
            return False
        if getattr(self, "replay_buffer", None) is None:
            return False
        return all(cls is type(None) for cls in self.call_workers("replay_buffer.__class__"))

    def map_fn(self, method_name: str, list_of_args: Sequence[Sequence[Any]] | None = None,
               list_of_kwargs: Sequence[Mapping[str, Any]] | None = None) -> list[Any]:
        """``map_fn`` whose workers answer ``get_policy_version`` with None where the collector does
        (TorchRL's layout without ``track_policy_version``), as TorchRL's workers; a method of the
        replay buffer the collector extends itself is called on that buffer (:meth:`_shared_buffer`)."""
        if self._shared_buffer(method_name):
            args, kwargs = worker_entries(self.num_workers, list_of_args or [()] * self.num_workers,
                                          list_of_kwargs)
            return [call_path(self, method_name, a or (), k) for a, k in zip(args, kwargs, strict=True)]
        results: list[Any] = super().map_fn(method_name, list_of_args, list_of_kwargs)  # type: ignore[misc]
        if method_name == "get_policy_version" and getattr(self, "policy_version", None) is None:
            return [None] * len(results)
        return results

    if TYPE_CHECKING:  # the collector's own
        num_workers: int
        replay_buffer: Any
        policy_version: int | None

        def call_workers(self, path: str, args: Sequence[Sequence[Any]] | None = None,
                         kwargs: Sequence[Mapping[str, Any]] | None = None) -> list[Any]: ...

    def _dump_env_transform(self, step: int | None = None) -> None:
        """TorchRL's call: each worker's env transform writes what it gathered."""
        self.map_fn("_dump_env_transform", list_of_kwargs=[{"step": step}] * self.num_workers)
