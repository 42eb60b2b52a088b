"""A versioned weight store in shared memory: the parent writes, workers pull when it moved.

Each worker has its own copy of every model's weights and one version counter, so an update can
go to some workers only (``worker_ids``) and several models can change together. Writes are
guarded by a sequence counter per worker (a seqlock: odd while the parent writes); a worker
copies the weights and starts over if the counter moved meanwhile, so it never keeps half an
update, and a worker killed mid-copy cannot block the parent (there is no lock to hold).

A pull applies only the models written since the worker's last pull, oldest first, so a model
nested in another (an observation normaliser inside the policy) is never overwritten by an older
copy of its parent.

Example:
    >>> import torch
    >>> policy = torch.nn.Linear(2, 1)
    >>> store = WeightStore({"policy": policy}, num_workers=2)
    >>> store.push({"policy": as_weights(torch.nn.Linear(2, 1))}, worker_ids=[1])
    >>> store.versions.tolist()
    [0, 1]
    >>> store.receiver(1).pull({"policy": policy}, seen=0)
    1
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from rlcollect.weights.forms import apply_weights, as_weights, check_model_ids, check_weights

__all__ = ["WeightStore", "WorkerWeights"]


class WorkerWeights:
    """One worker's side of the store: its weight copies, version counter and lock (picklable)."""

    def __init__(
        self,
        worker_idx: int,
        weights: dict[str, TensorDictBase],
        versions: torch.Tensor,
        written_at: torch.Tensor,
        sequence: torch.Tensor,
    ) -> None:
        self.worker_idx = worker_idx
        self.weights = weights
        self.versions = versions  # [num_workers]
        self.written_at = written_at  # [num_models]: version at which each model was last written
        self.sequence = sequence  # [num_workers]: odd while the parent writes

    def version(self) -> int:
        """The newest version written for this worker."""
        return int(self.versions[self.worker_idx])

    def pull(self, modules: Mapping[str, torch.nn.Module], seen: int, payload: object = None) -> int:
        """Copy the weights into ``modules`` if the version moved past ``seen``; return the version.

        ``payload`` is what the parent sends with each batch request; the store needs none.
        """
        for _ in range(100_000):
            before = int(self.sequence[self.worker_idx])
            if before % 2:  # the parent is writing
                time.sleep(1e-4)
                continue
            version = self.version()
            if version == seen:
                return seen
            written = self.written_at.tolist()
            changed = [i for i, v in enumerate(written) if v > seen]
            for i in sorted(changed, key=lambda i: written[i]):  # stable: ties in model order
                model_id = list(self.weights)[i]
                apply_weights(modules[model_id], self.weights[model_id], model_id)
            if int(self.sequence[self.worker_idx]) == before:
                return version
        raise TimeoutError("the weight store stayed locked: is the parent process alive?")


class WeightStore:
    """Shared-memory weights per model id and worker, with a version counter per worker.

    Args:
        models: the modules whose weights are served, by model id (``"policy"``, ...).
        num_workers: workers served.
    """

    def __init__(self, models: Mapping[str, torch.nn.Module], num_workers: int) -> None:
        # "policy" first: models nested in it are applied after it when written together
        self.model_ids = sorted(models, key=lambda k: (k != "policy", k))
        self._weights = [
            {k: as_weights(models[k]).clone().share_memory_() for k in self.model_ids}
            for _ in range(num_workers)
        ]
        self.versions = torch.zeros(num_workers, dtype=torch.int64).share_memory_()
        self._written_at = torch.zeros(num_workers, len(self.model_ids), dtype=torch.int64).share_memory_()
        self._sequence = torch.zeros(num_workers, dtype=torch.int64).share_memory_()

    def check_model_ids(self, model_ids: Iterable[str]) -> None:
        """Raise ``KeyError`` naming the known ids if one of ``model_ids`` is unknown."""
        check_model_ids(model_ids, self.model_ids)

    def push(self, weights: Mapping[str, TensorDictBase], worker_ids: Iterable[int]) -> None:
        """Write ``{model_id: weights}`` for each worker atomically and bump its version.

        Everything is checked before the first write: a rejected update changes nothing.
        """
        self.check_model_ids(weights)
        for model_id, td in weights.items():
            check_weights(model_id, td, self._weights[0][model_id])
        for worker in worker_ids:
            self._sequence[worker] += 1  # odd: readers wait or retry
            self.versions[worker] += 1
            for model_id, td in weights.items():
                self._weights[worker][model_id].update_(td)
                self._written_at[worker, self.model_ids.index(model_id)] = self.versions[worker]
            self._sequence[worker] += 1

    def state_dict(self) -> dict[str, Any]:
        """Versions and every worker's weights, for a resumed collector."""
        return {"versions": self.versions.clone(), "written_at": self._written_at.clone(),
                "weights": [{k: td.clone() for k, td in w.items()} for w in self._weights]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` in place (the workers keep their views)."""
        self.versions.copy_(state["versions"])
        self._written_at.copy_(state["written_at"])
        for mine, saved in zip(self._weights, state["weights"], strict=True):
            for model_id, td in saved.items():
                mine[model_id].update_(td)

    def payload(self, worker_idx: int) -> None:
        """What travels with each batch request: nothing, the workers read the shared memory."""
        return None

    def receiver(self, worker_idx: int) -> WorkerWeights:
        """What worker ``worker_idx`` needs to pull its weights (picklable)."""
        return WorkerWeights(
            worker_idx, self._weights[worker_idx], self.versions, self._written_at[worker_idx],
            self._sequence,
        )
