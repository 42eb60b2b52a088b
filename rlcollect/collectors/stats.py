"""What ``stats()`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CollectorStats"]


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
