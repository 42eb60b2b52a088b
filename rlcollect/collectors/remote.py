"""What a collector exposes besides its batches, as TorchRL's collectors do: its hooks, its place
among another collector's workers, and calls on itself (``cascade_execute``) and on its workers
(``call_workers``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tensordict import TensorDictBase

from rlcollect.data.attributes import call_path, resolve_path

__all__ = ["RemoteApi", "worker_entries"]


class RemoteApi:
    """Hooks, nesting and remote calls (a part of :class:`~rlcollect.BaseCollector`)."""

    # -- hooks (TorchRL's attributes) --------------------------------------------------------
    options: Any = None
    _delivery: Any = None

    @property
    def pre_collect_hook(self) -> Callable[[], None] | None:
        """Called before each batch, where the batch is collected (in each worker, with workers).

        Settable; a collector with workers takes a new one before its first batch only (the workers
        get theirs when they start).

        Examples:
            >>> from rlcollect import Collector
            >>> calls = []
            >>> with Collector("CartPole-v1", frames_per_batch=4) as collector:
            ...     collector.pre_collect_hook = lambda: calls.append(1)
            ...     _ = collector.next()
            >>> calls
            [1]
        """
        return None if self.options is None else self.options.pre_collect_hook

    @pre_collect_hook.setter
    def pre_collect_hook(self, hook: Callable[[], None] | None) -> None:
        _check_hook("pre_collect_hook", hook)
        self._set_pre_collect_hook(hook)
        self.options = dataclasses.replace(self.options, pre_collect_hook=hook)

    @property
    def post_collect_hook(self) -> Callable[[TensorDictBase], None] | None:
        """Called with each batch before it is yielded (or written): in this process, or in each
        worker on its own batch for the multi-process collectors (as TorchRL's); settable (with
        workers, before the first batch)."""
        return None if self.options is None else self.options.post_collect_hook

    @post_collect_hook.setter
    def post_collect_hook(self, hook: Callable[[TensorDictBase], None] | None) -> None:
        _check_hook("post_collect_hook", hook)
        self._set_post_collect_hook(hook)
        self.options = dataclasses.replace(self.options, post_collect_hook=hook)

    def _set_post_collect_hook(self, hook: Callable[[TensorDictBase], None] | None) -> None:
        """Hand a new ``post_collect_hook`` to where it runs (by default: this process's delivery)."""
        self._delivery.post_collect_hook = hook

    def _set_pre_collect_hook(self, hook: Callable[[], None] | None) -> None:
        """Hand a new ``pre_collect_hook`` to what collects (a subclass's rollout or workers)."""
        raise NotImplementedError

    # -- nesting -----------------------------------------------------------------------------
    _worker_idx: int | None = None

    @property
    def worker_idx(self) -> int:
        """This collector's index among the workers of an outer collector.

        Raises:
            RuntimeError: it is not a worker of another collector.
        """
        if self._worker_idx is None:
            raise RuntimeError("worker_idx has not been set: this collector is not a worker of another "
                               "collector")
        return self._worker_idx

    @worker_idx.setter
    def worker_idx(self, value: int | None) -> None:
        self._worker_idx = value

    def cascade_execute(self, attr_path: str, *args: Any, **kwargs: Any) -> Any:
        """Call (or read) the attribute at ``attr_path`` of this collector, e.g.
        ``"_receiver_schemes['policy'].receive"`` or ``"weight_sync_schemes['policy'].strategy"``.

        Raises:
            AttributeError, KeyError, IndexError: the path does not resolve.
            ValueError: arguments given for an attribute that is not callable.
        """
        return call_path(self, attr_path, args, kwargs)

    def call_workers(self, path: str, args: Sequence[Sequence[Any]] | None = None,
                     kwargs: Sequence[Mapping[str, Any]] | None = None) -> list[Any]:
        """Read (``args`` None) or call the attribute at the path ``path`` in each of the
        collector's workers, in worker order: one entry of ``args`` (and of ``kwargs``) per
        worker, once the batches under way finish. A worker answers for its ``worker_idx``,
        ``frames_per_batch``, ``replay_buffer``, ``policy``, ``policy_version``, ``env``
        (:class:`~rlcollect.workers.worker.WorkerView`); a collector without worker processes is its
        own one worker.

        Raises:
            ValueError: ``args`` or ``kwargs`` does not have one entry per worker.
            AttributeError, KeyError, IndexError: the path does not resolve (a worker carries on).

        Examples:
            >>> from rlcollect import Collector
            >>> with Collector("CartPole-v1", frames_per_batch=8) as collector:
            ...     read = collector.call_workers("frames_per_batch")
            ...     called = collector.call_workers("stats", [()])  # one argument entry per worker
            >>> read, called[0].frames
            ([8], 0)
        """
        (entry,), (keywords,) = worker_entries(1, args, kwargs)
        return [resolve_path(self, path) if entry is None else call_path(self, path, entry, keywords)]


def worker_entries(workers: int, args: Sequence[Sequence[Any]] | None,
                   kwargs: Sequence[Mapping[str, Any]] | None
                   ) -> tuple[list[tuple[Any, ...] | None], list[dict[str, Any]]]:
    """``call_workers``'s arguments as one entry per worker (``None``: read the attribute)."""
    if args is None and kwargs is not None:
        args = [()] * len(kwargs)
    for name, entries in (("argument", args), ("keyword-argument", kwargs)):
        if entries is not None and len(entries) != workers:
            raise ValueError(f"Expected {workers} {name} entries (one per worker), got {len(entries)}")
    return ([None] * workers if args is None else [tuple(a) for a in args],
            [{}] * workers if kwargs is None else [dict(k) for k in kwargs])


def _check_hook(name: str, hook: Any) -> None:
    if hook is not None and not callable(hook):
        raise TypeError(f"{name} must be callable or None, got {type(hook).__name__} {hook!r:.80}")

