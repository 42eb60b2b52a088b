"""Episode returns and lengths, counted once per batch from the reward and done buffers, and a
record of every episode that ended (return, length, env, trajectory id, policy version, and the
``info_keys``' values at its last step)."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.data.layout import Field
from rlcollect.data.trajectories import frames_where

__all__ = ["EPISODE_FIELDS", "INFO_PREFIX", "EpisodeRecords", "EpisodeTracker", "episode_table"]

#: The fields of an episode record, and their dtypes.
EPISODE_FIELDS = {"return": np.float64, "length": np.int64, "env": np.int64, "traj_id": np.int64,
                  "policy_version": np.int64, "worker": np.int64}
#: The prefix of a record field that holds an info key's value at the episode's last step.
INFO_PREFIX = "info."
#: Records kept for :meth:`EpisodeRecords.drain` at most: the most recent ones. Their memory is
#: allocated once (under 0.5 MB), so a collector whose records are never drained stays bounded.
MAX_RECORDS = 10_000


class EpisodeRecords:
    """Episode records (arrays of :data:`EPISODE_FIELDS`, and of the info keys' values, named
    ``"info." + key``) kept until drained: the last ``capacity`` of them, in preallocated arrays
    used as a ring (older ones are dropped and counted in :attr:`dropped`).

    Examples:
        >>> records = EpisodeRecords(capacity=3)
        >>> for first in (0, 2):
        ...     records.add({name: np.arange(first, first + 2, dtype=dtype)
        ...                  for name, dtype in EPISODE_FIELDS.items()})
        >>> records.drain()["traj_id"].tolist(), records.dropped
        ([1, 2, 3], 1)
    """

    def __init__(self, capacity: int = MAX_RECORDS, infos: tuple[Field, ...] = ()) -> None:
        self.capacity = capacity
        self._rings = {name: np.zeros(capacity, dtype) for name, dtype in EPISODE_FIELDS.items()}
        for info in infos:  # the info keys' values, laid out as the batch's (``infos``: its layout's)
            dtype = torch.empty((), dtype=info.dtype).numpy().dtype
            self._rings[INFO_PREFIX + info.key[-1]] = np.zeros((capacity, *info.shape), dtype)
        self._start = self._held = 0  # the oldest record's index in the ring, and the records held
        self.dropped = 0  # records dropped unread since this object was made

    def add(self, records: dict[str, np.ndarray]) -> None:
        """Keep ``records`` for :meth:`drain` (the oldest kept ones go when the ring is full)."""
        count = len(records["return"])
        if not count:
            return
        for name in records.keys() - self._rings.keys():  # an info key's values: a ring at the first
            assert self._held == 0, f"episode records gained the field {name!r} after others were kept"
            self._rings[name] = np.zeros((self.capacity, *records[name].shape[1:]), records[name].dtype)
        skip = max(0, count - self.capacity)  # more than the ring holds: only the last ones
        positions = (self._start + self._held + np.arange(skip, count)) % self.capacity
        for name, ring in self._rings.items():
            ring[positions] = records[name][skip:]
        overflow = max(0, self._held + count - self.capacity)
        self.dropped += overflow
        self._start = (self._start + overflow) % self.capacity
        self._held = min(self.capacity, self._held + count)

    def drain(self) -> dict[str, np.ndarray]:
        """The records kept since the last call, oldest first, as one array per field."""
        positions = (self._start + np.arange(self._held)) % self.capacity
        self._start = self._held = 0
        return {name: ring[positions] for name, ring in self._rings.items()}


class EpisodeTracker:
    """Running return and length per env; completed episodes kept in a window for ``stats()``.

    Examples:
        >>> import numpy as np
        >>> tracker = EpisodeTracker(num_envs=1)
        >>> tracker.update(np.ones((1, 3)), np.array([[False, True, False]]))
        >>> tracker.update(np.ones((1, 2)), np.array([[True, False]]))
        >>> list(tracker.returns), list(tracker.lengths)
        ([2.0, 2.0], [2, 2])
    """

    def __init__(self, num_envs: int, window: int = 100, env_offset: int = 0,
                 infos: tuple[Field, ...] = ()) -> None:
        self._return = np.zeros(num_envs, dtype=np.float64)
        self._length = np.zeros(num_envs, dtype=np.int64)
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.count = 0
        self.env_offset = env_offset  # the envs' first index in the collector
        self._ended: tuple[np.ndarray, ...] | None = None  # (envs, steps, returns, lengths) to label
        self.records = EpisodeRecords(infos=infos)  # the labelled episodes, until drained

    def update(self, reward: np.ndarray, done: np.ndarray, real: np.ndarray | None = None) -> None:
        """Account for a batch: ``reward [N, T]``, ``done [N, T]`` (episode ends only); ``real``
        ``[N, T]`` marks the frames that are transitions where some are not (an env's own reset
        steps: reward 0, never an end), which no episode counts in its length."""
        num_steps = reward.shape[1]
        if num_steps == 0:  # a batch preempted before its first step
            return
        cumulative = _row_sums(reward, torch.float64)  # [N, T]: each row's running sum
        counted = None if real is None else _row_sums(real, torch.int64)  # real frames up to t
        total = cumulative[:, -1]
        frames = np.full(len(total), num_steps) if counted is None else counted[:, -1]
        envs, steps = frames_where(done)  # grouped by env, time increasing
        if len(envs):
            at_end = cumulative[envs, steps]
            at = steps if counted is None else counted[envs, steps] - 1  # the end's place among frames
            first = np.ones(len(envs), dtype=bool)
            first[1:] = envs[1:] != envs[:-1]
            # an episode: from the previous end in its row, or what its env carried in (a row's first)
            returns, lengths = np.empty_like(at_end), np.empty_like(at)
            returns[1:], lengths[1:] = at_end[1:] - at_end[:-1], at[1:] - at[:-1]
            carried = envs[first]
            returns[first] = self._return[carried] + at_end[first]
            lengths[first] = self._length[carried] + at[first] + 1
            self._record(envs, steps, returns, lengths, envs, np.argsort(steps, kind="stable"))
        self._return = self._return + total  # the episodes in progress go on (or start after an end)
        self._length = self._length + frames
        if len(envs):
            last = np.append(first[1:], True)  # a row's last end
            ended = envs[last]
            self._return[ended] = total[ended] - at_end[last]
            self._length[ended] = frames[ended] - at[last] - 1

    def abandon(self) -> None:
        """Forget the episodes in progress: their envs were reset before they ended (a reset
        between batches, a new seed), so none of their steps counts in a later episode."""
        self._return[:] = 0.0
        self._length[:] = 0

    def label(self, traj_ids: np.ndarray, versions: np.ndarray,
              infos: dict[str, np.ndarray] | None = None) -> None:
        """Record the episodes the last :meth:`update` saw end, with the trajectory id, policy
        version and ``infos`` values (``[N, T, ...]`` by info key) of their last frame (``[N, T]``
        arrays of that batch); ``worker`` is 0, a multi-process collector stamps its own."""
        if self._ended is None:
            return
        rows, steps, returns, lengths, envs = self._ended
        self._ended = None
        last = {INFO_PREFIX + key: np.array(values[rows, steps]) for key, values in (infos or {}).items()}
        self.records.add({**last,
            "return": returns, "length": lengths.astype(np.int64), "env": envs + self.env_offset,
            "traj_id": traj_ids[rows, steps].astype(np.int64),
            "policy_version": versions[rows, steps].astype(np.int64),
            "worker": np.zeros(len(envs), dtype=np.int64),
        })

    def _record(self, rows: np.ndarray, steps: np.ndarray, returns: np.ndarray, lengths: np.ndarray,
                envs: np.ndarray, order: np.ndarray | None = None) -> None:
        """Count the episodes that ended at frames ``[rows, steps]`` of the batch; :meth:`label`
        records them in the order they ended (by step, then row: ``order``, where it is known)."""
        window = self.returns.maxlen  # what the deques keep of this batch: its last episodes
        self.returns.extend((returns if window is None else returns[-window:]).tolist())
        self.lengths.extend((lengths if window is None else lengths[-window:]).tolist())
        self.count += len(envs)
        order = np.lexsort((rows, steps)) if order is None else order
        rows, steps, envs = rows[order], steps[order], envs[order]
        returns, lengths = returns[order], lengths[order]
        self._ended = (rows, steps, returns, lengths, envs)

    def update_stream(self, envs: np.ndarray, reward: np.ndarray, done: np.ndarray, num_steps: int) -> None:
        """Account for a batch of frames in the order they completed, whatever their env: flat
        ``envs``, ``reward``, ``done`` (frame ``k`` is at row ``k // num_steps``, step
        ``k % num_steps`` of the batch; an asynchronous pool's batch).

        Examples:
            >>> tracker = EpisodeTracker(num_envs=2)
            >>> envs, done = np.array([0, 1, 0, 1, 0]), np.array([False, False, True, False, True])
            >>> tracker.update_stream(envs, np.ones(5), done, num_steps=5)
            >>> list(tracker.returns), list(tracker.lengths)
            ([2.0, 1.0], [2, 1])
        """
        count = len(envs)
        if not count:
            return
        order = np.argsort(envs, kind="stable")  # by env, each env's frames in time order
        e, r, d = envs[order], reward[order], done[order]
        cumulative = np.cumsum(r, dtype=np.float64)
        first = np.ones(count, dtype=bool)  # an env's first frame in this batch
        first[1:] = e[1:] != e[:-1]
        begins = first.copy()  # a segment: an env's frames up to an episode end
        begins[1:] |= d[:-1]
        starts = np.flatnonzero(begins)
        segment = np.cumsum(begins) - 1
        carried = first[starts][segment]  # the segment continues what its env carried in
        returns = cumulative - (cumulative[starts] - r[starts])[segment]
        returns += np.where(carried, self._return[e], 0.0)
        lengths = np.arange(count) - starts[segment] + 1 + np.where(carried, self._length[e], 0)
        ended = np.flatnonzero(d)
        if len(ended):
            rows, steps = np.divmod(order[ended], num_steps)
            self._record(rows, steps, returns[ended], lengths[ended], e[ended])
        last = np.append(e[1:] != e[:-1], True)
        self._return[e[last]] = np.where(d[last], 0.0, returns[last])
        self._length[e[last]] = np.where(d[last], 0, lengths[last])

    def state_dict(self) -> dict[str, Any]:
        """Running sums and the window."""
        return {
            "return": torch.from_numpy(self._return.copy()),  # tensors: torch.load(weights_only=True)
            "length": torch.from_numpy(self._length.copy()),
            "returns": [float(value) for value in self.returns],
            "lengths": [int(value) for value in self.lengths],
            "count": self.count,
        }

    def load_state_dict(self, state: dict[str, Any], *, running: bool = True) -> None:
        """Restore what :meth:`state_dict` returned (``running=False``: all but the sums of the
        episodes in progress, which stay this tracker's: its envs were not restored)."""
        if running:
            self._return = np.asarray(state["return"], dtype=np.float64).copy()
            self._length = np.asarray(state["length"], dtype=np.int64).copy()
        self.returns.clear()
        self.returns.extend(state["returns"])
        self.lengths.clear()
        self.lengths.extend(state["lengths"])
        self.count = int(state["count"])


def episode_table(records: dict[str, np.ndarray]) -> TensorDict:
    """Episode records (:meth:`EpisodeRecords.drain`) as a TensorDict ``[episodes]``: ``"return"``
    (float64), ``"length"``, ``"env"`` (its index in the collector: ``worker * envs per worker +
    its index``), ``"traj_id"`` (its frames' ``("collector", "traj_ids")``), ``"policy_version"``
    (that of its last action) and ``"worker"`` (0 in one process), int64; an episode a reset
    abandoned is none.

    Examples:
        >>> tracker = EpisodeTracker(num_envs=2)
        >>> tracker.update(np.ones((2, 3)), np.array([[False, True, False], [False, False, True]]))
        >>> tracker.label(np.array([[0, 0, 2], [1, 1, 1]]), np.zeros((2, 3), dtype=np.int64))
        >>> table = episode_table(tracker.records.drain())
        >>> [table[name].tolist() for name in ("return", "length", "env", "traj_id")]
        [[2.0, 3.0], [2, 3], [0, 1], [0, 1]]
    """
    count = len(records["return"])
    table = TensorDict({name: torch.from_numpy(np.ascontiguousarray(records[name], dtype=dtype))
                        for name, dtype in EPISODE_FIELDS.items()}, batch_size=[count])
    for name, values in records.items():
        if name.startswith(INFO_PREFIX):  # an info key's value at the episode's last step
            table.set(("info", name.removeprefix(INFO_PREFIX)),
                      torch.from_numpy(np.ascontiguousarray(values)))
    return table


def _row_sums(values: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Running sums along each row of ``[N, T]`` ``values``, as ``dtype``: torch's cumsum, which
    takes a tenth of numpy's time on short rows (numpy loops over the rows)."""
    if not values.flags.writeable:  # (torch shares the memory, and warns about a read-only one)
        values = values.copy()
    return torch.cumsum(torch.from_numpy(values), 1, dtype=dtype).numpy()
