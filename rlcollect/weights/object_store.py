"""Weights through Ray's object store: one ``ray.put`` per update, pulled by version.

The sender keeps, per worker, a version counter and ``{model_id: (ObjectRef, version written)}``.
Each batch request carries that small table (:meth:`ObjectStoreWeights.payload`); a worker fetches
the objects only when the version moved past the one it holds, and applies the models written
since, oldest first, as the shared-memory store does. A restarted worker starts from the table
given in its setup (:meth:`ObjectStoreWeights.receiver`).

Example (without Ray: ``put`` and ``get`` stand in for ``ray.put`` and ``ray.get``):
    >>> import torch
    >>> policy = torch.nn.Linear(2, 1)
    >>> sender = ObjectStoreWeights({"policy": policy}, num_workers=2, put=lambda x: x,
    ...                             get=lambda refs: refs)
    >>> sender.push({"policy": as_weights(torch.nn.Linear(2, 1))}, worker_ids=[1])
    >>> sender.versions
    [0, 1]
    >>> sender.receiver(1).pull({"policy": policy}, seen=0, payload=sender.payload(1))
    1
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.common.state import checked_per_worker
from rlcollect.weights.forms import apply_weights, as_weights, check_update

__all__ = ["ObjectStoreReceiver", "ObjectStoreWeights"]

# ([{model_id: (ObjectRef, version written)}], newest version): the list keeps Ray from
# resolving the refs when the payload is passed to an actor method.
Payload = tuple[list[dict[str, tuple[Any, int]]], int]


def _ray_get(refs: list[Any]) -> list[Any]:
    import ray

    return list(ray.get(refs))


class ObjectStoreReceiver:
    """A worker's side: applies the weights of a payload newer than what it holds (picklable)."""

    def __init__(self, payload: Payload, get: Callable[[list[Any]], list[Any]] | None = None) -> None:
        self.payload = payload
        self._get = get

    def pull(self, modules: Mapping[str, torch.nn.Module], seen: int, payload: Payload | None = None) -> int:
        """Apply the models written after version ``seen``; return the newest version.

        A payload older than the one held (a batch request sent again after a restart) is ignored.
        """
        if payload is not None and payload[1] >= self.payload[1]:
            self.payload = payload
        (entries,), version = self.payload
        if version <= seen:
            return max(seen, version)
        changed = sorted((written, model_id != "policy", model_id)
                         for model_id, (_, written) in entries.items() if written > seen)
        refs = list({id(entries[m][0]): entries[m][0] for _, _, m in changed}.values())
        fetched = dict(zip(map(id, refs), (self._get or _ray_get)(refs), strict=True))
        for _, _, model_id in changed:
            weights = from_arrays(fetched[id(entries[model_id][0])][model_id])
            apply_weights(modules[model_id], weights, model_id)
        return version


def to_arrays(weights: TensorDictBase) -> dict[str, np.ndarray]:
    """Weights as ``{"a.b": numpy array}``: Ray stores arrays out of band, and a worker reads them
    in place (no copy) before they are copied into its module."""
    return {".".join(key) if isinstance(key, tuple) else key: tensor.detach().cpu().numpy()
            for key, tensor in weights.items(True, True)}


def from_arrays(arrays: Mapping[str, np.ndarray]) -> TensorDictBase:
    """The inverse of :func:`to_arrays` (tensors viewing the arrays, read-only ones included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only arrays from the object store
        return as_weights({key: torch.from_numpy(array) for key, array in arrays.items()})


class ObjectStoreWeights:
    """The sender: ``{model_id: weights}`` put once per update, versions kept per worker.

    Args:
        models: the modules whose weights are served (their weights are the reference for checks).
        num_workers: workers served.
        put, get: ``ray.put`` and ``ray.get`` (defaults), replaceable for tests.
    """

    def __init__(
        self,
        models: Mapping[str, torch.nn.Module],
        num_workers: int,
        put: Callable[[Any], Any] | None = None,
        get: Callable[[list[Any]], list[Any]] | None = None,
    ) -> None:
        if put is None:
            import ray

            put = ray.put
        self._put, self._get = put, get
        self._reference = {k: as_weights(m) for k, m in models.items()}
        self.versions = [0] * num_workers
        self._entries: list[dict[str, tuple[Any, int]]] = [{} for _ in range(num_workers)]
        self._sizes: dict[int, int] = {}  # bytes of each object put, by id of its ref

    def weight_bytes(self) -> int:
        """Bytes of the weights the workers' tables still point to in the object store."""
        live = {id(ref) for entries in self._entries for ref, _ in entries.values()}
        return sum(self._sizes.get(ref, 0) for ref in live)

    def push(self, weights: Mapping[str, TensorDictBase], worker_ids: Iterable[int]) -> None:
        """Put ``weights`` in the object store once; the workers pull it with their next batch."""
        check_update(weights, self._reference)
        ref = self._put({model_id: to_arrays(td) for model_id, td in weights.items()})
        self._sizes[id(ref)] = sum(t.numel() * t.element_size() for td in weights.values()
                                   for t in td.values(True, True))
        for worker in worker_ids:
            self.versions[worker] += 1
            for model_id in weights:
                self._entries[worker][model_id] = (ref, self.versions[worker])
        live = {id(r) for entries in self._entries for r, _ in entries.values()}
        self._sizes = {key: size for key, size in self._sizes.items() if key in live}

    def payload(self, worker_idx: int) -> Payload:
        """The table sent with each batch request of ``worker_idx``."""
        return [dict(self._entries[worker_idx])], self.versions[worker_idx]

    def release(self, worker_idx: int) -> None:
        """Nothing to do: what a worker received is its own."""

    def receiver(self, worker_idx: int) -> ObjectStoreReceiver:
        """What a (re)started worker starts from: the current table."""
        return ObjectStoreReceiver(self.payload(worker_idx), self._get)

    def state_dict(self) -> dict[str, Any]:
        """Versions and the newest weights of each worker (fetched), for a resumed collector."""
        fetch = self._get or _ray_get
        newest = []
        for entries in self._entries:
            refs = {id(ref): ref for ref, _ in entries.values()}
            values = dict(zip(refs, fetch(list(refs.values())), strict=True))
            newest.append({m: (from_arrays(values[id(ref)][m]).clone(), v)
                           for m, (ref, v) in entries.items()})
        return {"kind": "ObjectStoreWeights", "versions": list(self.versions), "entries": newest}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (each worker's weights put again)."""
        checked_per_worker("ObjectStoreWeights", state, ("versions", "entries"), len(self.versions))
        self.versions = [int(v) for v in state["versions"]]
        self._entries = [
            {m: (self._put({m: to_arrays(weights)}), int(v)) for m, (weights, v) in entries.items()}
            for entries in state["entries"]
        ]
