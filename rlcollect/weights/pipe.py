"""Weights through the workers' pipes: serialised once per update, sent with the next batch request.

The sender keeps, per worker, a version counter and ``{model_id: (weights, version written)}``
(workers updated together share the same weights object). A worker's batch request carries the
entries written since its previous request, pickled once per distinct set of entries
(plain pickle: the bytes travel in the pipe, no shared memory); the worker applies them, oldest
first, before it collects. A restarted worker starts from every current entry.

Examples:
    >>> import torch
    >>> policy = torch.nn.Linear(2, 1)
    >>> sender = PipeWeights({"policy": policy}, num_workers=2)
    >>> sender.push({"policy": as_weights(torch.nn.Linear(2, 1))}, worker_ids=[1])
    >>> sender.versions, sender.payload(0) is None
    ([0, 1], True)
    >>> sender.receiver(0).pull({"policy": policy}, seen=0, payload=sender.payload(1))
    1
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from rlcollect.common.state import checked_per_worker
from rlcollect.weights.forms import apply_weights, as_weights, check_update

__all__ = ["PipeReceiver", "PipeWeights"]

Entries = dict[str, tuple[TensorDictBase, int]]  # model id -> (weights, version written)
Payload = tuple[int, bytes]  # (newest version, pickled entries written since the last request)


class PipeReceiver:
    """A worker's side: the entries it holds; applies those newer than its version (picklable)."""

    def __init__(self, entries: Entries, version: int) -> None:
        self.entries, self.version = dict(entries), version

    def pull(self, modules: Mapping[str, torch.nn.Module], seen: int, payload: Payload | None = None) -> int:
        """Apply the models written after version ``seen``; return the newest version.

        A payload older than the version held (a request sent again after a restart) is ignored.
        """
        if payload is not None and payload[0] > self.version:
            self.entries.update(pickle.loads(payload[1]))
            self.version = payload[0]
        changed = sorted((written, model_id != "policy", model_id)
                         for model_id, (_, written) in self.entries.items() if written > seen)
        for _, _, model_id in changed:
            apply_weights(modules[model_id], self.entries[model_id][0], model_id)
        if changed:  # applied: the module holds them now (a restarted worker gets them anew)
            self.entries = {}
        return max(seen, self.version)


class PipeWeights:
    """The sender: weights kept once per update, versions and delivery tracked per worker.

    Args:
        models: the modules whose weights are served (their weights are the reference for checks).
        num_workers: workers served.
    """

    def __init__(self, models: Mapping[str, torch.nn.Module], num_workers: int) -> None:
        self._reference = {k: as_weights(m) for k, m in models.items()}
        self.versions = [0] * num_workers
        self._delivered = [0] * num_workers  # the version each worker's last request carried
        self._entries: list[Entries] = [{} for _ in range(num_workers)]
        self._blobs: dict[tuple[Any, ...], bytes] = {}  # one pickling per distinct set of entries
        self._lock = threading.Lock()

    def weight_bytes(self) -> int:
        """Bytes of the weights held for the workers (each update's copy counted once)."""
        unique = {id(td): td for entries in self._entries for td, _ in entries.values()}
        return sum(t.numel() * t.element_size() for td in unique.values() for t in td.values(True, True))

    def push(self, weights: Mapping[str, TensorDictBase], worker_ids: Iterable[int]) -> None:
        """Keep a private copy of ``weights`` for ``worker_ids``; they get it with their next request."""
        check_update(weights, self._reference)
        copies = {m: td.detach().clone() for m, td in weights.items()}
        with self._lock:
            for worker in worker_ids:
                self.versions[worker] += 1
                for model_id, td in copies.items():
                    self._entries[worker][model_id] = (td, self.versions[worker])
            self._blobs.clear()

    def payload(self, worker_idx: int) -> Payload | None:
        """The entries written since ``worker_idx``'s previous request, pickled (``None``: none)."""
        with self._lock:
            since, version = self._delivered[worker_idx], self.versions[worker_idx]
            if version == since:
                return None
            self._delivered[worker_idx] = version
            new = {m: entry for m, entry in self._entries[worker_idx].items() if entry[1] > since}
            key = tuple(sorted((m, id(td), written) for m, (td, written) in new.items()))
            if key not in self._blobs:
                self._blobs[key] = pickle.dumps(new, protocol=pickle.HIGHEST_PROTOCOL)
            return version, self._blobs[key]

    def release(self, worker_idx: int) -> None:
        """Nothing to do: what a worker received is its own."""

    def receiver(self, worker_idx: int) -> PipeReceiver:
        """What a (re)started worker starts from: every current entry."""
        with self._lock:
            self._delivered[worker_idx] = self.versions[worker_idx]
            return PipeReceiver(self._entries[worker_idx], self.versions[worker_idx])

    def state_dict(self) -> dict[str, Any]:
        """Versions and each worker's entries, for a resumed collector."""
        return {"kind": "PipeWeights", "versions": list(self.versions),
                "entries": [dict(e) for e in self._entries]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; every worker gets its entries with its next request."""
        checked_per_worker("PipeWeights", state, ("versions", "entries"), len(self.versions))
        with self._lock:
            self.versions = [int(v) for v in state["versions"]]
            self._entries = [dict(e) for e in state["entries"]]
            self._delivered = [0] * len(self.versions)
            self._blobs.clear()
