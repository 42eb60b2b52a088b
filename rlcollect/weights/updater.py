"""The legacy weight-update path: a ``weight_updater`` object that a collector calls instead of
its weight-sync schemes (TorchRL's ``WeightUpdaterBase`` protocol).

An updater implements either :meth:`~WeightUpdaterBase.push_weights` whole, or the steps it is
made of, as TorchRL's updaters do: :meth:`~WeightUpdaterBase._get_server_weights` (the weights
when none are given), :meth:`~WeightUpdaterBase._maybe_map_weights`,
:meth:`~WeightUpdaterBase.all_worker_ids` and :meth:`~WeightUpdaterBase._sync_weights_with_worker`
(one worker's update); hooks registered with :meth:`~WeightUpdaterBase.register_post_hook` run
after each push.

Examples:
    >>> from rlcollect import Collector
    >>> class Counting(WeightUpdaterBase):
    ...     calls = 0
    ...     def push_weights(self, policy_or_weights=None, worker_ids=None):
    ...         self.calls += 1  # a real updater would fetch weights from a server and apply them
    >>> collector = Collector("CartPole-v1", frames_per_batch=4, weight_updater=Counting)
    >>> collector.update_policy_weights_()
    >>> collector.weight_updater.calls, collector.weight_updater.collector is collector
    (1, True)
    >>> collector.shutdown()

    The steps instead, each worker's update recorded:

    >>> class PerWorker(WeightUpdaterBase):
    ...     def __init__(self):
    ...         self.synced = []
    ...     def all_worker_ids(self):
    ...         return [0, 1]
    ...     def _sync_weights_with_worker(self, *, worker_id=None, server_weights=None):
    ...         self.synced.append((worker_id, sorted(server_weights)))
    >>> updater = PerWorker()
    >>> updater.push_weights({"weight": 1.0})
    >>> updater.synced
    [(0, ['weight']), (1, ['weight'])]
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

__all__ = ["WeightUpdaterBase"]


class WeightUpdaterBase:
    """Moves weights for one collector; ``update_policy_weights_`` calls it with the user's arguments.

    Subclasses implement :meth:`push_weights`, or :meth:`_sync_weights_with_worker` (and, as they
    need, :meth:`_get_server_weights`, :meth:`_maybe_map_weights`, :meth:`all_worker_ids`,
    :meth:`_skip_update`); :meth:`init` receives ``collector.init_updater(...)``'s arguments.
    """

    _collector: weakref.ReferenceType[Any] | None = None
    _post_hooks: list[Callable[[], Any]] | None = None

    def register_collector(self, collector: Any) -> None:
        """Attach to ``collector`` (done by the collector when the updater is given to it).

        Raises:
            RuntimeError: the updater already serves another collector.
        """
        if self.collector is not None and self.collector is not collector:
            raise RuntimeError(f"this {type(self).__name__} already serves another collector")
        self._collector = weakref.ref(collector)

    @property
    def collector(self) -> Any:
        """The collector served (``None`` before registration)."""
        return None if self._collector is None else self._collector()

    @property
    def collectors(self) -> list[Any] | None:
        """TorchRL's list form of :attr:`collector` (``None`` before registration)."""
        return None if self._collector is None else [self.collector]

    @classmethod
    def from_policy(cls, policy: Any) -> WeightUpdaterBase | None:
        """An updater made from ``policy``, for a subclass that knows how (``None``: it does not)."""
        return None

    def init(self, *args: Any, **kwargs: Any) -> None:
        """Set-up hook, called by ``collector.init_updater(*args, **kwargs)``."""

    @property
    def post_hooks(self) -> list[Callable[[], Any]]:
        """Functions called, in order, after each :meth:`push_weights`."""
        if self._post_hooks is None:
            self._post_hooks = []
        return self._post_hooks

    def register_post_hook(self, hook: Callable[[], Any]) -> None:
        """Call ``hook()`` after each :meth:`push_weights`."""
        self.post_hooks.append(hook)

    def push_weights(self, policy_or_weights: Any = None, worker_ids: Any = None) -> None:
        """Bring the workers' weights up to date: ``policy_or_weights`` (``None``: the server's,
        :meth:`_get_server_weights`), mapped by :meth:`_maybe_map_weights`, synced with each of
        ``worker_ids`` (an id, a list, or ``None``: :meth:`all_worker_ids`, or once for all when
        that is ``None`` too) but those :meth:`_skip_update` skips; then the post hooks."""
        weights = self._get_server_weights() if policy_or_weights is None else policy_or_weights
        weights = self._maybe_map_weights(weights)
        if isinstance(worker_ids, (int, torch.device)):
            worker_ids = [worker_ids]
        elif worker_ids is None:
            worker_ids = self.all_worker_ids()
        if worker_ids is None:
            self._sync_weights_with_worker(server_weights=weights)
        else:
            for worker in worker_ids:
                if not self._skip_update(worker):
                    self._sync_weights_with_worker(worker_id=worker, server_weights=weights)
        for hook in self.post_hooks:
            hook()

    def _sync_weights_with_worker(self, *, worker_id: Any = None, server_weights: Any = None) -> Any:
        """Send ``server_weights`` to worker ``worker_id`` (``None``: every worker at once)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither push_weights nor "
                                  "_sync_weights_with_worker: a WeightUpdaterBase implements one of them")

    def _get_server_weights(self) -> Any:
        """The weights to push when none are given (default ``None``)."""
        return None

    def _maybe_map_weights(self, policy_or_weights: Any) -> Any:
        """The weights to send, from what :meth:`push_weights` got: a module's weights as a
        TensorDict, a TensorDict, a dict or ``None`` as they are."""
        if isinstance(policy_or_weights, nn.Module):
            return TensorDict.from_module(policy_or_weights).data
        if policy_or_weights is None or isinstance(policy_or_weights, (TensorDictBase, dict)):
            return policy_or_weights
        raise TypeError(f"policy_or_weights must be None, a module, a TensorDict or a dict, got "
                        f"{type(policy_or_weights).__name__}")

    def all_worker_ids(self) -> list[Any] | None:
        """The workers :meth:`push_weights` updates when given none (default ``None``: one
        :meth:`_sync_weights_with_worker` call for all)."""
        return None

    def _skip_update(self, worker_id: Any) -> bool:
        """Whether :meth:`push_weights` leaves worker ``worker_id`` out this time (default never)."""
        return False

    def __call__(self, policy_or_weights: Any = None, worker_ids: Any = None, **kwargs: Any) -> None:
        self.push_weights(policy_or_weights, worker_ids, **kwargs)
