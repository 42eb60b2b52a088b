"""TorchRL's small accessors on a collector, which its trainers and distributed runners call.

``getattr_env`` / ``getattr_policy`` / ``getattr_rb`` read an attribute of the env, the policy
or the replay buffer (the first worker's env and policy for a collector with workers, as in
TorchRL), ``get_model(model_id)`` is the module weights of ``model_id`` go to,
``set_post_collect_hook`` the method form of the attribute, ``closed`` tells whether the
collector was shut down, and ``worker_idx`` reads ``None`` where TorchRL's does (a collector
that is not another's worker).

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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from rlcollect.collectors import BaseCollector
from rlcollect.collectors.pooled import PooledCollector

__all__ = ["TorchRLAccessors"]


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

    if TYPE_CHECKING:  # the collector's own
        replay_buffer: Any
        post_collect_hook: Any

        def receiver_model(self, model_id: str) -> torch.nn.Module: ...
        def get_distant_attr(self, attr: str) -> Any: ...
