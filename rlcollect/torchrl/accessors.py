"""TorchRL's small accessors on a collector, which its trainers and distributed runners call.

``getattr_env`` / ``getattr_policy`` / ``getattr_rb`` read an attribute of the env, the policy
or the replay buffer (the first worker's env and policy for a collector with workers, as in
TorchRL), ``get_model(model_id)`` is the module weights of ``model_id`` go to,
``set_post_collect_hook`` the method form of the attribute, ``get_distant_attr`` and ``map_fn``
read and call attributes of the collector (of each worker, with workers), ``closed`` tells whether the
collector was shut down, ``worker_idx`` reads ``None`` where TorchRL's does (a collector
that is not another's worker); and TorchRL's switches: ``_exclude_private_keys``, ``interruptor``
(none) and the keywords of ``update_policy_weights_`` meant for a legacy updater.

Examples:
    >>> from rlcollect.torchrl import Collector
    >>> collector = Collector("CartPole-v1", frames_per_batch=8)
    >>> collector.worker_idx, collector.closed
    (None, False)
    >>> collector.shutdown()
    >>> collector.closed
    True
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from rlcollect.collectors import BaseCollector
from rlcollect.collectors.pooled import PooledCollector
from rlcollect.data.attributes import resolve_path
from rlcollect.torchrl.layout import TorchRLLayout

__all__ = ["TorchRLAccessors"]

#: The keywords of rlcollect's ``update_policy_weights_`` (TorchRL passes others to its updater).
_UPDATE_KEYWORDS = frozenset(inspect.signature(BaseCollector.update_policy_weights_).parameters) - {
    "self", "updater_kwargs"}


class TorchRLAccessors:
    """TorchRL's accessors (see the module docstring), for the collectors of :mod:`rlcollect.torchrl`."""

    _shut_down = False

    def getattr_env(self, attr: str) -> Any:
        """The env's attribute ``attr`` (the first worker's env, with workers)."""
        return self._first(f"env.{attr}")

    def getattr_policy(self, attr: str) -> Any:
        """The policy's attribute ``attr`` (the first worker's policy, with workers)."""
        return self._first(f"policy.{attr}")

    def getattr_rb(self, attr: str) -> Any:
        """The replay buffer's attribute ``attr`` (``"write_count"``, which TorchRL's trainers poll)."""
        return getattr(self.replay_buffer, attr)

    def get_distant_attr(self, attr: str) -> Any:
        """The attribute at the path ``attr`` of this collector, or each worker's in worker order
        for a collector with workers (:meth:`~rlcollect.BaseCollector.call_workers`); TorchRL's
        remote helper.

        Examples:
            >>> from rlcollect.torchrl import Collector
            >>> with Collector("CartPole-v1", frames_per_batch=8) as collector:
            ...     collector.get_distant_attr("frames_per_batch")
            8
        """
        if isinstance(self, PooledCollector):
            return self.call_workers(attr)
        return resolve_path(self, attr)

    def map_fn(self, method_name: str, list_of_args: Sequence[Sequence[Any]] | None = None,
               list_of_kwargs: Sequence[Mapping[str, Any]] | None = None) -> list[Any]:
        """Call the method at the path ``method_name`` once per entry of ``list_of_args`` and
        ``list_of_kwargs`` (one call without arguments if neither is given), or, for a collector
        with workers, in each worker with its entry (``get_distant_attr``: each worker's path is
        read); the results. TorchRL's remote helper.

        Raises:
            ValueError: the two lists differ in length (with workers: do not have one entry per
                worker).
            AttributeError: the attribute is not callable.
        """
        if isinstance(self, PooledCollector):
            if list_of_args is None and list_of_kwargs is None:
                list_of_args = [()] * self.num_workers
            path = "read" if method_name == "get_distant_attr" else method_name  # the worker's name for it
            return self.call_workers(path, list_of_args, list_of_kwargs)
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

    def get_model(self, model_id: str) -> torch.nn.Module:
        """The module that weights of ``model_id`` are applied to (``"policy"``, or a path)."""
        return self.receiver_model(model_id)

    def set_post_collect_hook(self, hook: Callable[[TensorDictBase], None] | None) -> None:
        """Set ``post_collect_hook`` (TorchRL's method form, for a remote actor's handle)."""
        self.post_collect_hook = hook

    @property
    def closed(self) -> bool:
        """Whether :meth:`shutdown` was called."""
        return self._shut_down

    def shutdown(self, timeout: float | None = None, close_env: bool = True,
                 raise_on_error: bool = True) -> None:
        """rlcollect's; :attr:`closed` then reads True."""
        try:
            super().shutdown(timeout, close_env, raise_on_error)  # type: ignore[misc]
        finally:
            self._shut_down = True

    @property
    def worker_idx(self) -> int | None:
        """This collector's index among another collector's workers; ``None`` when it is none's."""
        try:
            return BaseCollector.worker_idx.fget(self)  # type: ignore[attr-defined,no-any-return]
        except RuntimeError:
            return None

    @worker_idx.setter
    def worker_idx(self, value: int | None) -> None:
        BaseCollector.worker_idx.fset(self, value)  # type: ignore[attr-defined]

    def _first(self, path: str) -> Any:
        value = self.get_distant_attr(path)
        return value[0] if isinstance(self, PooledCollector) else value

    # -- TorchRL's switches and flags --------------------------------------------------------
    _torchrl_layout: TorchRLLayout | None = None  # the collector's layout object, if TorchRL's

    @property
    def interruptor(self) -> None:
        """TorchRL's interruptor object: rlcollect builds none (``preemptive_threshold`` is a flag
        per batch slot the workers read at each step)."""
        return None

    @property
    def _weight_sync_schemes(self) -> dict[str, Any]:
        """The senders' schemes by model id (TorchRL's private name, which its trainers read)."""
        return self.weight_sync_schemes  # type: ignore[attr-defined,no-any-return]

    @property
    def _legacy_weight_updater(self) -> bool:
        """Whether updates go through a legacy ``weight_updater`` (TorchRL's private flag)."""
        return getattr(self, "weight_updater", None) is not None

    def update_policy_weights_(self, *args: Any, **kwargs: Any) -> None:
        """rlcollect's, where keywords of none of its forms go to a legacy ``weight_updater`` and
        are ignored without one, as in TorchRL."""
        if getattr(self, "weight_updater", None) is None:
            kwargs = {name: value for name, value in kwargs.items() if name in _UPDATE_KEYWORDS}
        super().update_policy_weights_(*args, **kwargs)  # type: ignore[misc]

    @property
    def _exclude_private_keys(self) -> bool:
        """Batches in TorchRL's layout leave out the keys with a part that starts with ``_`` (a
        policy's private state) unless this is set to False."""
        return self._torchrl_layout is None or not self._torchrl_layout.private_keys

    @_exclude_private_keys.setter
    def _exclude_private_keys(self, value: bool) -> None:
        if self._torchrl_layout is not None:
            self._torchrl_layout.private_keys = not value

    if TYPE_CHECKING:  # the collector's own
        replay_buffer: Any
        post_collect_hook: Any

        def receiver_model(self, model_id: str) -> torch.nn.Module: ...
