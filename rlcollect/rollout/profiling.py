"""Profiling rollouts with ``torch.profiler``: which workers, which rollouts, where traces go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = ["ProfileConfig", "RolloutProfiler"]


@dataclass
class ProfileConfig:
    """Settings for profiling collector rollouts (TorchRL's ``ProfileConfig`` fields).

    Attributes:
        workers: worker indices to profile (ignored by single-process collectors).
        num_rollouts: rollouts the profiler runs for, warm-up included.
        warmup_rollouts: rollouts run under the profiler but discarded.
        save_path: trace path, ``{worker_idx}`` is replaced (a collector's ``enable_profile`` makes
            it absolute, for workers elsewhere); default ``./collector_profile_{worker_idx}.json``.
        activities: ``"cpu"`` and/or ``"cuda"`` (cuda dropped when unavailable).
        record_shapes, profile_memory, with_stack, with_flops: passed to ``torch.profiler``.
        on_trace_ready: called with the profiler instead of writing a Chrome trace.

    Examples:
        >>> ProfileConfig(num_rollouts=3, warmup_rollouts=1).get_save_path(2).name
        'collector_profile_2.json'
        >>> ProfileConfig(num_rollouts=1, warmup_rollouts=1)
        Traceback (most recent call last):
        ...
        ValueError: num_rollouts (1) must be greater than warmup_rollouts (1)

        A collector holds its settings from ``enable_profile`` (``workers``, ``num_rollouts`` ...
        are these fields) until ``disable_profile``:

        >>> from rlcollect import Collector
        >>> with Collector("CartPole-v1", frames_per_batch=4) as collector:
        ...     collector.enable_profile(num_rollouts=2, warmup_rollouts=1)
        ...     settings = collector.profile_config
        ...     collector.disable_profile()
        ...     print(settings.num_rollouts, collector.profile_config)
        2 None
    """

    workers: list[int] = field(default_factory=lambda: [0])
    num_rollouts: int = 3
    warmup_rollouts: int = 1
    save_path: str | Path | None = None
    activities: list[str] = field(default_factory=lambda: ["cpu", "cuda"])
    record_shapes: bool = True
    profile_memory: bool = False
    with_stack: bool = True
    with_flops: bool = False
    on_trace_ready: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        if self.warmup_rollouts < 0:
            raise ValueError(f"warmup_rollouts must be >= 0, got {self.warmup_rollouts}")
        if self.num_rollouts <= self.warmup_rollouts:
            raise ValueError(
                f"num_rollouts ({self.num_rollouts}) must be greater than "
                f"warmup_rollouts ({self.warmup_rollouts})"
            )
        unknown = {a.lower() for a in self.activities} - {"cpu", "cuda"}
        if unknown:
            raise ValueError(f"activities must be among ['cpu', 'cuda'], got {sorted(unknown)}")

    def get_save_path(self, worker_idx: int) -> Path:
        """The trace file of worker ``worker_idx``."""
        if self.save_path is None:
            return Path(f"./collector_profile_{worker_idx}.json")
        return Path(str(self.save_path).format(worker_idx=worker_idx))

    def get_activities(self) -> list[torch.profiler.ProfilerActivity]:
        """The ``torch.profiler`` activities to record."""
        out = []
        for name in (a.lower() for a in self.activities):
            if name == "cpu":
                out.append(torch.profiler.ProfilerActivity.CPU)
            elif torch.cuda.is_available():
                out.append(torch.profiler.ProfilerActivity.CUDA)
        return out

    def should_profile_worker(self, worker_idx: int) -> bool:
        """Whether worker ``worker_idx`` is profiled."""
        return worker_idx in self.workers


class RolloutProfiler:
    """Runs ``torch.profiler`` over the first ``num_rollouts`` rollouts of one process."""

    def __init__(self, config: ProfileConfig, worker_idx: int = 0) -> None:
        self.config = config
        self.worker_idx = worker_idx
        self._rollouts = 0
        self._profiler: torch.profiler.profile | None = None

    def _write_trace(self, profiler: torch.profiler.profile) -> None:
        path = self.config.get_save_path(self.worker_idx)
        path.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(path))

    def before_rollout(self) -> None:
        """Start the profiler before the first rollout."""
        if self._rollouts == 0 and self._profiler is None:
            config = self.config
            self._profiler = torch.profiler.profile(
                activities=config.get_activities(),
                schedule=torch.profiler.schedule(
                    wait=0,
                    warmup=config.warmup_rollouts,
                    active=config.num_rollouts - config.warmup_rollouts,
                    repeat=1,
                ),
                on_trace_ready=config.on_trace_ready or self._write_trace,
                record_shapes=config.record_shapes,
                profile_memory=config.profile_memory,
                with_stack=config.with_stack,
                with_flops=config.with_flops,
            )
            self._profiler.__enter__()  # type: ignore[no-untyped-call]

    def after_rollout(self) -> None:
        """Advance the schedule; stop (and write the trace) after ``num_rollouts``."""
        if self._profiler is None:
            return
        self._profiler.step()
        self._rollouts += 1
        if self._rollouts >= self.config.num_rollouts:
            self.stop()

    def stop(self) -> None:
        """Stop the profiler if it runs (idempotent)."""
        if self._profiler is not None:
            profiler, self._profiler = self._profiler, None
            profiler.__exit__(None, None, None)  # type: ignore[no-untyped-call]
