"""Frame storages: ``capacity`` flat frames in memory, shared memory or a memmap folder, written circularly.

A storage holds one tensor per key of shape ``[capacity, *frame_shape]`` (a TensorDict with batch size
``[capacity]``, laid out from the first frames it is given) and three bookkeeping tensors:

- ``count`` (int64 ``[3]``): sequence numbers handed out (``reserved_count``: the next write starts
  at slot ``reserved_count % capacity``), frames committed (``write_count``) and slots holding a
  committed frame (``len``).
- ``stamp`` (int64 ``[capacity]``): what a slot holds. ``>= 0``: a committed frame, whose value is the
  frame's sequence number; ``-1``: nothing; ``<= -2``: a frame being written by process
  ``pid = -stamp - 2``.
- ``reserved`` (int64 ``[capacity]``): the sequence number of the newest write that claimed the slot.

Writers (``extend``, possibly in several processes at once, under the lock of
:mod:`rlcollect.replay._locks`, which the kernel releases if its holder dies):

1. Under the lock: take the next sequence numbers (the range is reserved) and record them in
   ``reserved``; then, under the lock again, mark the slots still ours as being written.
2. Without the lock: copy the frames into their slots.
3. Under the lock: commit, i.e. set each slot's stamp to its frame's sequence number, and count.

If a reserved slot is still being written by an older writer (concurrent writes spanning more than
``capacity`` frames), the writer waits, lock released, until that write commits; slots claimed
meanwhile by a newer writer are left to it (their frames are already overwritten, logically). A slot
held by a process that died is taken over. So one slot is never written by two writers at once, and
a writer killed anywhere leaves a range that counts nowhere but in ``reserved_count``, that readers
skip and that later writers reuse.

Readers never return a torn frame (fields from different writes) nor an uncommitted one. ``sample``
reads the stamps of the chosen slots under the lock, copies the frames, reads the stamps again under
the lock, and keeps only frames whose two stamps are equal and ``>= 0`` (a seqlock per slot; the
others are drawn again). A writer marks a slot before touching its data and commits after, both under
the lock, so a frame overwritten during the copy shows a changed stamp; the lock's acquire/release
ordering is what makes the data copied between two equal stamps the committed frame.

Examples:
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
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.common.resources import check_memory, check_shared_memory, cleaned_shared_memory
from rlcollect.common.state import check_tensor, checked_state
from rlcollect.replay._locks import Lock, pid_alive

__all__ = ["EMPTY", "Key", "MemoryStorage", "SharedStorage", "Storage", "assemble"]

Key = str | tuple[str, ...]
EMPTY = -1
NEXT, COMMITTED, STORED = 0, 1, 2  # the entries of ``count``
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
        self._layout: dict[Key, tuple[tuple[int, ...], torch.dtype]] = {}  # frame shape and dtype per key
        self._leaves: list[torch.Tensor] = []  # the data's tensors, in the order of ``_layout``
        self._count = torch.zeros(3, dtype=torch.int64)  # the three are allocated by init()
        self._stamp = torch.empty(0, dtype=torch.int64)
        self._reserved = torch.empty(0, dtype=torch.int64)
        self._lock = self._make_lock()

    # -- where tensors live (subclasses) ---------------------------------------------------------

    def _make_lock(self) -> Lock:
        return Lock()

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype)

    def _check_room(self, need: int) -> None:  # a storage no memory of this machine holds
        check_memory(need, f"capacity={self.capacity}", "capacity, or use storage='memmap' (a folder)")

    def _allocate_data(self, template: TensorDictBase) -> TensorDictBase:
        keys = list(template.keys(True, True))
        tensors = [self._allocate((self.capacity, *t.shape[1:]), t.dtype)
                   for t in template.values(True, True)]
        return assemble(keys, tensors, self.capacity)

    def _refresh(self) -> None:
        """Pick up a layout another process created (memmap only)."""

    def close(self) -> None:
        """Close the lock's file (a ``"shared"`` storage's creator removes it, ending its use)."""
        self._lock.close()

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
            frame = sum(t[:1].numel() * t.element_size() for t in template.values(True, True))
            self._check_room(self.capacity * (frame + 3 * 8))  # the frames, their stamps and reservations
            self._count = self._allocate((3,), torch.int64)
            self._stamp = self._allocate((self.capacity,), torch.int64).fill_(EMPTY)
            self._reserved = self._allocate((self.capacity,), torch.int64).fill_(EMPTY)
            self._adopt(self._allocate_data(template.detach()))

    def _adopt(self, data: TensorDictBase) -> None:
        self._data = data
        self._leaves = [t.as_subclass(torch.Tensor) for t in data.values(True, True)]
        self._layout = _describe(data)

    def check_layout(self, frames: TensorDictBase) -> None:
        """Raise ``ValueError`` naming the difference if ``frames`` are not laid out like the storage."""
        mine, theirs = self._layout, _describe(frames)
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
        if not self.initialized or key not in self._layout:
            return None
        return self._leaves[list(self._layout).index(key)]

    # -- counters --------------------------------------------------------------------------------

    def _counter(self, which: int) -> int:
        self._refresh()
        return int(self._count.numpy()[which])

    @property
    def write_count(self) -> int:
        """Frames ever committed (not reduced by overwriting; unfinished writes are not counted)."""
        return self._counter(COMMITTED)

    @property
    def reserved_count(self) -> int:
        """Sequence numbers handed out: committed frames plus those of unfinished writes."""
        return self._counter(NEXT)

    def __len__(self) -> int:
        return self._counter(STORED)

    # -- writing ---------------------------------------------------------------------------------

    def extend(self, frames: TensorDictBase) -> torch.Tensor:
        """Write ``frames`` (batch size ``[n]``) at the cursor; return the slots written, in order.

        When ``n > capacity`` only the last ``capacity`` frames are stored (the others would be
        overwritten by them) but all ``n`` count in ``write_count``.

        Raises:
            ValueError: ``frames`` have other keys, frame shapes or dtypes than the storage (named).
        """
        if not self.initialized:
            self.init(frames)
        self.check_layout(frames)
        total = frames.batch_size[0]
        keep = min(total, self.capacity)
        sources = [frames.get(key) for key in self._layout]
        sources = [src[total - keep :] for src in sources] if keep < total else sources
        counts, stamp = self._count.numpy(), self._stamp.numpy()  # numpy: a tenth of the cost of torch ops
        with self._lock:  # reserve
            first = int(counts[NEXT]) + total - keep
            counts[NEXT] += total
            seqs = np.arange(first, first + keep, dtype=np.int64)
            slots = seqs % self.capacity
            self._reserved.numpy()[slots] = seqs
        mine = self._claim(slots, seqs)
        try:
            if mine.all():  # the usual case: contiguous copies, in two parts where the range wraps round
                start = first % self.capacity
                cut = min(keep, self.capacity - start)
                for src, dst in zip(sources, self._leaves, strict=True):
                    dst[start : start + cut].copy_(src[:cut])
                    dst[: keep - cut].copy_(src[cut:])
            else:
                rows = torch.from_numpy(np.flatnonzero(mine))
                for src, dst in zip(sources, self._leaves, strict=True):
                    dst[torch.from_numpy(slots[mine])] = src[rows].to(dst.device)
        except BaseException:  # half-written slots: empty, not left in flight for others to wait on
            with self._lock:
                stamp[slots] = np.where(mine, EMPTY, stamp[slots])
            raise
        with self._lock:
            stamp[slots] = np.where(mine, seqs, stamp[slots])
            counts[COMMITTED] += total
            counts[STORED] += np.count_nonzero(mine)
        return torch.from_numpy(slots)

    def _claim(self, slots: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """Mark the reserved slots still ours (a bool mask, returned) as being written by this process,
        once no older writer is writing any of them."""
        marker = -(os.getpid() + 2)
        stamp, reserved = self._stamp.numpy(), self._reserved.numpy()
        deadline, delay = time.monotonic() + WRITER_TIMEOUT_S, 1e-4
        while True:
            with self._lock:
                mine = reserved[slots] == seqs
                stamps = stamp[slots]
                busy = mine & (stamps <= -2)
                if not busy.any():
                    self._count.numpy()[STORED] -= np.count_nonzero(mine & (stamps >= 0))
                    stamp[slots] = np.where(mine, marker, stamps)
                    return cast(np.ndarray, mine)
            dead = [pid for pid in set((-stamps[busy] - 2).tolist()) if not pid_alive(pid)]
            if dead:  # their frames will never be committed: take the slots over
                with self._lock:
                    for pid in dead:
                        stamp[stamp == -(pid + 2)] = EMPTY
                continue
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"replay buffer slots stayed in another writer's hands for {WRITER_TIMEOUT_S:.0f} s"
                )
            time.sleep(delay)
            delay = min(2 * delay, 0.01)

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
        return list(self._layout)

    # -- whole-storage operations ----------------------------------------------------------------

    def clear(self) -> None:
        """Forget every frame (``len`` and ``write_count`` back to 0); the layout stays."""
        with self._lock:
            self._count.zero_()
            self._stamp.fill_(EMPTY)
            self._reserved.fill_(EMPTY)

    def state_dict(self) -> dict[str, Any]:
        """A snapshot (copies): capacity, counters, stamps and the ``[capacity]`` data, or None."""
        with self._lock:  # writers cannot start writing a committed slot meanwhile
            stamps = self._stamp.clone()
            stamps[stamps <= -2] = EMPTY  # frames being written are not part of the snapshot
            return {
                "capacity": self.capacity,
                "write_count": int(self._count[COMMITTED]),
                "reserved_count": int(self._count[NEXT]),
                "stamps": stamps,
                # nested dicts of tensors, not a TensorDict: loads with torch.load(weights_only=True)
                "data": None if self._data is None else assemble(self.keys, [t.clone() for t in self._leaves],
                                                                 self.capacity).to_dict(),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the contents with those of :meth:`state_dict`'s ``state`` (same capacity)."""
        checked_state("Storage", state, ["capacity", "write_count", "stamps", "data"])
        if state["capacity"] != self.capacity:
            raise ValueError(
                f"state holds a storage of capacity {state['capacity']}, "
                f"this one has capacity={self.capacity}"
            )
        check_tensor("the storage state's 'stamps'", state["stamps"], self._stamp if self.initialized else
                     torch.empty(self.capacity, dtype=torch.int64))
        data = state["data"]
        if isinstance(data, Mapping) and not isinstance(data, TensorDictBase):  # as state_dict saves it
            try:
                data = TensorDict(dict(data), batch_size=[self.capacity])
            except (RuntimeError, TypeError, ValueError) as error:
                raise ValueError(f"Storage.load_state_dict: state['data'] must hold capacity={self.capacity} "
                                 f"rows of tensors: {error}") from None
        if data is not None and not isinstance(data, TensorDictBase):
            raise TypeError(f"Storage.load_state_dict: state['data'] must be a TensorDict, a dict of "
                            f"tensors or None, got {type(data).__name__}")
        if data is None:
            self.clear()
            return
        if self.initialized:
            self.check_layout(data)
        else:
            self.init(data[:0])
        with self._lock:
            for key, dst in zip(self._layout, self._leaves, strict=True):
                dst.copy_(data.get(key))
            stamps = state["stamps"].clamp(min=EMPTY)
            self._stamp.copy_(stamps)
            self._reserved.copy_(stamps)
            self._count[NEXT] = state.get("reserved_count", state["write_count"])  # older states: none
            self._count[COMMITTED], self._count[STORED] = state["write_count"], stamps.ge(0).sum()

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
    """Tensors in shared memory, writable from the processes the storage is sent to by multiprocessing.

    Lay the storage out (``init``) before sending it to another process. Its lock file (in
    ``/dev/shm``) is removed when this storage, in the process that created it, is closed or collected.
    """

    def _make_lock(self) -> Lock:
        return Lock.temporary()

    def _check_room(self, need: int) -> None:
        check_shared_memory(need, f"a shared replay buffer of capacity={self.capacity}",
                            "capacity, or use storage='memmap' (a folder on disk, no shared memory)")

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        with cleaned_shared_memory():
            return torch.zeros(shape, dtype=dtype).share_memory_()  # type: ignore[no-untyped-call,no-any-return]

    def __getstate__(self) -> dict[str, Any]:
        if self._data is None:
            raise RuntimeError(
                "a shared replay buffer must be laid out before it is sent to another process: call "
                "buffer.init(example_batch) (or extend it once) first"
            )
        return super().__getstate__()
