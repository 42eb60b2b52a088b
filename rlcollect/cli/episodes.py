"""The episodes a run folder holds, counted one way for ``collect``'s summary, ``run.json`` and
``inspect``: from the frames written, batch by batch.

An episode counts when its last frame (``("next", "done")``) is in the folder; its return is the
sum of the rewards under its trajectory id, carried across batches; a run with ``--info-keys`` also
gets each scalar key's mean over the episodes' last steps (``is_success``: a success rate).
Episodes are ordered by when they ended (batch, then step, then env), so "the last 100" means the
same thing everywhere.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> batch = TensorDict({  # 2 envs x 3 steps: env 0 ends an episode at step 1
    ...     "next": {"done": torch.tensor([[0, 1, 0], [0, 0, 0]]).bool().unsqueeze(-1),
    ...              "terminated": torch.tensor([[0, 1, 0], [0, 0, 0]]).bool().unsqueeze(-1),
    ...              "reward": torch.ones(2, 3, 1)},
    ...     "collector": {"traj_ids": torch.tensor([[0, 0, 2], [1, 1, 1]])}}, batch_size=[2, 3])
    >>> tally = EpisodeTally()
    >>> tally.add(batch)
    >>> tally.describe()
    '1 ended (1 terminated, 0 truncated), mean return 2.00 (all 1; the last 100: 2.00)'
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDictBase

__all__ = ["EPISODE_KEYS", "EpisodeTally"]

#: what a batch must hold for its episodes to be counted
EPISODE_KEYS = (("next", "done"), ("next", "terminated"), ("next", "reward"), ("collector", "traj_ids"))


class EpisodeTally:
    """Episodes ended in the batches :meth:`add` is given, with their returns."""

    def __init__(self) -> None:
        self.returns: list[float] = []  # of the episodes ended, in the order they ended
        self.terminated = 0
        self._partial: dict[int, float] = {}  # returns so far of episodes not ended yet
        self.at_ends: dict[str, list[float]] = {}  # each scalar info key's value at the episodes' ends

    @classmethod
    def of(cls, stored: TensorDictBase) -> EpisodeTally | None:
        """The tally of a stored run ``[batches, envs, T]`` (or one ``[envs, T]`` batch), read one
        batch at a time; ``None`` if it lacks :data:`EPISODE_KEYS`."""
        if not set(EPISODE_KEYS) <= set(stored.keys(include_nested=True, leaves_only=True)):
            return None
        infos = stored.get(("next", "info"), None)  # a TensorDict iterates over its rows: keys() named
        names = [] if infos is None else [("next", "info", key) for key in infos.keys()]  # noqa: SIM118
        needed = stored.select(*EPISODE_KEYS, *names)
        batches = [needed[index] for index in range(needed.shape[0])] if needed.batch_dims == 3 else [needed]
        tally = cls()
        for batch in batches:
            tally.add(batch)
        return tally

    def add(self, batch: TensorDictBase) -> None:
        """Count the episodes of one ``[envs, T]`` batch (frames ordered by step, then env)."""
        def flat(key: tuple[str, ...]) -> torch.Tensor:
            value: torch.Tensor = batch.get(key)
            value = value.reshape(*batch.batch_size, -1)[..., 0] if value.dim() > batch.batch_dims else value
            return value.transpose(0, -1).reshape(-1) if value.dim() > 1 else value

        done, terminated = flat(("next", "done")).bool(), flat(("next", "terminated")).bool()
        reward, ids = flat(("next", "reward")).double(), flat(("collector", "traj_ids"))
        partial = self._partial
        for traj, total in zip(*_sums(ids, reward), strict=True):
            partial[traj] = partial.get(traj, 0.0) + total
        for traj in ids[done].tolist():
            self.returns.append(partial.pop(traj))
        self.terminated += int(terminated.sum())
        infos = batch.get(("next", "info"), None)
        for key, value in ({} if infos is None else infos.items()):
            if value.dim() == batch.batch_dims:  # one number per frame
                self.at_ends.setdefault(key, []).extend(flat(("next", "info", key)).double()[done].tolist())

    @property
    def ended(self) -> int:
        return len(self.returns)

    def mean_return(self, last: int | None = None) -> float:
        """The mean return of every episode ended (``last``: of the last ``last``); NaN if none."""
        returns = self.returns[-last:] if last else self.returns
        return math.fsum(returns) / len(returns) if returns else math.nan

    def describe(self) -> str:
        """One line: how many ended, how, and their mean return over all and over the last 100."""
        def text(value: float) -> str:
            return "n/a" if math.isnan(value) else f"{value:.2f}"

        line = (f"{self.ended:,} ended ({self.terminated:,} terminated, {self.ended - self.terminated:,} "
                f"truncated), mean return {text(self.mean_return())} (all {self.ended:,}; the last 100: "
                f"{text(self.mean_return(100))})")
        if self.at_ends:
            line += "; mean at their last steps: " + ", ".join(
                f"{key} {text(mean)}" for key, mean in self.info_means().items())
        return line

    def info_means(self) -> dict[str, float]:
        """Each scalar info key's mean over the episodes' last steps (NaN if none ended)."""
        return {key: math.fsum(values) / len(values) if values else math.nan
                for key, values in self.at_ends.items()}

    def record(self) -> dict[str, Any]:
        """The counts for ``run.json``."""
        def number(value: float) -> float | None:
            return None if math.isnan(value) else value

        record: dict[str, Any] = {"episodes": self.ended, "episodes_terminated": self.terminated,
                                  "mean_return": number(self.mean_return()),
                                  "mean_return_last_100": number(self.mean_return(100))}
        if self.at_ends:
            record["info_means_at_episode_ends"] = {key: number(v) for key, v in self.info_means().items()}
        return record


def _sums(ids: torch.Tensor, reward: torch.Tensor) -> tuple[list[int], list[float]]:
    """Each trajectory id of ``ids`` and the sum of its rewards."""
    unique, index = torch.unique(ids, return_inverse=True)
    totals = torch.zeros(len(unique), dtype=torch.float64).index_add_(0, index, reward)
    return unique.tolist(), totals.tolist()
