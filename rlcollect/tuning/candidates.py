"""The configurations ``tune`` weighs: a collector kind, its workers and envs, its batch; what each
is predicted to deliver from the measured :class:`~rlcollect.tuning.costs.Costs`; the code that
builds it.

Examples:
    >>> Candidate("MultiSyncCollector", workers=2, envs_per_worker=4, steps=64).frames_per_batch
    512
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from rlcollect.tuning.costs import Costs

__all__ = ["Candidate", "candidates", "predict"]
#: A batch is sized to take about this long at the predicted speed (within the step bounds below).
BATCH_SECONDS = 0.1
MIN_STEPS, MAX_STEPS = 16, 256


@dataclass(frozen=True)
class Candidate:
    """One configuration: ``workers`` processes of ``envs_per_worker`` envs (``Collector``: one
    process, this one), ``steps`` steps of each env per batch; ``env_groups``: the groups an
    ``AsyncBatchedCollector`` worker steps its envs in (one while the server serves another).

    ``frames_per_batch`` is what a batch holds: every env's steps for ``Collector`` and
    ``MultiSyncCollector``, one worker's for ``MultiAsyncCollector`` and ``AsyncBatchedCollector``
    (which deliver each worker's batch as it is ready).
    """

    kind: str
    workers: int
    envs_per_worker: int
    steps: int
    env_groups: int = 1
    batched: int = 0  # the envs of one env object that brings its own (Costs.batched); 0: none

    @property
    def num_envs(self) -> int:
        return self.workers * self.envs_per_worker

    @property
    def frames_per_batch(self) -> int:
        per_worker = self.kind in ("MultiAsyncCollector", "AsyncBatchedCollector")
        return self.steps * (self.envs_per_worker if per_worker else self.num_envs) * max(self.batched, 1)

    @property
    def label(self) -> str:
        envs = self.envs_per_worker * max(self.batched, 1)
        shape = f"{self.workers * envs} envs" if self.kind == "Collector" else f"{self.workers} x {envs} envs"
        if self.batched:
            shape += " (one env object each)" if self.workers > 1 else " (one env object)"
        if self.env_groups > 1:
            shape += f" in {self.env_groups} groups"
        return f"{self.kind} ({shape}, {self.frames_per_batch} frames per batch)"

    def arguments(self, env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The constructor's keyword arguments for this configuration (and ``env_kwargs``)."""
        shape: dict[str, Any] = (
            {} if self.kind == "Collector" and self.batched  # the env object brings its envs
            else {"num_envs": self.num_envs} if self.kind == "Collector"
            else {"num_envs": self.num_envs, "envs_per_worker": self.envs_per_worker}
            if self.kind == "AsyncBatchedCollector"
            else {"num_workers": self.workers, "num_envs_per_worker": self.envs_per_worker})
        if self.env_groups > 1:
            shape["env_groups"] = self.env_groups
        extra = {"create_env_kwargs": dict(env_kwargs)} if env_kwargs else {}
        return {**shape, "frames_per_batch": self.frames_per_batch, **extra}

    def build(self, create_env_fn: Any, policy: Any, env_kwargs: Mapping[str, Any] | None = None,
              **arguments: Any) -> Any:
        """This configuration's collector for ``create_env_fn`` and ``policy``, with ``arguments``
        (``total_frames=...``, ``seed=...``)."""
        import rlcollect.collectors as collectors

        kind = getattr(collectors, self.kind)
        return kind(create_env_fn, policy, **self.arguments(env_kwargs), **arguments)

    def code(self, env: str = "create_env_fn", policy: str = "policy",
             env_kwargs: Mapping[str, Any] | None = None) -> str:
        """Python that builds this configuration (``env`` and ``policy`` as written there)."""
        arguments = ", ".join(f"{key}={value!r}" for key, value in self.arguments(env_kwargs).items())
        return (f"collector = rlcollect.{self.kind}({env}, {policy}, {arguments}, total_frames=-1)"
                "  # -1: no end; or your run's frames")


def predict(candidate: Candidate, costs: Costs) -> float:
    """Frames/s the candidate should deliver: each process steps its envs and runs the policy on
    them at its batch size, as many processes at once as there are cores; a policy server runs one
    pass for every worker's envs while the workers wait for it, or, with the envs in groups, one
    pass a group while the workers step another (each of them, and the server, one process)."""
    per_process = costs.env_us + costs.loop_us
    if candidate.env_groups > 1:
        served = costs.policy_at(candidate.envs_per_worker // candidate.env_groups)
        cpu_bound = costs.cores * 1e6 / (per_process + served)
        return min(cpu_bound, candidate.workers * 1e6 / per_process, 1e6 / served)
    if candidate.kind == "AsyncBatchedCollector":
        served = costs.policy_at(candidate.num_envs)  # per frame, one pass over every env
        cpu_bound = costs.cores * 1e6 / (per_process + served)
        waits = candidate.workers * 1e6 / (per_process + candidate.workers * served)
        return min(cpu_bound, waits)
    frame = per_process + costs.policy_at(candidate.envs_per_worker * max(candidate.batched, 1))
    return min(candidate.workers, costs.cores) * 1e6 / frame


def _steps(candidate: Candidate, costs: Costs) -> int:
    """Steps per env that make a batch of about ``BATCH_SECONDS`` (a power of two)."""
    frames = predict(candidate, costs) * BATCH_SECONDS
    per_batch = candidate.frames_per_batch // candidate.steps
    steps = MIN_STEPS
    while steps * 2 <= min(MAX_STEPS, frames / per_batch):
        steps *= 2
    return steps


def candidates(costs: Costs, kinds: tuple[str, ...], num_envs: int | None, max_envs: int,
               frames_per_batch: int | None) -> Iterator[Candidate]:
    """Every configuration to weigh: 1 to ``2 x cores`` workers (powers of two and the cores),
    envs per worker in powers of two, ``num_envs`` in all where given (else up to ``max_envs``),
    ``frames_per_batch`` where given (else sized by :data:`BATCH_SECONDS`). An env object that
    brings its own envs (``costs.batched``) is one per process, ``num_envs`` a multiple of its
    envs and ``max_envs`` not counted (the object fixes them); no policy server serves it."""
    totals = [num_envs] if num_envs is not None else [2**i for i in range(12) if 2**i <= max_envs]
    drafts = _batched_shapes(costs, kinds, num_envs) if costs.batched else _shapes(costs, kinds, totals)
    for draft in drafts:
        if frames_per_batch is None:
            yield replace(draft, steps=_steps(draft, costs))
        elif frames_per_batch % (draft.frames_per_batch // MIN_STEPS) == 0:
            yield replace(draft, steps=frames_per_batch // (draft.frames_per_batch // MIN_STEPS))


def _shapes(costs: Costs, kinds: tuple[str, ...], totals: list[int]) -> Iterator[Candidate]:
    """Each kind's workers, envs per worker and groups (at :data:`MIN_STEPS`): a policy server's
    workers step their envs all at once (2 workers or more) or in 2 groups (1 worker or more:
    the server then works while they step) where the envs can."""
    for kind in kinds:
        for workers in [1] if kind == "Collector" else _worker_counts(costs.cores):
            for total in totals:
                if total % workers:
                    continue
                per_worker = total // workers
                if workers > 1 or kind == "Collector":
                    yield Candidate(kind, workers, per_worker, MIN_STEPS)
                if kind == "AsyncBatchedCollector" and costs.steps_in_groups and per_worker % 2 == 0:
                    yield Candidate(kind, workers, per_worker, MIN_STEPS, env_groups=2)


def _batched_shapes(costs: Costs, kinds: tuple[str, ...], num_envs: int | None) -> Iterator[Candidate]:
    """Each kind's workers, one env object of ``costs.batched`` envs each (``num_envs`` of them
    in all where given)."""
    for kind in kinds:
        if kind == "AsyncBatchedCollector":  # a policy server serves envs stepped one by one
            continue
        for workers in [1] if kind == "Collector" else [w for w in _worker_counts(costs.cores) if w > 1]:
            if num_envs is None or workers * costs.batched == num_envs:
                yield Candidate(kind, workers, 1, MIN_STEPS, batched=costs.batched)


def _worker_counts(cores: int) -> list[int]:
    """1 to ``2 x cores`` workers: the powers of two, the cores and twice them."""
    return sorted({1, cores, 2 * cores} | {2**i for i in range(8) if 2**i <= 2 * cores})
