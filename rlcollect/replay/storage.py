"""Frame storages: ``capacity`` flat frames in memory, shared memory or a memmap folder, written circularly.

A storage holds one tensor per key of shape ``[capacity, *frame_shape]`` (a TensorDict with batch size
``[capacity]``, laid out from the first frames it is given) and three bookkeeping tensors:

- ``count`` (int64 ``[1]``): frames ever written (``write_count``); the next write starts at slot
  ``count % capacity``.
- ``stamp`` (int64 ``[capacity]``): what a slot holds. ``>= 0``: a committed frame, whose value is the
  frame's sequence number (the ``count`` it was written at); ``-1``: nothing; ``<= -2``: a frame being
  written by process ``pid = -stamp - 2``.
- ``reserved`` (int64 ``[capacity]``): the sequence number of the newest write that claimed the slot.

Writers (``extend``, possibly in several processes at once; the lock is a thread lock, a
multiprocessing lock or a file lock, see :mod:`rlcollect.replay._locks`):

1. Under the lock: take ``count`` as the first sequence number and add the number of frames (the
   range is reserved), record the range in ``reserved``, and mark its slots as being written. One
   tiny critical section: a few slice assignments, no frame data.
2. Without the lock: copy the frames into their slots.
3. Under the lock: commit, i.e. set each slot's stamp to its frame's sequence number.

If a reserved slot is still being written by an older writer (concurrent writes spanning more than
``capacity`` frames), the writer waits, lock released, until that write commits; slots claimed
meanwhile by a newer writer are left to it (their frames are already overwritten, logically). A slot
held by a process that died is taken over. So one slot is never written by two writers at once.

Readers never return a torn frame (fields from different writes). ``sample`` reads the stamps of the
chosen slots under the lock, copies the frames, reads the stamps again under the lock, and keeps only
frames whose two stamps are equal and ``>= 0`` (a seqlock per slot; the others are drawn again). A
writer marks a slot before touching its data and commits after, both under the lock, so a frame
overwritten during the copy shows a changed stamp; the lock's acquire/release ordering is what makes
the data copied between two equal stamps the committed frame.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> storage = MemoryStorage(4)
    >>> frames = TensorDict({"x": torch.arange(6.0)}, batch_size=[6])
    >>> storage.init(frames)
    >>> storage.extend(frames)  # 6 frames into 4 slots: the last 4 are kept
    tensor([2, 3, 0, 1])
    >>> len(storage), storage.write_count, storage.leaf("x")
    (4, 6, tensor([4., 5., 2., 3.]))
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.replay._locks import Lock, ProcessLock, ThreadLock, pid_alive

__all__ = ["EMPTY", "Key", "MemoryStorage", "SharedStorage", "Storage", "assemble"]

Key = str | tuple[str, ...]
EMPTY = -1
#: How long a writer waits for a slot that another live writer is still writing.
WRITER_TIMEOUT_S = 60.0


def assemble(keys: Sequence[Key], tensors: Sequence[torch.Tensor], size: int) -> TensorDict:
    """A TensorDict of batch size ``[size]`` holding ``tensors`` under (possibly nested) ``keys``."""
    root: dict[str, Any] = {}
    for key, tensor in zip(keys, tensors, strict=True):
        parts = (key,) if isinstance(key, str) else key
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = tensor
    return TensorDict(root, batch_size=[size])


def _describe(data: TensorDictBase) -> dict[Key, tuple[tuple[int, ...], torch.dtype]]:
    """Per leaf: the shape of one frame and the dtype."""
    return {key: (tuple(t.shape[1:]), t.dtype) for key, t in data.items(True, True)}


class Storage:
    """``capacity`` frames and their bookkeeping; subclasses decide where the tensors live."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: TensorDictBase | None = None
        self._keys: list[Key] = []
        self._leaves: list[torch.Tensor] = []  # the data's tensors, in the order of ``_keys``
        self._count = torch.zeros(1, dtype=torch.int64)  # the three are allocated by init()
        self._stamp = torch.empty(0, dtype=torch.int64)
        self._reserved = torch.empty(0, dtype=torch.int64)
        self._lock: Lock = self._make_lock()

    # -- where tensors live (subclasses) ---------------------------------------------------------

    def _make_lock(self) -> Lock:
        return ThreadLock()

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype)

    def _allocate_data(self, template: TensorDictBase) -> TensorDictBase:
        keys = list(template.keys(True, True))
        tensors = [self._allocate((self.capacity, *t.shape[1:]), t.dtype)
                   for t in template.values(True, True)]
        return assemble(keys, tensors, self.capacity)

    def _refresh(self) -> None:
        """Pick up a layout another process created (memmap only)."""

    # -- layout ----------------------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        """Whether the layout (keys, shapes, dtypes) is fixed and the tensors allocated."""
        self._refresh()
        return self._data is not None

    @property
    def data(self) -> TensorDictBase:
        """The ``[capacity]`` TensorDict of frames (slots never written hold zeros)."""
        if not self.initialized:
            raise RuntimeError("the storage has no layout yet: extend it or call init(example) first")
        assert self._data is not None
        return self._data

    def init(self, template: TensorDictBase) -> None:
        """Lay out the storage like the frames of ``template`` (batch size ``[n]``, ``n`` may be 0).

        Raises:
            ValueError: the storage already has another layout.
        """
        with self._lock:  # two threads extending a new buffer: one lays it out
            if self._data is not None:
                self.check_layout(template)
                return
            self._count = self._allocate((1,), torch.int64)
            self._stamp = self._allocate((self.capacity,), torch.int64).fill_(EMPTY)
            self._reserved = self._allocate((self.capacity,), torch.int64).fill_(EMPTY)
            self._adopt(self._allocate_data(template.detach()))

    def _adopt(self, data: TensorDictBase) -> None:
        self._data = data
        self._keys = list(data.keys(True, True))
        self._leaves = [t.as_subclass(torch.Tensor) for t in data.values(True, True)]

    def check_layout(self, frames: TensorDictBase) -> None:
        """Raise ``ValueError`` naming the difference if ``frames`` are not laid out like the storage."""
        mine, theirs = _describe(self.data), _describe(frames)
        if mine == theirs:
            return
        missing, extra = set(mine) - set(theirs), set(theirs) - set(mine)
        if missing or extra:
            raise ValueError(
                f"frames have keys unlike the buffer's: missing {sorted(map(str, missing))}, "
                f"unexpected {sorted(map(str, extra))}"
            )
        key = next(k for k in mine if mine[k] != theirs[k])
        raise ValueError(
            f"frames' {key!r} has frame shape {theirs[key][0]} and dtype {theirs[key][1]}, "
            f"the buffer stores {mine[key][0]} and {mine[key][1]}"
        )

    def leaf(self, key: Key) -> torch.Tensor | None:
        """The ``[capacity, ...]`` tensor stored under ``key``, or None if there is no such key."""
        if not self.initialized or key not in self._keys:
            return None
        return self._leaves[self._keys.index(key)]

    # -- counters --------------------------------------------------------------------------------

    @property
    def write_count(self) -> int:
        """Frames ever written (not reduced by overwriting)."""
        self._refresh()
        return int(self._count.numpy()[0])

    def __len__(self) -> int:
        return min(self.write_count, self.capacity)

    # -- writing ---------------------------------------------------------------------------------

    def _sources(self, frames: TensorDictBase) -> list[torch.Tensor]:
        """``frames``' tensors in the storage's key order, checked against the layout."""
        try:
            sources = [frames.get(key) for key in self._keys]
        except KeyError:
            sources = []
        if len(sources) != len(self._keys) or len(list(frames.keys(True, True))) != len(self._keys):
            self.check_layout(frames)
        for src, dst in zip(sources, self._leaves, strict=True):
            if src.dtype != dst.dtype or src.shape[1:] != dst.shape[1:]:
                self.check_layout(frames)
        return sources

    def _segments(self, first: int, n: int) -> list[tuple[int, int, int]]:
        """Slot ranges ``[a, b)`` for sequence numbers ``first .. first + n``, with the source offset."""
        start = first % self.capacity
        if start + n <= self.capacity:
            return [(start, start + n, 0)]
        return [(start, self.capacity, 0), (0, n - (self.capacity - start), self.capacity - start)]

    def extend(self, frames: TensorDictBase) -> torch.Tensor:
        """Write ``frames`` (batch size ``[n]``) at the cursor; return the slots written, in order.

        When ``n > capacity`` only the last ``capacity`` frames are stored (the others would be
        overwritten by them) but all ``n`` count in ``write_count``.
        """
        if not self.initialized:
            self.init(frames)
        total = frames.batch_size[0]
        sources = self._sources(frames)
        keep = min(total, self.capacity)
        if keep < total:
            sources = [src[total - keep :] for src in sources]
        marker = -(os.getpid() + 2)
        with self._lock:  # reserve and mark: the only critical section before the copy
            first = int(self._count[0]) + total - keep
            self._count += total
            seqs = torch.arange(first, first + keep)
            segments = self._segments(first, keep)
            busy = False
            for a, b, o in segments:
                self._reserved[a:b] = seqs[o : o + b - a]
                busy = busy or bool((self._stamp[a:b] <= -2).any())
            if not busy:
                for a, b, _ in segments:
                    self._stamp[a:b] = marker
        if busy:
            self._write_when_free(seqs, sources, marker)
            return seqs % self.capacity
        try:
            for src, dst in zip(sources, self._leaves, strict=True):
                for a, b, o in segments:
                    dst[a:b].copy_(src[o : o + b - a])
        except BaseException:  # half-written slots: empty, not left in flight for others to wait on
            with self._lock:
                for a, b, _ in segments:
                    self._stamp[a:b] = EMPTY
            raise
        with self._lock:
            for a, b, o in segments:
                self._stamp[a:b] = seqs[o : o + b - a]
        return seqs % self.capacity

    def _write_when_free(self, seqs: torch.Tensor, sources: list[torch.Tensor], marker: int) -> None:
        """Slow path: wait until no older writer is writing our slots, then write those still ours."""
        slots = seqs % self.capacity
        deadline, delay = time.monotonic() + WRITER_TIMEOUT_S, 1e-4
        while True:
            with self._lock:
                mine = self._reserved[slots] == seqs
                stamps = self._stamp[slots]
                busy = mine & (stamps <= -2)
                if not busy.any():
                    self._stamp[slots[mine]] = marker
                    break
            dead = [pid for pid in set((-stamps[busy] - 2).tolist()) if not pid_alive(pid)]
            if dead:  # their frames will never be committed: take the slots over
                with self._lock:
                    for pid in dead:
                        self._stamp[self._stamp == -(pid + 2)] = EMPTY
                continue
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"replay buffer slots stayed in another writer's hands for {WRITER_TIMEOUT_S:.0f} s"
                )
            time.sleep(delay)
            delay = min(2 * delay, 0.01)
        positions = mine.nonzero().squeeze(1)
        try:
            for src, dst in zip(sources, self._leaves, strict=True):
                dst[slots[positions]] = src[positions].to(dst.device)
        except BaseException:
            with self._lock:
                self._stamp[slots[positions]] = EMPTY
            raise
        with self._lock:
            self._stamp[slots[positions]] = seqs[positions]

    # -- reading ---------------------------------------------------------------------------------

    def stamps(self, slots: torch.Tensor) -> torch.Tensor:
        """The stamps of ``slots`` (any shape), read under the lock."""
        with self._lock:
            return self._stamp.index_select(0, slots.reshape(-1)).view(slots.shape)

    def gather(self, slots: torch.Tensor) -> list[torch.Tensor]:
        """Copies of the frames at ``slots`` (1-D), one tensor per key in :attr:`keys` order."""
        return [leaf.index_select(0, slots) for leaf in self._leaves]

    @property
    def keys(self) -> list[Key]:
        """The stored keys (leaves), nested keys as tuples."""
        return list(self._keys)

    # -- whole-storage operations ----------------------------------------------------------------

    def clear(self) -> None:
        """Forget every frame (``len`` and ``write_count`` back to 0); the layout stays."""
        with self._lock:
            self._count.zero_()
            self._stamp.fill_(EMPTY)
            self._reserved.fill_(EMPTY)

    def state_dict(self) -> dict[str, Any]:
        """A snapshot (copies): capacity, write count, stamps and the ``[capacity]`` data, or None."""
        with self._lock:  # writers cannot start writing a committed slot meanwhile
            stamps = self._stamp.clone()
            stamps[stamps <= -2] = EMPTY  # frames being written are not part of the snapshot
            return {
                "capacity": self.capacity,
                "write_count": int(self._count[0]),
                "stamps": stamps,
                "data": assemble(self._keys, [t.clone() for t in self._leaves], self.capacity)
                if self._data is not None
                else None,
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the contents with those of :meth:`state_dict`'s ``state`` (same capacity)."""
        if state["capacity"] != self.capacity:
            raise ValueError(
                f"state holds a storage of capacity {state['capacity']}, "
                f"this one has capacity={self.capacity}"
            )
        data: TensorDictBase | None = state["data"]
        if data is None:
            self.clear()
            return
        if self.initialized:
            self.check_layout(data)
        else:
            self.init(data[:0])
        with self._lock:
            for key, dst in zip(self._keys, self._leaves, strict=True):
                dst.copy_(data.get(key))
            stamps = state["stamps"].clamp(min=EMPTY)
            self._stamp.copy_(stamps)
            self._reserved.copy_(stamps)
            self._count.fill_(int(state["write_count"]))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_leaves"] = None  # rebuilt from _data: keeps the tensors' identities
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._leaves = []
        if self._data is not None:
            self._adopt(self._data)


class MemoryStorage(Storage):
    """Plain tensors in this process (a thread lock makes concurrent threads safe)."""



class SharedStorage(Storage):
    """Tensors in shared memory, writable from spawned processes that receive the storage.

    Lay the storage out (``init``) before sending it to another process, as an argument of the
    process being started (the multiprocessing lock travels only that way).
    """


    def _make_lock(self) -> Lock:
        return ProcessLock()

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype).share_memory_()

    def __getstate__(self) -> dict[str, Any]:
        if self._data is None:
            raise RuntimeError(
                "a shared replay buffer must be laid out before it is sent to another process: call "
                "buffer.init(example_batch) (or extend it once) first"
            )
        return super().__getstate__()
