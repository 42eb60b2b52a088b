"""What ``stats()`` returns, and the count behind a user subclass's default ``stats()``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from tensordict import TensorDictBase

__all__ = ["CollectorStats", "HandedOut"]


@dataclass(frozen=True)
class CollectorStats:
    """Counters of a collector (or of one of its workers).

    Attributes:
        frames: env steps collected, summed over envs.
        batches: batches produced.
        fps: frames per second of collection time (time spent producing batches).
        episodes: episodes completed.
        mean_return: mean return of the last (up to 100) completed episodes; nan before any.
        mean_length: mean length of those episodes; nan before any.
        restarts: worker restarts after a crash.
        policy_version: version of the weights producing the newest frames.
        policy_lag: versions between the newest weights and those of the last batch.
        startup_seconds: from the collector's construction until every worker was ready (nan
            before they all were; 0 in one process).
        inference_batch_size: envs per forward pass of a policy server, on average (nan
            without one).
        workers: the same counters per worker (multi-process collectors).
    """

    frames: int = 0
    batches: int = 0
    fps: float = 0.0
    episodes: int = 0
    mean_return: float = float("nan")
    mean_length: float = float("nan")
    restarts: int = 0
    policy_version: int = 0
    policy_lag: int = 0
    startup_seconds: float = float("nan")
    inference_batch_size: float = float("nan")
    workers: tuple[CollectorStats, ...] = field(default=())


class HandedOut:
    """The frames and batches a collector handed out, and their rate since the first was asked
    for: the :meth:`~rlcollect.BaseCollector.stats` of a subclass that implements only the
    reference's abstract methods (rlcollect's collectors count where the batches are made).

    Examples:
        >>> from tensordict import TensorDict
        >>> handed_out = HandedOut()
        >>> _ = list(handed_out.count(iter([TensorDict(batch_size=[2, 3]), None])))
        >>> handed_out.stats().frames, handed_out.stats().batches
        (6, 1)
    """

    def __init__(self) -> None:
        self.frames = self.batches = 0
        self.started = 0.0  # time.perf_counter() when the first batch was asked for

    def count(self, batches: Iterator[TensorDictBase | None]) -> Iterator[TensorDictBase | None]:
        """``batches``, counted."""
        self.started = self.started or time.perf_counter()
        try:
            for batch in batches:
                if batch is not None:
                    self.frames, self.batches = self.frames + batch.numel(), self.batches + 1
                yield batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def stats(self) -> CollectorStats:
        """The counts as :class:`CollectorStats`."""
        seconds = time.perf_counter() - self.started if self.started else 0.0
        return CollectorStats(frames=self.frames, batches=self.batches,
                              fps=self.frames / seconds if seconds > 0 else 0.0)
