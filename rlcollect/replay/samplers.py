"""Samplers: which slots a replay buffer returns. Uniform, prioritized (sum tree) and slices of episodes.

A sampler proposes groups of slots (one slot per group, or ``slice_len`` consecutive slots for the
slice sampler), accepts or rejects each group given the slots' stamps (see
:mod:`rlcollect.replay.storage`) and, once the buffer gathered the accepted frames, adds what it
owes the sample (importance weights, slice ends). Rejected groups are drawn again, so each sampler is
uniform (or proportional) over the groups it accepts. Every sampler draws from its own seeded
``torch.Generator``; its state is part of :meth:`Sampler.state_dict`.

Priorities live in the process that samples: a copy of the buffer sent to a worker process gets a
sampler without them (workers only write).

Examples:
    >>> import torch
    >>> sampler = UniformSampler(capacity=10, seed=0)
    >>> slots = sampler.draw(4, size=3)  # 4 groups of one slot among slots 0, 1 and 2
    >>> slots.shape, bool((slots < 3).all())
    (torch.Size([4, 1]), True)
"""

from __future__ import annotations

import collections
import copy
import math
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.common.state import check_tensor, checked_state, stamped
from rlcollect.replay.config import ReplayConfig
from rlcollect.replay.storage import Key, Storage
from rlcollect.replay.sum_tree import SumTree

__all__ = ["PrioritizedSampler", "Sampler", "SliceSampler", "UniformSampler", "make_sampler"]

DONE_KEY: Key = ("next", "done")
END_KEYS: tuple[Key, ...] = (("next", "terminated"), ("next", "truncated"))  # used when no done is stored
TRAJ_KEY: Key = ("collector", "traj_ids")
#: The samples whose slots and stamps a prioritized sampler keeps, for ``update_priority``.
SHOWN_KEPT = 64


class Sampler:
    """Base: uniform over stored slots, one slot per group."""

    #: Frames per drawn group.
    group = 1

    def __init__(self, capacity: int, seed: int | None = None) -> None:
        self.capacity = capacity
        self._generator = torch.Generator()
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(seed)

    def __getstate__(self) -> dict[str, Any]:
        # the generator state as bytes: pickled as a tensor, it would be moved to shared memory when
        # sent to a spawned process, a temporary whose file descriptor can be reused before it is sent
        state = self.__dict__.copy()
        state["_generator"] = self._generator.get_state().numpy().tobytes()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._generator = torch.Generator()
        self._generator.set_state(torch.frombuffer(bytearray(state["_generator"]), dtype=torch.uint8))

    def sync(self, reserved: int) -> None:
        """Account for frames written since the last call (``reserved`` sequence numbers handed out)."""

    def draws_for(self, missing: int) -> int:
        """How many groups to propose when ``missing`` are still needed."""
        return missing

    def draw(self, n: int, size: int) -> torch.Tensor:
        """``n`` proposed groups of slots, ``[n, group]`` int64, among slots ``[0, size)``."""
        return torch.randint(0, size, (n, 1), generator=self._generator)

    def accept(self, slots: torch.Tensor, stamps: torch.Tensor, storage: Storage) -> torch.Tensor:
        """Which groups to keep (bool ``[n]``): by default those whose frames are all committed."""
        return (stamps >= 0).all(1)

    def finish(self, sample: TensorDictBase, slots: torch.Tensor) -> None:
        """Add to (or amend) ``sample``, the gathered frames of ``slots`` (flat)."""

    def show(self, slots: torch.Tensor, stamps: torch.Tensor) -> None:
        """A sample handed out the frames at ``slots`` (flat), which were written with ``stamps``."""

    def reset(self) -> None:
        """Forget everything learnt about the stored frames (the buffer was emptied)."""

    def fresh(self) -> Sampler:
        """The same sampler without per-frame state (priorities), drawing from the same generator state."""
        fresh = copy.copy(self)  # with a generator of its own (see __setstate__)
        fresh.reset()
        return fresh

    #: The keys of this sampler kind's state besides ``"rng"``.
    _state_keys: tuple[str, ...] = ()

    def state_dict(self) -> dict[str, Any]:
        """The generator state (and per-frame state, in subclasses), stamped with the sampler's kind."""
        return stamped(type(self).__name__, {"rng": self._generator.get_state()})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s ``state``.

        Raises:
            TypeError, ValueError: the state of another sampler kind, or an incomplete one (named).
        """
        checked_state(type(self).__name__, state, ("rng", *self._state_keys))
        self._generator.set_state(state["rng"])

    def no_sample_message(self, size: int) -> str:
        """Why nothing could be drawn from ``size`` stored frames."""
        return f"no committed frame among the {size} stored (writers still copying them?)"


class UniformSampler(Sampler):
    """Every stored frame equally likely, drawn with replacement."""


class PrioritizedSampler(Sampler):
    """Proportional prioritized replay (Schaul et al., 2016), as TorchRL's ``PrioritizedSampler``.

    Slot ``i`` is drawn with probability ``P(i) = p_i / sum_j p_j``, ``p_i = (priority_i + eps) ** alpha``.
    New frames get the largest priority ever given (1.0 before any :meth:`update_priority`). The
    importance weight of a drawn frame, ``(N * P(i)) ** -beta`` normalised by the largest such weight
    over the ``N`` stored frames, is ``(p_i / min_j p_j) ** -beta``; it goes in the sample's
    ``"_weight"`` entry (float32).
    """

    def __init__(self, capacity: int, seed: int | None, alpha: float, beta: float, eps: float) -> None:
        super().__init__(capacity, seed)
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self._tree: SumTree | None = None  # allocated on first use: processes that only write never pay
        self._seen = 0  # reserved count the tree accounts for
        self._max_priority: float | None = None
        self._shown: collections.deque[tuple[np.ndarray, np.ndarray]] = collections.deque(maxlen=SHOWN_KEPT)

    @property
    def tree(self) -> SumTree:
        """The sum tree of ``p_i`` over the slots."""
        if self._tree is None:
            self._tree = SumTree(self.capacity)
        return self._tree

    def sync(self, reserved: int) -> None:
        if reserved < self._seen:  # emptied or reloaded behind our back
            self.reset()
        new = reserved - self._seen
        if new == 0:
            return
        if new >= self.capacity:
            slots = np.arange(self.capacity)
        else:
            slots = (self._seen + np.arange(new)) % self.capacity
        default = 1.0 if self._max_priority is None else self._max_priority
        self.tree.set(slots, np.full(len(slots), (default + self.eps) ** self.alpha))
        self._seen = reserved

    def draw(self, n: int, size: int) -> torch.Tensor:
        tree = self.tree
        leaves = tree.find(torch.rand(n, generator=self._generator, dtype=torch.float64).numpy() * tree.total)
        for _ in range(100):  # rounding can end a walk on an empty leaf: draw those again
            empty = tree[leaves] == 0
            if not empty.any():
                return torch.from_numpy(leaves).view(n, 1)
            mass = torch.rand(int(empty.sum()), generator=self._generator, dtype=torch.float64).numpy()
            leaves[empty] = tree.find(mass * tree.total)
        raise RuntimeError(f"the sum tree (total {tree.total}) keeps leading to empty slots")

    def finish(self, sample: TensorDictBase, slots: torch.Tensor) -> None:
        weight = (self.tree[slots.numpy()] / self.tree.min) ** -self.beta
        sample.set("_weight", torch.from_numpy(weight).to(torch.float32))

    def show(self, slots: torch.Tensor, stamps: torch.Tensor) -> None:
        self._shown.append((slots.numpy().copy(), stamps.numpy().copy()))

    def update_priority(self, slots: np.ndarray, priorities: np.ndarray, stamps: np.ndarray) -> None:
        """Give ``slots`` the raw ``priorities`` (e.g. absolute TD errors), non-negative and finite.
        ``stamps`` are the slots' frames' stamps now: when ``slots`` are one of the last
        :data:`SHOWN_KEPT` samples, a slot written over since keeps its new frame's priority."""
        if not np.isfinite(priorities).all() or (priorities < 0).any():
            raise ValueError(f"priorities must be finite and >= 0, got values in [{priorities.min()}, "
                             f"{priorities.max()}]")
        leaves = (priorities + self.eps) ** self.alpha
        if (leaves <= 0).any():
            raise ValueError(f"a priority of 0 with eps={self.eps} can never be drawn; use eps > 0")
        shown = self._stamps_shown(slots)
        if shown is not None:
            kept = stamps == shown
            slots, priorities, leaves = slots[kept], priorities[kept], leaves[kept]
        self.tree.set(slots, leaves)
        top = float(priorities.max()) if len(priorities) else -math.inf
        self._max_priority = top if self._max_priority is None else max(self._max_priority, top)

    def _stamps_shown(self, slots: np.ndarray) -> np.ndarray | None:
        """The frames' stamps when the newest of the last :data:`SHOWN_KEPT` samples whose slots
        are ``slots`` (as many, in the same order) was drawn; ``None`` if none was."""
        for shown, stamps in reversed(self._shown):
            if shown.shape == slots.shape and bool((shown == slots).all()):
                found: np.ndarray = stamps
                return found
        return None

    def reset(self) -> None:
        self._tree = None
        self._seen = 0
        self._max_priority = None
        self._shown = collections.deque(maxlen=SHOWN_KEPT)  # a new one: fresh()'s copy shares the old

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "seen": self._seen,
            "max_priority": self._max_priority,
            "leaves": torch.from_numpy(self.tree.values()),
        }

    _state_keys = ("seen", "max_priority", "leaves")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        checked_state(type(self).__name__, state, ("rng", *self._state_keys))
        check_tensor("the sampler state's 'leaves' (one priority per slot)", state["leaves"],
                     torch.from_numpy(self.tree.values()))
        super().load_state_dict(state)
        self.reset()
        leaves = state["leaves"].numpy()
        slots = np.flatnonzero(leaves)
        self.tree.set(slots, leaves[slots])
        self._seen = int(state["seen"])
        self._max_priority = state["max_priority"]

    def no_sample_message(self, size: int) -> str:
        return f"no committed frame with a positive priority among the {size} stored"


class SliceSampler(Sampler):
    """Slices of ``slice_len`` consecutive frames of one trajectory, as TorchRL's ``SliceSampler``.

    A slice never crosses an episode end (``("next", "done")``, or ``terminated | truncated`` where no
    ``done`` is stored, True anywhere but on its last frame), a change of ``("collector", "traj_ids")``
    nor the circular write boundary (its frames' sequence numbers must be consecutive). Slices are
    drawn uniformly among the valid ones, with replacement. A sample of ``batch_size`` frames holds
    ``batch_size // slice_len`` slices, flat and one after the other (``sample.reshape(-1, slice_len)``
    gives ``[slices, slice_len]``). As in TorchRL, the last frame of each slice is marked
    ``("next", "truncated")`` (and ``("next", "done")``) in the sample, where these keys exist, so that
    value estimators do not bootstrap across slices.
    """

    def __init__(self, capacity: int, seed: int | None, slice_len: int) -> None:
        super().__init__(capacity, seed)
        self.group = slice_len
        self._accept_rate = 1.0  # running estimate: how many proposals to make

    def draws_for(self, missing: int) -> int:
        return min(math.ceil(1.25 * missing / max(self._accept_rate, 1 / 64)), 64 * missing + 64)

    def draw(self, n: int, size: int) -> torch.Tensor:
        starts = torch.randint(0, size, (n, 1), generator=self._generator)
        return (starts + torch.arange(self.group)) % self.capacity

    def accept(self, slots: torch.Tensor, stamps: torch.Tensor, storage: Storage) -> torch.Tensor:
        n, length = slots.shape
        ok = (stamps[:, :1] >= 0) & (stamps - stamps[:, :1] == torch.arange(length)).all(1, keepdim=True)
        ok = ok.squeeze(1)
        flat = slots.reshape(-1)
        ends = [storage.leaf(DONE_KEY)]
        if ends[0] is None:
            ends = [storage.leaf(key) for key in END_KEYS]
        for end in ends:
            if end is not None:
                ended = end.index_select(0, flat).view(n, length, -1).any(-1)
                ok &= ~ended[:, :-1].any(1)
        traj = storage.leaf(TRAJ_KEY)
        if traj is not None:
            ids = traj.index_select(0, flat).view(n, length, -1)
            ok &= (ids == ids[:, :1]).flatten(1).all(1)
        self._accept_rate = 0.5 * self._accept_rate + 0.5 * float(ok.float().mean())
        return ok

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "accept_rate": self._accept_rate}  # it sets how many are drawn

    _state_keys = ("accept_rate",)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._accept_rate = float(state["accept_rate"])

    def finish(self, sample: TensorDictBase, slots: torch.Tensor) -> None:
        for key in (("next", "truncated"), DONE_KEY):
            flag = sample.get(key, None)
            if flag is not None:
                flag.view(-1, self.group, *flag.shape[1:])[:, -1] = True

    def no_sample_message(self, size: int) -> str:
        return (
            f"no valid slice of slice_len={self.group} among the {size} stored frames: are the stored "
            "trajectories (between episode ends, traj id changes and the write cursor) shorter than that?"
        )


def make_sampler(config: ReplayConfig) -> Sampler:
    """The sampler ``config`` asks for."""
    if config.sampler == "prioritized":
        return PrioritizedSampler(config.capacity, config.seed, config.alpha, config.beta, config.eps)
    if config.sampler == "slice":
        assert config.slice_len is not None
        return SliceSampler(config.capacity, config.seed, config.slice_len)
    return UniformSampler(config.capacity, config.seed)
