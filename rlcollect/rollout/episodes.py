"""Episode returns and lengths, counted once per batch from the reward and done buffers."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

__all__ = ["EpisodeTracker"]


class EpisodeTracker:
    """Running return and length per env; completed episodes kept in a window for ``stats()``.

    Example:
        >>> import numpy as np
        >>> tracker = EpisodeTracker(num_envs=1)
        >>> tracker.update(np.ones((1, 3)), np.array([[False, True, False]]))
        >>> tracker.update(np.ones((1, 2)), np.array([[True, False]]))
        >>> list(tracker.returns), list(tracker.lengths)
        ([2.0, 2.0], [2, 2])
    """

    def __init__(self, num_envs: int, window: int = 100) -> None:
        self._return = np.zeros(num_envs, dtype=np.float64)
        self._length = np.zeros(num_envs, dtype=np.int64)
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.count = 0

    def update(self, reward: np.ndarray, done: np.ndarray) -> None:
        """Account for a batch: ``reward [N, T]``, ``done [N, T]`` (episode ends only)."""
        num_steps = reward.shape[1]
        if num_steps == 0:  # a batch preempted before its first step
            return
        cumulative = np.cumsum(reward, axis=1, dtype=np.float64)
        envs, steps = np.nonzero(done)  # grouped by env, time increasing
        if len(envs):
            # an episode's sum = what its env carried in (first end of the row only)
            # + cumulative reward at its end - cumulative reward at the previous end in the row
            at_end = cumulative[envs, steps]
            first = np.ones(len(envs), dtype=bool)
            first[1:] = envs[1:] != envs[:-1]
            before = np.where(first, 0.0, np.roll(at_end, 1))
            previous_t = np.where(first, -1, np.roll(steps, 1))
            returns = np.where(first, self._return[envs], 0.0) + at_end - before
            lengths = np.where(first, self._length[envs], 0) + steps - previous_t
            self.returns.extend(returns.tolist())
            self.lengths.extend(lengths.tolist())
            self.count += len(envs)
        ended = done.any(axis=1)
        last_t = np.where(ended, num_steps - 1 - np.argmax(done[:, ::-1], axis=1), -1)
        rows = np.arange(len(last_t))
        before = np.where(ended, cumulative[rows, np.maximum(last_t, 0)], 0.0)
        self._return = np.where(ended, 0.0, self._return) + cumulative[:, -1] - before
        self._length = np.where(ended, 0, self._length) + num_steps - 1 - last_t

    def state_dict(self) -> dict[str, Any]:
        """Running sums and the window."""
        return {
            "return": self._return.copy(),
            "length": self._length.copy(),
            "returns": list(self.returns),
            "lengths": list(self.lengths),
            "count": self.count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self._return = np.asarray(state["return"], dtype=np.float64).copy()
        self._length = np.asarray(state["length"], dtype=np.int64).copy()
        self.returns.clear()
        self.returns.extend(state["returns"])
        self.lengths.clear()
        self.lengths.extend(state["lengths"])
        self.count = int(state["count"])
