"""``ReplayBuffer``: flat transitions from collector batches, in memory, shared memory or on disk.

A batch ``[num_envs, T]`` is stored as ``num_envs * T`` frames, env-major (each env's frames stay
consecutive, in time order); frames whose ``("collector", "mask")`` is False are padding and are
dropped, and the mask itself is not stored. Writes go round a circle of ``capacity`` slots. The storage
is laid out from the first batch (or from :meth:`ReplayBuffer.init`). How several processes write and
read one buffer is described in :mod:`rlcollect.replay.storage`; what the samplers return, in
:mod:`rlcollect.replay.samplers`.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> rb = ReplayBuffer(100, batch_size=4, seed=0)
    >>> batch = TensorDict({"observation": torch.randn(2, 8, 4)}, batch_size=[2, 8])  # [num_envs, T]
    >>> rb.extend(batch)[:3]
    tensor([0, 1, 2])
    >>> len(rb), rb.write_count
    (16, 16)
    >>> sample = rb.sample()
    >>> sample.batch_size, sorted(sample.keys())
    (torch.Size([4]), ['index', 'observation'])
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.common.state import checked_state, stamped
from rlcollect.replay.config import ReplayConfig, is_int
from rlcollect.replay.memmap import MemmapStorage, dump_storage, load_storage
from rlcollect.replay.samplers import PrioritizedSampler, make_sampler
from rlcollect.replay.storage import MemoryStorage, SharedStorage, Storage, assemble

__all__ = ["ReplayBuffer", "ReplayConfig", "flatten_batch"]

MASK_KEY = ("collector", "mask")
#: How long ``sample`` keeps drawing when every proposal is rejected before it gives up.
SAMPLE_TIMEOUT_S = 10.0
#: Proposals of committed frames, per stored frame, that ``sample`` makes before it concludes that no
#: valid group exists (e.g. no trajectory as long as ``slice_len``): the chance that it misses a single
#: valid group among ``n`` by then is ``(1 - 1/n) ** (64 n) < e**-64``.
GIVE_UP_PROPOSALS_PER_FRAME = 64


def flatten_batch(batch: TensorDictBase) -> TensorDictBase:
    """``batch`` (any batch dims, env-major) as flat frames ``[n]``, padding (mask False) dropped.

    Examples:
        >>> from tensordict import TensorDict
        >>> mask = torch.tensor([[True, True, False], [True, False, False]])
        >>> batch = TensorDict({"x": torch.arange(6).view(2, 3), ("collector", "mask"): mask}, [2, 3])
        >>> flatten_batch(batch)["x"]
        tensor([0, 1, 3])
    """
    if not isinstance(batch, TensorDictBase):
        raise TypeError(f"a replay buffer stores TensorDicts, got {type(batch).__name__}")
    if batch.batch_dims == 0:
        raise ValueError("a batch needs at least one batch dimension (frames), got batch_size=[]")
    flat = batch.flatten(0, -1) if batch.batch_dims > 1 else batch
    mask = flat.get(MASK_KEY, None)
    if mask is None:
        return flat
    flat = flat.exclude(MASK_KEY)
    return flat if bool(mask.all()) else flat[mask.reshape(-1)]


def _make_storage(config: ReplayConfig) -> Storage:
    if config.storage == "memmap":
        assert config.path is not None
        return MemmapStorage(config.path, config.capacity)
    return SharedStorage(config.capacity) if config.storage == "shared" else MemoryStorage(config.capacity)


class ReplayBuffer:
    """A circular buffer of ``capacity`` transitions, sampled uniformly, by priority or in slices.

    Args:
        capacity: frames kept; older ones are overwritten.
        storage: ``"memory"`` (this process), ``"shared"`` (shared memory: pass the buffer to spawned
            processes, which may ``extend`` it concurrently) or ``"memmap"`` (files under ``path``,
            which outlive the process; reopening the folder restores contents and cursor).
        path: the memmap folder (``storage="memmap"`` only).
        sampler: ``"uniform"``, ``"prioritized"`` (adds ``"_weight"``; see :meth:`update_priority`) or
            ``"slice"`` (``batch_size // slice_len`` slices of ``slice_len`` frames, returned flat).
        batch_size: default for :meth:`sample`.
        alpha: prioritized replay: ``P(i)`` proportional to ``(priority + eps) ** alpha``.
        beta: prioritized replay: the exponent of the importance weights.
        eps: prioritized replay: added to every priority.
        slice_len: frames per slice (``sampler="slice"`` only).
        seed: seeds the sampler's generator.

    Raises:
        ValueError: an argument out of range or a combination that does not fit (the message names it).

    Processes: a ``"shared"`` buffer must be laid out (:meth:`init` or a first :meth:`extend`) before
    multiprocessing sends it to another process (``Process(target=work, args=(rb,))``, any start
    method), while the process that created it is alive. A ``"memmap"`` buffer travels as its folder,
    any way, or is reopened by path. Every process may :meth:`extend` concurrently (see
    :mod:`rlcollect.replay.storage` for the scheme); a process killed at any point, even inside the
    buffer's lock, blocks no other and leaves no frame of its unfinished write readable. Priorities
    live in the process that samples.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> rb = ReplayBuffer(4, sampler="prioritized", seed=0)
        >>> rb.extend(TensorDict({"x": torch.arange(6.0)}, batch_size=[6]))  # the last 4 fit
        tensor([2, 3, 0, 1])
        >>> rb.update_priority(torch.tensor([0, 1, 2, 3]), torch.tensor([0.0, 0.0, 0.0, 1.0]))
        >>> rb.sample(3)["x"]  # slot 3 (x = 3.0) has nearly all the priority
        tensor([3., 3., 3.])
    """

    def __init__(
        self,
        capacity: int,
        *,
        storage: str = "memory",
        path: str | os.PathLike[str] | None = None,
        sampler: str = "uniform",
        batch_size: int | None = None,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        slice_len: int | None = None,
        seed: int | None = None,
    ) -> None:
        self.config = ReplayConfig(
            capacity, storage, None if path is None else Path(path), sampler, batch_size,
            alpha, beta, eps, slice_len, seed,
        )  # fmt: skip
        self._storage = _make_storage(self.config)
        self._sampler = make_sampler(self.config)

    # -- sizes -----------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Frames the buffer holds at most."""
        return self.config.capacity

    @property
    def batch_size(self) -> int | None:
        """Default number of frames per :meth:`sample`."""
        return self.config.batch_size

    def __len__(self) -> int:
        """Committed frames stored (at most ``capacity``): slots being written, or left by a writer that
        died, are not counted, so it dips while frames are overwritten."""
        return len(self._storage)

    @property
    def shared(self) -> bool:
        """Whether other processes can write this buffer (``"shared"`` or ``"memmap"`` storage).

        Collectors with worker processes let the workers extend such a buffer themselves.
        """
        return self.config.storage in ("shared", "memmap")

    @property
    def write_count(self) -> int:
        """Frames ever written and committed (overwritten ones included); a write under way or
        abandoned by a writer that died is not (it moves :attr:`cursor`). Reading ``data`` directly is
        only safe while writes are paused; :meth:`sample` always is."""
        return self._storage.write_count

    @property
    def cursor(self) -> int:
        """The slot the next frame goes to."""
        return self._storage.reserved_count % self.capacity

    @property
    def data(self) -> TensorDictBase:
        """The storage itself, ``[capacity]`` frames in slot order (a live view, not a sample)."""
        return self._storage.data

    # -- writing ---------------------------------------------------------------------------------

    def init(self, example: TensorDictBase) -> None:
        """Lay the storage out like ``example``'s frames (a batch as given to :meth:`extend`).

        Needed before a ``"shared"`` buffer is passed to other processes, so that they all write into
        the same tensors. Calling it again with a batch of the same layout does nothing.
        """
        self._storage.init(flatten_batch(example.exclude(MASK_KEY)))

    def extend(self, batch: TensorDictBase) -> torch.Tensor:
        """Store ``batch``'s frames (flattened env-major, padding dropped) and return their slots.

        When the batch holds more than ``capacity`` frames, only its last ``capacity`` are stored
        and returned.

        Raises:
            ValueError: the frames' keys, frame shapes or dtypes are not the buffer's (the message names
                the missing and unexpected keys, or the key with both shapes and dtypes).
        """
        return self._storage.extend(flatten_batch(batch))

    def empty(self) -> None:
        """Forget every frame and priority (``len`` and ``write_count`` back to 0); the layout stays."""
        self._storage.clear()
        self._sampler.reset()

    def close(self) -> None:
        """Remove a ``"shared"`` buffer's lock file (as collection or exit do); copies elsewhere go on."""
        self._storage.close()

    # -- sampling --------------------------------------------------------------------------------

    def sample(self, batch_size: int | None = None) -> TensorDictBase:
        """``batch_size`` frames (default: the constructor's) drawn by the sampler, with an ``"index"`` entry.

        Returns:
            A TensorDict ``[batch_size]`` of copies, plus ``"index"`` (int64 slots; pass them to
            :meth:`update_priority`) and, for the prioritized sampler, ``"_weight"``.

        Raises:
            ValueError: no batch size given, or (slice sampler) not a multiple of ``slice_len``.
            RuntimeError: nothing was ever committed, or nothing valid could be drawn (for
                ``SAMPLE_TIMEOUT_S``: meanwhile, frames being rewritten are waited for).
        """
        size = batch_size if batch_size is not None else self.config.batch_size
        if size is None:
            raise ValueError("sample() needs a batch_size: pass one here or to the constructor")
        if not is_int(size) or size <= 0:
            raise ValueError(f"batch_size must be a positive int, got batch_size={size!r}")
        group = self._sampler.group
        if size % group:
            raise ValueError(f"batch_size must be a multiple of slice_len={group}, got batch_size={size}")
        if self._storage.write_count == 0:
            raise RuntimeError("cannot sample from an empty ReplayBuffer: extend it first")
        self._sampler.sync(self._storage.reserved_count)
        slots, leaves = self._draw(size // group)
        sample = assemble(self._storage.keys, leaves, size)
        sample.set("index", slots)
        self._sampler.finish(sample, slots)
        return sample

    def _draw(self, groups: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``groups`` accepted, untorn groups: their flat slots and gathered leaves."""
        storage, sampler = self._storage, self._sampler
        pieces: list[tuple[torch.Tensor, list[torch.Tensor]]] = []
        missing, proposed, accepted = groups, 0, 0  # proposed: groups of committed frames only
        deadline = time.monotonic() + SAMPLE_TIMEOUT_S
        while missing:
            stored = len(storage)
            slots = sampler.draw(sampler.draws_for(missing), min(storage.reserved_count, self.capacity))
            before = storage.stamps(slots)
            ok = sampler.accept(slots, before, storage)
            if len(slots) != missing or not bool(ok.all()):  # else the usual case: all of them
                proposed += int((before >= 0).all(1).sum())
                slots, before = slots[ok][:missing], before[ok][:missing]
            if len(slots):
                flat = slots.reshape(-1)
                leaves = storage.gather(flat)
                after = storage.stamps(slots)  # seqlock check, see storage.py
                if not torch.equal(after, before):
                    untorn = (after == before).all(1)
                    slots, keep = slots[untorn], untorn.repeat_interleave(sampler.group)
                    flat, leaves = flat[keep], [leaf[keep] for leaf in leaves]
                    after = after[untorn]
                pieces.append((flat, leaves))
                sampler.show(flat, after.reshape(-1))  # which frames update_priority then means
                missing, accepted = missing - len(slots), accepted + len(slots)
            if not missing:
                break
            impossible = accepted == 0 and proposed > GIVE_UP_PROPOSALS_PER_FRAME * stored + 1000
            if impossible or time.monotonic() > deadline:
                raise RuntimeError(
                    f"cannot sample: {accepted} of {groups} found in {proposed} proposals; "
                    + sampler.no_sample_message(stored)
                )
        if len(pieces) == 1:
            return pieces[0]
        flat = torch.cat([p[0] for p in pieces])
        return flat, [torch.cat(parts) for parts in zip(*(p[1] for p in pieces), strict=True)]

    def update_priority(
        self, indices: torch.Tensor | Sequence[int], priorities: torch.Tensor | float
    ) -> None:
        """Set the priorities of slots ``indices`` (a sample's ``"index"``), e.g. to ``|TD error|``.

        ``priorities`` is a number or holds one value per index (any shape, e.g. ``[B, 1]``). A
        slot written over since the sample whose ``"index"`` this is (one of the last 64) keeps
        its new frame's priority.

        Raises:
            ValueError: the sampler is not prioritized, shapes differ, an index is out of range, or a
                priority is negative or not finite.
            TypeError: indices that are not integers (floats would be truncated to other slots).
        """
        sampler = self._sampler
        if not isinstance(sampler, PrioritizedSampler):
            raise ValueError(f"update_priority needs sampler='prioritized', this buffer has "
                             f"sampler={self.config.sampler!r}")
        given = torch.as_tensor(indices)
        if given.dtype == torch.bool or given.is_floating_point() or given.is_complex():
            raise TypeError(f"update_priority: indices must be integers (a sample's \"index\"), got dtype "
                            f"{given.dtype}")
        slots = given.reshape(-1).long().numpy()
        values = torch.as_tensor(priorities).detach().reshape(-1).to("cpu", torch.float64).numpy()
        if values.size == 1:
            values = np.full(slots.shape, values[0])
        if values.shape != slots.shape:
            raise ValueError(f"got {values.size} priorities for {slots.size} indices")
        if slots.size and (slots.min() < 0 or slots.max() >= self.capacity):
            raise ValueError(
                f"indices must be slots in [0, {self.capacity}), got values in [{slots.min()}, {slots.max()}]"
            )
        sampler.sync(self._storage.reserved_count)  # new frames get their default before these override it
        sampler.update_priority(slots, values, self._storage.stamps(torch.from_numpy(slots)).numpy())

    # -- state -----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """A snapshot of the contents and the sampler (generator, priorities); the settings are not in it."""
        self._sampler.sync(self._storage.reserved_count)
        return stamped("ReplayBuffer", {"storage": self._storage.state_dict(),
                                        "sampler": self._sampler.state_dict()})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a buffer with the same capacity and sampler kind.

        Raises:
            TypeError, ValueError: not a buffer's state, another capacity or sampler kind (named);
                nothing is changed then.
        """
        checked_state("ReplayBuffer", state, ["storage", "sampler"])
        sampler = state["sampler"]
        checked_state(type(self._sampler).__name__, sampler, ["rng"])  # the kind, before the contents
        self._storage.load_state_dict(state["storage"])
        self._sampler.load_state_dict(sampler)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save contents, sampler state and batch size in folder ``path`` (as TorchRL's ``dumps``).

        The folder holds ``buffer.json``, ``sampler.pt`` and ``storage/`` (a memmap storage folder).
        """
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        dump_storage(self._storage, folder / "storage")
        self._sampler.sync(self._storage.reserved_count)
        torch.save(self._sampler.state_dict(), folder / "sampler.pt")
        meta = {"capacity": self.capacity, "sampler": self.config.sampler, "batch_size": self.batch_size}
        (folder / "buffer.json").write_text(json.dumps(meta) + "\n")

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Load what :meth:`dumps` saved in ``path`` into this buffer (same capacity and sampler kind).

        As in TorchRL, the saved batch size replaces this buffer's.
        """
        folder = Path(path)
        if not (folder / "buffer.json").exists():
            raise FileNotFoundError(f"{str(path)!r} holds no dumped replay buffer (no buffer.json)")
        meta = json.loads((folder / "buffer.json").read_text())
        for name in ("capacity", "sampler"):
            if meta[name] != getattr(self.config, name):
                raise ValueError(
                    f"{str(path)!r} holds a buffer with {name}={meta[name]!r}, this one has "
                    f"{name}={getattr(self.config, name)!r}"
                )
        config = replace(self.config, batch_size=meta["batch_size"])  # checked before anything is loaded
        load_storage(self._storage, folder / "storage")
        self._sampler.load_state_dict(torch.load(folder / "sampler.pt", weights_only=True))
        self.config = config

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self.config.storage != "memory":  # a copy for another process: priorities stay here
            state["_sampler"] = self._sampler.fresh()
        return state

    def __repr__(self) -> str:
        c = self.config
        extra = f", slice_len={c.slice_len}" if c.sampler == "slice" else ""
        path = f", path={str(c.path)!r}" if c.path is not None else ""
        return (
            f"ReplayBuffer(capacity={c.capacity}, storage={c.storage!r}{path}, sampler={c.sampler!r}{extra}, "
            f"len={len(self)}, write_count={self.write_count})"
        )
