"""A versioned weight store in shared memory: the parent writes, workers pull when it moved.

Each worker has its own copy of every model's weights and one version counter, so an update can
go to some workers only (``worker_ids``) and several models can change together: the parent
writes all of them under the worker's lock, then bumps the version; a worker pulls under the
same lock, so it never sees half an update.

Example:
    >>> import multiprocessing, torch
    >>> policy = torch.nn.Linear(2, 1)
    >>> store = WeightStore({"policy": policy}, num_workers=2, context=multiprocessing.get_context("spawn"))
    >>> store.push({"policy": as_weights(torch.nn.Linear(2, 1))}, worker_ids=[1])
    >>> store.versions.tolist()
    [0, 1]
    >>> view = store.worker_view(1)
    >>> view.pull({"policy": policy}, seen=0)
    1
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from multiprocessing.context import BaseContext
from typing import Any

import torch
from tensordict import TensorDictBase

from rlcollect.weights.forms import apply_weights, as_weights

__all__ = ["WeightStore", "WorkerWeights"]


class WorkerWeights:
    """One worker's side of the store: its weight copies, version counter and lock (picklable)."""

    def __init__(
        self, worker_idx: int, weights: dict[str, TensorDictBase], versions: torch.Tensor, lock: Any
    ) -> None:
        self.worker_idx = worker_idx
        self.weights = weights
        self.versions = versions
        self.lock = lock

    def version(self) -> int:
        """The newest version written for this worker."""
        return int(self.versions[self.worker_idx])

    def pull(self, modules: Mapping[str, torch.nn.Module], seen: int) -> int:
        """Copy the weights into ``modules`` if the version moved past ``seen``; return the version."""
        if self.version() == seen:
            return seen
        with self.lock:
            for model_id, weights in self.weights.items():
                apply_weights(modules[model_id], weights)
            return self.version()


class WeightStore:
    """Shared-memory weights per model id and worker, with a version counter per worker.

    Args:
        models: the modules whose weights are served, by model id (``"policy"``, ...).
        num_workers: workers served.
        context: the multiprocessing context the workers are started with (for the locks).
    """

    def __init__(
        self, models: Mapping[str, torch.nn.Module], num_workers: int, context: BaseContext
    ) -> None:
        self.model_ids = sorted(models)
        self._weights = [
            {k: as_weights(m).clone().share_memory_() for k, m in models.items()}
            for _ in range(num_workers)
        ]
        self.versions = torch.zeros(num_workers, dtype=torch.int64).share_memory_()
        self._locks = [context.Lock() for _ in range(num_workers)]

    def check_model_ids(self, model_ids: Iterable[str]) -> None:
        """Raise ``KeyError`` naming the known ids if one of ``model_ids`` is unknown."""
        unknown = sorted(set(model_ids) - set(self.model_ids))
        if unknown:
            raise KeyError(f"unknown model id(s) {unknown}; known: {self.model_ids}")

    def push(self, weights: Mapping[str, TensorDictBase], worker_ids: Iterable[int]) -> None:
        """Write ``{model_id: weights}`` for each worker atomically and bump its version."""
        self.check_model_ids(weights)
        for worker in worker_ids:
            with self._locks[worker]:
                for model_id, td in weights.items():
                    self._weights[worker][model_id].update_(td)
                self.versions[worker] += 1

    def worker_view(self, worker_idx: int) -> WorkerWeights:
        """What worker ``worker_idx`` needs to pull its weights."""
        return WorkerWeights(worker_idx, self._weights[worker_idx], self.versions, self._locks[worker_idx])
