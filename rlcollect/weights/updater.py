"""The legacy weight-update path: a ``weight_updater`` object that a collector calls instead of
its weight-sync schemes (TorchRL's ``WeightUpdaterBase`` protocol).

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
"""

from __future__ import annotations

import abc
import weakref
from typing import Any

__all__ = ["WeightUpdaterBase"]


class WeightUpdaterBase(abc.ABC):
    """Moves weights for one collector; ``update_policy_weights_`` calls it with the user's arguments.

    Subclasses implement :meth:`push_weights`; :meth:`init` receives ``collector.init_updater(...)``'s
    arguments.
    """

    _collector: weakref.ReferenceType[Any] | None = None

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

    def init(self, *args: Any, **kwargs: Any) -> None:  # noqa: B027 - optional hook
        """Set-up hook, called by ``collector.init_updater(*args, **kwargs)``."""

    @abc.abstractmethod
    def push_weights(self, policy_or_weights: Any = None, worker_ids: Any = None) -> None:
        """Bring the collector's weights up to date (``None``: from wherever the updater gets them)."""

    def __call__(self, policy_or_weights: Any = None, worker_ids: Any = None, **kwargs: Any) -> None:
        self.push_weights(policy_or_weights, worker_ids, **kwargs)
