"""A versioned weight store in shared memory: the workers' policies run on shared copies.

The parent writes each update once, into a shared copy of the model's weights, and points the
updated workers at it. Each batch request carries a snapshot of the worker's pointers and version
(:meth:`WeightStore.payload`); the worker binds its modules' parameters to those copies (no copy
into the worker: workers on the same version share one copy) and stamps the batch with that
version. From the request until the worker's report (:meth:`WeightStore.release`) the copies of
its snapshot are pinned: the parent never writes a copy a worker may be running with. So an update
of idle workers (a synchronous collector between batches) rewrites their copy in place, and an
update while workers collect (``prefetch``, an asynchronous collector) goes to another copy: the
store holds one copy per version some worker runs with, plus the one written (one or two for a
synchronous collector; up to one per worker plus one when asynchronous workers, or
``worker_ids``, leave workers on different weights). A worker whose policy runs on another device
(or is compiled) copies the weights into its module instead of binding it.

An update reaches a worker with its next batch request, always: the version of every frame is
decided when the batch is asked for, never by a race with the learner.

A receiver without batch requests (a collector fed by a standalone
:class:`~rlcollect.weights.SharedMemWeightSyncScheme`) reads the shared counters directly, under a
sequence counter (a seqlock: odd while the parent writes; the reader copies again if it moved), and
copies the weights into its module.

A pull applies only the models written since the worker's last pull, oldest first, so a model
nested in another (an observation normaliser inside the policy) is never overwritten by an older
copy of its parent.

Examples:
    >>> import torch
    >>> policy = torch.nn.Linear(2, 1)
    >>> store = WeightStore({"policy": policy}, num_workers=2)
    >>> request = store.payload(1)  # worker 1 is asked for a batch: copy 0 is pinned
    >>> store.push({"policy": as_weights(torch.nn.Linear(2, 1))}, worker_ids=[1])
    >>> store.versions.tolist(), store.num_copies("policy")  # so the update goes to a second copy
    ([0, 1], 2)
    >>> store.release(1)  # its report arrived
    >>> worker_policy = torch.nn.Linear(2, 1)
    >>> store.receiver(1).pull({"policy": worker_policy}, seen=0, payload=store.payload(1))
    1
    >>> worker_policy.weight.is_shared()  # bound to the shared copy
    True
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.common.owner import check_owner
from rlcollect.common.resources import check_shared_memory, cleaned_shared_memory
from rlcollect.common.state import check_tensor, checked_state
from rlcollect.weights.forms import apply_weights, as_weights, check_update

__all__ = ["Snapshot", "WeightStore", "WorkerWeights"]

Copies = dict[tuple[str, int], TensorDictBase]  # (model id, copy index) -> shared weights


@dataclass(frozen=True)
class Snapshot:
    """What a batch request tells its worker: its version, the copy of each model to run with and
    the version each model was written at, and the copies it was never sent."""

    version: int
    pointers: tuple[int, ...]
    written_at: tuple[int, ...]
    copies: Copies | None = None


class WorkerWeights:
    """One worker's side of the store: the copies it knows, and the shared counters (picklable)."""

    def __init__(self, worker_idx: int, model_ids: list[str], copies: Copies,
                 counters: dict[str, torch.Tensor]) -> None:
        self.worker_idx, self.model_ids, self.copies = worker_idx, model_ids, dict(copies)
        self.counters = counters  # the store's shared counters (see WeightStore.__init__)
        self.bind = True  # bind CPU modules to the shared copies (else copy into them)

    def pull(self, modules: Mapping[str, torch.nn.Module], seen: int, payload: Snapshot | None = None) -> int:
        """Bring ``modules`` to the version of ``payload`` (a batch request's snapshot; ``None``:
        the newest, read from the shared counters) if it differs from ``seen``; return it."""
        if payload is None:
            return self._pull_newest(modules, seen)
        self.copies.update(payload.copies or {})
        if payload.version != seen:
            self._apply(modules, seen, payload.pointers, payload.written_at, bind=self.bind)
        return payload.version

    def _apply(self, modules: Mapping[str, torch.nn.Module], seen: int, pointers: Iterable[int],
               written_at: Iterable[int], *, bind: bool) -> None:
        pointers, written = list(pointers), list(written_at)
        changed = sorted((i for i, v in enumerate(written) if v > seen), key=lambda i: written[i])
        for i in changed:  # oldest first; ties in model order ("policy" first)
            model_id = self.model_ids[i]
            module, weights = modules[model_id], self.copies[model_id, pointers[i]]
            if bind and all(t.device.type == "cpu" for t in [*module.parameters(), *module.buffers()]):
                weights.to_module(module)  # the copy is pinned until this worker's report
            else:
                apply_weights(module, weights, model_id)

    def _pull_newest(self, modules: Mapping[str, torch.nn.Module], seen: int) -> int:
        w, counters = self.worker_idx, self.counters
        for _ in range(100_000):
            before = int(counters["sequence"][0])
            if before % 2:  # the parent is writing
                time.sleep(1e-4)
                continue
            version = int(counters["versions"][w])
            if version == seen:
                return seen
            self._apply(modules, seen, counters["pointers"][w].tolist(), counters["written_at"][w].tolist(),
                        bind=False)
            if int(counters["sequence"][0]) == before:
                return version
        raise TimeoutError("the weight store stayed locked: is the parent process alive?")


class WeightStore:
    """Shared-memory weights per model id, one copy per version in use, versions per worker.

    Args:
        models: the modules whose weights are served, by model id (``"policy"``, ...).
        num_workers: workers served.
    """

    def __init__(self, models: Mapping[str, torch.nn.Module], num_workers: int) -> None:
        # "policy" first: models nested in it are applied after it when written together
        self.model_ids = sorted(models, key=lambda k: (k != "policy", k))
        self._owner = os.getpid()  # a forked child of this process may not write the weights
        weights = {k: as_weights(models[k]) for k in self.model_ids}
        _check_room(sum(w.bytes() for w in weights.values()), ", ".join(map(repr, self.model_ids)))
        with cleaned_shared_memory():
            self._copies: dict[str, list[TensorDictBase]] = {
                k: [weights[k].clone().share_memory_()] for k in self.model_ids
            }
        workers, count = num_workers, len(self.model_ids)

        def shared(*shape: int) -> torch.Tensor:
            return torch.zeros(*shape, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call,no-any-return]

        self._counters = {
            "versions": shared(workers),  # newest version written for each worker
            "pointers": shared(workers, count),  # the copy of each model each worker should use
            "written_at": shared(workers, count),  # version at which each model was last written
            "sequence": shared(1),  # odd while the parent writes (for receivers without requests)
        }
        self.versions = self._counters["versions"]
        self._known = [{(k, 0) for k in self.model_ids} for _ in range(workers)]  # copies each worker has
        self._pinned: dict[int, tuple[int, ...]] = {}  # busy worker -> the copies of its snapshot
        self._lock = threading.Lock()  # push and payload may come from the learner and a background thread

    def num_copies(self, model_id: str) -> int:
        """Shared copies of ``model_id``'s weights held."""
        return len(self._copies[model_id])

    def weight_bytes(self) -> int:
        """Bytes of shared memory the copies take."""
        return sum(t.numel() * t.element_size() for copies in self._copies.values() for td in copies
                   for t in td.values(True, True))

    def push(self, weights: Mapping[str, TensorDictBase], worker_ids: Iterable[int]) -> None:
        """Write ``{model_id: weights}`` for ``worker_ids`` atomically and bump their versions.

        Everything is checked before the first write: a rejected update changes nothing.
        """
        check_owner(self._owner, "its shared weights")
        check_update(weights, {model_id: copies[0] for model_id, copies in self._copies.items()})
        workers = sorted(set(worker_ids))
        if not workers:
            return
        counters = self._counters
        with self._lock:
            targets = {m: self._free_copy(m, td, workers) for m, td in weights.items()}
            counters["sequence"] += 1  # odd: readers without requests wait or retry
            try:
                for model_id, td in weights.items():
                    self._copies[model_id][targets[model_id]].update_(td)
                    counters["pointers"][workers, self.model_ids.index(model_id)] = targets[model_id]
                self.versions[workers] += 1
                for model_id in weights:
                    counters["written_at"][workers, self.model_ids.index(model_id)] = self.versions[workers]
            finally:
                counters["sequence"] += 1

    def _free_copy(self, model_id: str, weights: TensorDictBase, workers: list[int]) -> int:
        """A copy of ``model_id`` that no worker outside ``workers`` points to and no busy worker
        runs with; a new one if every copy is taken."""
        column = self.model_ids.index(model_id)
        others = [w for w in range(len(self.versions)) if w not in workers]
        taken = set(self._counters["pointers"][others, column].tolist()) if others else set()
        taken |= {pinned[column] for pinned in self._pinned.values()}
        copies = self._copies[model_id]
        free = next((i for i in range(len(copies)) if i not in taken), None)
        if free is None:
            _check_room(weights.bytes(), repr(model_id))
            with cleaned_shared_memory():
                copies.append(weights.clone().share_memory_())
            free = len(copies) - 1
        return free

    def payload(self, worker_idx: int) -> Snapshot:
        """Sent with each batch request of ``worker_idx``: its snapshot, whose copies stay pinned
        until :meth:`release`, with those it was never sent."""
        counters = self._counters
        with self._lock:
            pointers = tuple(counters["pointers"][worker_idx].tolist())
            self._pinned[worker_idx] = pointers
            new = {(m, pointers[i]) for i, m in enumerate(self.model_ids)} - self._known[worker_idx]
            self._known[worker_idx] |= new
            return Snapshot(int(self.versions[worker_idx]), pointers,
                            tuple(counters["written_at"][worker_idx].tolist()),
                            {key: self._copies[key[0]][key[1]] for key in new} or None)

    def release(self, worker_idx: int) -> None:
        """``worker_idx`` reported its batch: it runs with nothing until its next request."""
        with self._lock:
            self._pinned.pop(worker_idx, None)

    def receiver(self, worker_idx: int) -> WorkerWeights:
        """What worker ``worker_idx`` needs to pull its weights (picklable; every current copy)."""
        with self._lock:
            copies = {(m, i): td for m, tds in self._copies.items() for i, td in enumerate(tds)}
            self._known[worker_idx] = set(copies)
            return WorkerWeights(worker_idx, self.model_ids, copies, self._counters)

    def state_dict(self) -> dict[str, Any]:
        """Versions, pointers and the copies, for a resumed collector."""
        with self._lock:
            counters = self._counters
            return {"kind": "WeightStore", "versions": self.versions.clone(),
                    "pointers": counters["pointers"].clone(), "written_at": counters["written_at"].clone(),
                    # nested dicts of tensors: the state loads with torch.load(weights_only=True)
                    "copies": {m: [td.clone().to_dict() for td in tds] for m, tds in self._copies.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (between batches: no worker runs); new copies reach the
        workers with their next batch request."""
        state = checked_state("WeightStore", state, ["versions", "pointers", "written_at", "copies"])
        counters = self._counters
        for name, like in (("versions", self.versions), ("pointers", counters["pointers"]),
                           ("written_at", counters["written_at"])):
            check_tensor(f"the weight state's {name!r}", state[name], like)
        unknown = set(state["copies"]) - set(self._copies)
        if unknown:
            raise ValueError(f"WeightStore.load_state_dict: the state has weights of model ids "
                             f"{sorted(unknown)}; this collector's are {sorted(self._copies)}")
        saved_copies = {model_id: [td if isinstance(td, TensorDictBase) else TensorDict(td, batch_size=[])
                                   for td in saved] for model_id, saved in state["copies"].items()}
        for model_id, saved in saved_copies.items():
            ours = set(self._copies[model_id][0].keys(True, True))
            for td in saved:
                theirs = set(td.keys(True, True))
                if theirs != ours:  # a state of another model (another policy class, say)
                    raise ValueError(f"WeightStore.load_state_dict: the state's {model_id!r} weights hold "
                                     f"{sorted(map(str, theirs))}, this collector's model "
                                     f"{sorted(map(str, ours))}: the state was taken of another model")
                for key, value in td.items(include_nested=True, leaves_only=True):
                    check_tensor(f"the weight state's {model_id!r} entry {key!r}", value,
                                 self._copies[model_id][0].get(key))
        with self._lock:
            counters["sequence"] += 1
            try:
                for model_id, saved in saved_copies.items():
                    copies = self._copies[model_id]
                    for index, td in enumerate(saved):
                        if index < len(copies):
                            copies[index].update_(td)
                        else:
                            copies.append(td.clone().share_memory_())
                self.versions.copy_(state["versions"])
                counters["pointers"].copy_(state["pointers"])
                counters["written_at"].copy_(state["written_at"])
            finally:
                counters["sequence"] += 1


def _check_room(need: int, models: str) -> None:
    """``/dev/shm`` can hold one more shared copy of ``models``' weights (``need`` bytes)."""
    check_shared_memory(need, f"a shared copy of the weights of {models}",
                        "weight_sync_schemes={'policy': MultiProcessWeightSyncScheme()} (weights through "
                        "the workers' pipes, no shared memory)")
