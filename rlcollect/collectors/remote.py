"""What a collector exposes besides its batches, as TorchRL's collectors do: its hooks, its place
among another collector's workers, and calls on its workers (``cascade_execute``,
``get_distant_attr``, ``map_fn``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tensordict import TensorDictBase

from rlcollect.data.attributes import call_path, resolve_path

__all__ = ["RemoteApi"]


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

    def get_distant_attr(self, attr: str) -> Any:
        """The attribute at the path ``attr`` (as :meth:`cascade_execute` reads it); a collector
        with workers returns each worker's, in worker order (TorchRL's remote helper).

        Examples:
            >>> from rlcollect import Collector
            >>> with Collector("CartPole-v1", frames_per_batch=8) as collector:
            ...     collector.get_distant_attr("frames_per_batch")
            8
        """
        return resolve_path(self, attr)

    def map_fn(self, method_name: str, list_of_args: Sequence[tuple[Any, ...]] | None = None,
               list_of_kwargs: Sequence[Mapping[str, Any]] | None = None) -> list[Any]:
        """Call the method at the path ``method_name`` once per entry of ``list_of_args`` and
        ``list_of_kwargs`` (one call without arguments if neither is given); return the results. A
        collector with workers calls it in each worker, one entry per worker (TorchRL's remote helper).

        Raises:
            ValueError: the two lists differ in length.
            AttributeError: the attribute is not callable.
        """
        if list_of_args is None:
            list_of_args = [()] * len(list_of_kwargs) if list_of_kwargs else [()]
        if list_of_kwargs is None:
            list_of_kwargs = [{}] * len(list_of_args)
        if len(list_of_args) != len(list_of_kwargs):
            raise ValueError(f"list_of_args and list_of_kwargs must have the same length, got "
                             f"{len(list_of_args)} and {len(list_of_kwargs)}")
        method = resolve_path(self, method_name)
        if not callable(method):
            raise AttributeError(f"{method_name} is not callable: map_fn calls a method "
                                 "(get_distant_attr reads an attribute)")
        return [method(*args, **kwargs) for args, kwargs in zip(list_of_args, list_of_kwargs, strict=True)]



def _check_hook(name: str, hook: Any) -> None:
    if hook is not None and not callable(hook):
        raise TypeError(f"{name} must be callable or None, got {type(hook).__name__} {hook!r:.80}")

