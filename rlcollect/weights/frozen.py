"""The channel that moves no weights (:class:`~rlcollect.weights.NoWeightSyncScheme`'s, and a
policy server's, whose policy is updated in place).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

__all__ = ["FrozenWeights"]


class _Unchanged:
    def pull(self, modules: Mapping[str, torch.nn.Module], seen: int, payload: Any = None) -> int:
        return int(payload) if payload is not None else max(seen, 0)


class FrozenWeights:
    """The channel that moves no weights: :class:`NoWeightSyncScheme`'s (every worker stays at
    version 0), and that of workers whose policy runs elsewhere (a policy server): ``version``
    gives its version, sent with each batch request to stamp the workers' own (random) frames."""

    def __init__(self, num_workers: int, version: Callable[[], int] | None = None) -> None:
        self._num_workers, self._version = num_workers, version

    @property
    def versions(self) -> list[int]:
        return [self._version() if self._version is not None else 0] * self._num_workers

    def push(self, weights: Mapping[str, TensorDictBase], worker_ids: Iterable[int]) -> None:
        return

    def payload(self, worker_idx: int) -> int | None:
        return self._version() if self._version is not None else None

    def receiver(self, worker_idx: int) -> _Unchanged:
        return _Unchanged()

    def release(self, worker_idx: int) -> None:
        return

    def weight_bytes(self) -> int:
        return 0

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return
