"""``rlcollect.tune``: measure the env and the policy, predict every collector configuration, run
the most promising ones for real, and pick the fastest.

Examples:
    >>> result = tune("CartPole-v1", seconds=4, kinds=("Collector",), max_envs=4, progress=False)
    >>> result.pick.candidate.kind, result.pick.fps > 0
    ('Collector', True)
    >>> with result.build(total_frames=2 * result.pick.candidate.frames_per_batch) as collector:
    ...     frames = sum(batch.numel() for batch in collector)
    >>> frames == 2 * result.pick.candidate.frames_per_batch
    True
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tqdm import tqdm

from rlcollect.collectors.base import BaseCollector
from rlcollect.tuning.candidates import Candidate, candidates, predict
from rlcollect.tuning.costs import Costs, measure_costs, one_thread
from rlcollect.tuning.kinds import KINDS
from rlcollect.workers.transport import start_context

__all__ = ["Trial", "TuneResult", "run_trial", "tune"]

#: Share of the time budget spent measuring the env and the policy alone.
COST_SHARE = 0.2
#: A trial's timed part runs at least this long, after its first batches.
MIN_TRIAL_SECONDS = 1.0
#: The longest tuning asked for: a day (seconds beyond it, inf or NaN, are refused).
MAX_SECONDS = 86_400.0
#: About one configuration is run per this many seconds of the budget (at least one per kind).
TRIAL_SECONDS = 4.0
#: The fastest few configurations are run again, and their figure is the mean of their runs.
FINAL = 3


@dataclass(frozen=True)
class Trial:
    """One configuration run for real.

    Attributes:
        candidate: the configuration.
        predicted_fps: frames/s predicted from the costs.
        fps: frames/s measured after its first batches (steady state); 0 where it failed.
        startup_seconds: from building the collector to its first batch.
        error: why it could not run (``None`` where it ran).
        runs: the frames/s of each run (``fps`` is their mean).
    """

    candidate: Candidate
    predicted_fps: float
    fps: float = 0.0
    startup_seconds: float = float("nan")
    error: str | None = None
    runs: tuple[float, ...] = ()


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` measured and picked; :meth:`build` makes the pick, :meth:`report` says why.

    Attributes:
        costs: the env's, the policy's and the loop's cost per frame, and the cores counted.
        trials: every configuration run, fastest first.
        seconds: how long tuning took.
    """

    costs: Costs
    trials: tuple[Trial, ...]
    seconds: float
    create_env_fn: Any = field(repr=False)
    policy: Any = field(repr=False)
    env_kwargs: Mapping[str, Any] | None = field(default=None, repr=False)

    @property
    def pick(self) -> Trial:
        """The fastest configuration measured."""
        return self.trials[0]

    @property
    def limit(self) -> float:
        """The machine's limit for this env and policy, frames/s (see :attr:`Costs.limit`)."""
        return self.costs.limit

    def build(self, **arguments: Any) -> BaseCollector:
        """The picked collector for the tuned env and policy, with further ``arguments``
        (``total_frames=...``, ``seed=...``)."""
        built: BaseCollector = self.pick.candidate.build(self.create_env_fn, self.policy, self.env_kwargs,
                                                         **arguments)
        return built

    def code(self, env: str | None = None, policy: str = "policy", imports: str = "", setup: str = "") -> str:
        """Python that builds the pick (the env as ``env``, default: its id or ``create_env_fn``) at
        the one torch thread every trial ran at; ``imports`` and ``setup``: lines that make ``policy``."""
        if env is None:
            env = repr(self.create_env_fn) if isinstance(self.create_env_fn, str) else "create_env_fn"
        policy = "None" if self.policy is None else policy
        return (f"import torch\n\nimport rlcollect\n{imports}\n"
                "torch.set_num_threads(1)  # as tune ran every trial (and every worker process runs)\n"
                f"{setup}{self.pick.candidate.code(env, policy, self.env_kwargs)}")

    def report(self, env: str | None = None, policy: str = "policy", imports: str = "",
               setup: str = "") -> str:
        """The costs, the limit, every trial against it and the pick's code, as text."""
        from rlcollect.tuning.report import format_report

        return format_report(self, self.code(env, policy, imports, setup))

    def __str__(self) -> str:
        return self.report()


def tune(
    create_env_fn: Any,
    policy: Any = None,
    *,
    seconds: float = 60.0,
    num_envs: int | None = None,
    max_envs: int = 64,
    frames_per_batch: int | None = None,
    kinds: Sequence[str] = KINDS,
    env_kwargs: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> TuneResult:
    """Pick the collector, workers, envs per worker and frames per batch that collect fastest
    for ``create_env_fn`` and ``policy`` (as the collectors take them) on this machine.

    A fifth of ``seconds`` measures the env and the policy alone (the policy at every batch
    size up to the envs a process may have); every configuration is predicted from those
    costs; then, in the time left, configurations run for real (start-up, first batches, then
    about a second or more timed): the best predicted of each kind, then the kinds' next best
    with each kind's predictions scaled by how its first fared, then the fastest three again
    (their figure the mean of both runs). The fastest measured is the pick.

    ``num_envs`` fixes the envs in all (else 1 to ``max_envs``, powers of two);
    ``frames_per_batch`` fixes the batch (else about a tenth of a second's frames); ``kinds``
    limits the collectors weighed (e.g. leave out the asynchronous ones for an on-policy learner
    that needs every batch from the newest weights). Without a policy (random actions) there is
    nothing to serve: ``AsyncBatchedCollector`` is left out.

    Raises:
        ValueError: a bad argument (named, with what is allowed), or no configuration fits
            ``num_envs`` and ``frames_per_batch``.
        RuntimeError: no configuration could run (each one's error is listed).
    """
    _check(seconds, num_envs, max_envs, frames_per_batch, kinds)
    start = time.perf_counter()
    top = num_envs if num_envs is not None else max_envs
    sizes = [2**i for i in range(12) if 2**i <= top] + ([top] if top & (top - 1) else [])
    with _Bar(total=100, desc="rlcollect tune: the env and the policy alone", disable=not progress,
              bar_format="{desc} {bar} {elapsed}<{remaining}", leave=False) as bar:
        costs = measure_costs(create_env_fn, policy, sizes=sizes, seconds=COST_SHARE * seconds,
                              env_kwargs=env_kwargs)
        bar.update(int(100 * COST_SHARE))
        if policy is None:  # random actions: no policy to serve
            kinds = [kind for kind in kinds if kind != "AsyncBatchedCollector"] or list(kinds)
        ranked = sorted(candidates(costs, tuple(kinds), num_envs, max_envs, frames_per_batch),
                        key=lambda c: (-predict(c, costs), KINDS.index(c.kind)))
        if not ranked:
            raise ValueError(f"no configuration of {list(kinds)} has num_envs={num_envs} and "
                             f"frames_per_batch={frames_per_batch}: frames_per_batch must be a multiple "
                             "of the envs of a batch")
        if "AsyncBatchedCollector" in kinds:
            _await_forkserver()
        runner = _Runner(create_env_fn, policy, env_kwargs, costs, bar, deadline=start + seconds)
        trials = runner.rounds(ranked, max(1, int((1 - COST_SHARE) * seconds / TRIAL_SECONDS)))
    ran = sorted((t for t in trials if t.error is None), key=lambda t: -t.fps)
    if not ran:
        raise RuntimeError("no configuration could run: " + "; ".join(
            f"{t.candidate.label}: {t.error}" for t in trials))
    failed = [t for t in trials if t.error is not None]
    return TuneResult(costs, (*ran, *failed), time.perf_counter() - start, create_env_fn, policy, env_kwargs)


def _check(seconds: float, num_envs: int | None, max_envs: int, frames_per_batch: int | None,
           kinds: Sequence[str]) -> None:
    """Each argument's allowed values, named in the error."""
    if not 0 < seconds <= MAX_SECONDS:  # NaN and inf too: tuning must end
        raise ValueError(f"seconds must be a number in (0, {MAX_SECONDS}] (a day at most), got {seconds}")
    sizes = {"num_envs": num_envs, "max_envs": max_envs, "frames_per_batch": frames_per_batch}
    for name, value in sizes.items():
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"kinds must be some of {list(KINDS)}, got {list(kinds)}")


def _nothing() -> None:
    """What the process that waits for the forkserver runs."""


def _await_forkserver() -> None:
    """Start this process's forkserver and wait for its imports. A collector that runs threads
    (``AsyncBatchedCollector``'s server) starts one for its workers, and its imports take seconds
    of CPU that would slow the trials after it, not its own."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    process = start_context("forkserver").Process(target=_nothing)  # type: ignore[attr-defined]
    process.start()
    process.join(120.0)


class _Bar(tqdm):  # type: ignore[misc]
    """tqdm without its monitor thread: a thread in this process would make the collectors start
    their workers through a forkserver rather than by fork (seconds more of start-up)."""

    monitor_interval = 0


class _Runner:
    """Runs configurations within the budget, advancing the progress bar."""

    def __init__(self, create_env_fn: Any, policy: Any, env_kwargs: Mapping[str, Any] | None, costs: Costs,
                 bar: _Bar, deadline: float) -> None:
        self.source = (create_env_fn, policy, env_kwargs)
        self.costs, self.bar, self.deadline = costs, bar, deadline
        self.total = 1  # trials planned, for the progress bar

    def rounds(self, ranked: list[Candidate], count: int) -> list[Trial]:
        """About ``count`` trials: each kind's best predicted; the kinds' next configurations, their
        predictions scaled by how their kind's first fared; then the fastest few again (what is
        measured once on a busy machine may be off by a tenth), each the mean of its runs."""
        firsts = list({c.kind: c for c in reversed(ranked)}.values())
        firsts.sort(key=ranked.index)
        final = min(FINAL, max(1, count - len(firsts)))
        planned = self.total = max(count, len(firsts) + final)
        trials = self.run(firsts, planned)
        scale = {t.candidate.kind: t.fps / t.predicted_fps for t in trials}
        rest = sorted((c for c in ranked if c not in firsts and scale[c.kind] > 0),
                      key=lambda c: -predict(c, self.costs) * scale[c.kind])
        trials += self.run(rest[: planned - len(firsts) - final], planned - len(trials))
        fastest = sorted((t for t in trials if t.error is None), key=lambda t: -t.fps)[:final]
        again = self.run([t.candidate for t in fastest], len(fastest))
        merged = {t.candidate: t for t in trials}
        for first, second in zip(fastest, again, strict=True):
            merged[first.candidate] = first if second.error is not None else replace(
                first, fps=statistics.mean((*first.runs, second.fps)), runs=(*first.runs, second.fps))
        self.bar.update(self.bar.total - self.bar.n)  # a clean end: full, nothing left to wait for
        return list(merged.values())

    def run(self, chosen: Sequence[Candidate], planned: int) -> list[Trial]:
        """Run ``chosen``, sharing what is left of the budget among ``planned`` trials."""
        trials = []
        for i, candidate in enumerate(chosen):
            self.bar.set_description(f"rlcollect tune: {candidate.label}")
            left = self.deadline - time.perf_counter()
            trials.append(run_trial(candidate, predict(candidate, self.costs), *self.source,
                                    0.9 * left / max(1, planned - i)))
            step = 100 * (1 - COST_SHARE) / self.total
            self.bar.update(min(step, self.bar.total - self.bar.n))  # never past the end
        return trials


def run_trial(candidate: Candidate, predicted: float, create_env_fn: Any, policy: Any,
              env_kwargs: Mapping[str, Any] | None, seconds: float) -> Trial:
    """Build ``candidate``, time its first batch, then its frames/s for about ``seconds`` (at
    least ``MIN_TRIAL_SECONDS``) after one batch per worker more; at one torch thread, as the
    costs were measured (an in-process collector at torch's default threads fights its envs)."""
    start = time.perf_counter()
    try:
        with one_thread(), candidate.build(create_env_fn, policy, env_kwargs, seed=0) as collector:
            batches = iter(collector)
            next(batches)
            startup = time.perf_counter() - start
            for _ in range(candidate.workers):
                next(batches)
            frames, begun = 0, time.perf_counter()
            while frames == 0 or time.perf_counter() - begun < max(MIN_TRIAL_SECONDS, seconds - startup):
                frames += next(batches).numel()
            fps = frames / (time.perf_counter() - begun)
    except Exception as error:  # a configuration the env or policy cannot run in: reported, skipped
        return Trial(candidate, predicted, error=f"{type(error).__name__}: {error}")
    return Trial(candidate, predicted, fps, startup, runs=(fps,))
