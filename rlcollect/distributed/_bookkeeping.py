"""What the parent of the Ray actors counts per actor, and how it tears the actors down."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

from rlcollect.collectors.stats import CollectorStats

__all__ = ["ActorCounters", "teardown", "total_stats"]


@dataclass
class ActorCounters:
    """One actor's counters over all its incarnations (a restart starts a fresh collector).

    Attributes:
        frames, batches: frames and batches of this actor yielded to the user.
        restarts: restarts of this actor.
        policy_version: weights version of the newest frames yielded from it.
        last: the newest stats its current collector reported.
        retired_frames, retired_seconds, retired_episodes: summed over its previous incarnations.
    """

    frames: int = 0
    batches: int = 0
    restarts: int = 0
    policy_version: int = 0
    last: CollectorStats = field(default_factory=CollectorStats)
    retired_frames: int = 0
    retired_seconds: float = 0.0
    retired_episodes: int = 0

    def retire(self) -> None:
        """The actor's collector is gone (restart): keep its totals, forget its last stats."""
        self.retired_frames += self.last.frames
        self.retired_seconds += self.last.frames / self.last.fps if self.last.fps else 0.0
        self.retired_episodes += self.last.episodes
        self.last = CollectorStats()

    def stats(self, policy_version: int, policy_lag: int) -> CollectorStats:
        """This actor's :class:`CollectorStats` (fps over the frames its collectors produced)."""
        frames = self.retired_frames + self.last.frames
        seconds = self.retired_seconds + (self.last.frames / self.last.fps if self.last.fps else 0.0)
        return CollectorStats(
            frames=self.frames,
            batches=self.batches,
            fps=frames / seconds if seconds else 0.0,
            episodes=self.retired_episodes + self.last.episodes,
            mean_return=self.last.mean_return,
            mean_length=self.last.mean_length,
            restarts=self.restarts,
            policy_version=policy_version,
            policy_lag=policy_lag,
        )


def total_stats(
    actors: list[CollectorStats], *, frames: int, batches: int, policy_lag: int
) -> CollectorStats:
    """All actors together: sums, and episode-weighted means of their recent returns and lengths."""
    weights = [(s, min(s.episodes, 100)) for s in actors if s.episodes and not math.isnan(s.mean_return)]
    total_weight = sum(w for _, w in weights)

    def mean(attribute: str) -> float:
        if not total_weight:
            return math.nan
        return sum(getattr(s, attribute) * w for s, w in weights) / total_weight

    return CollectorStats(
        frames=frames,
        batches=batches,
        fps=sum(s.fps for s in actors),  # actors run side by side
        episodes=sum(s.episodes for s in actors),
        mean_return=mean("mean_return"),
        mean_length=mean("mean_length"),
        restarts=sum(s.restarts for s in actors),
        policy_version=max((s.policy_version for s in actors), default=0),
        policy_lag=policy_lag,
        workers=tuple(actors),
    )


def teardown(
    ray: Any,
    actors: list[Any],
    owns_ray: bool,
    timeout: float,
    close_env: bool = True,
    pending: list[Any] | None = None,
) -> None:
    """Close the actors' collectors (within ``timeout``), kill the actors, and stop Ray if we started it.

    ``pending``: refs of batches still in flight; those finished by then are fetched and dropped
    (so Ray does not log their errors as unhandled). Idempotent, and safe at interpreter exit (Ray
    may already be down): errors are swallowed, the point is that nothing is left behind.
    """
    if ray.is_initialized() and actors:
        if close_env:
            with contextlib.suppress(Exception):
                closes = [actor.close.remote() for actor in actors]  # queued after the batches
                ray.wait(closes, num_returns=len(closes), timeout=timeout)
        for ref in pending or []:
            with contextlib.suppress(Exception):
                ray.get(ref, timeout=0)
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
    actors.clear()
    if owns_ray and ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.shutdown()
