"""Profiling a collector's workers with the torch profiler: ``enable_profile()``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlcollect.rollout.profiling import ProfileConfig

__all__ = ["ProfileApi"]


class ProfileApi:
    """The profiling methods every collector has (a part of :class:`~rlcollect.BaseCollector`)."""

    _profile_config: ProfileConfig | None = None
    _iteration_started: bool  # (BackgroundCollection's)

    # -- profiling -------------------------------------------------------------------------
    def enable_profile(
        self,
        *,
        workers: list[int] | None = None,
        num_rollouts: int = 3,
        warmup_rollouts: int = 1,
        save_path: str | Path | None = None,
        activities: list[str] | None = None,
        record_shapes: bool = True,
        profile_memory: bool = False,
        with_stack: bool = True,
        with_flops: bool = False,
        on_trace_ready: Callable[[Any], None] | None = None,
    ) -> None:
        """Profile the first ``num_rollouts`` rollouts (of ``workers``) with ``torch.profiler``.

        Traces are Chrome trace files at ``save_path`` (made absolute here, so a worker or a Ray
        actor with another working directory writes where you said; ``{worker_idx}`` is
        replaced), the first ``warmup_rollouts`` rollouts discarded.

        Raises:
            RuntimeError: called after iteration started.
            ValueError: ``num_rollouts <= warmup_rollouts``.
        """
        if self._iteration_started:
            raise RuntimeError("Cannot enable profiling after iteration started: enable_profile() must be "
                               "called before iterating the collector")
        self._profile_config = ProfileConfig(
            workers=[0] if workers is None else list(workers),
            num_rollouts=num_rollouts,
            warmup_rollouts=warmup_rollouts,
            save_path=None if save_path is None else Path(save_path).absolute(),  # workers may run elsewhere
            activities=["cpu", "cuda"] if activities is None else list(activities),
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            with_flops=with_flops,
            on_trace_ready=on_trace_ready,
        )

    def disable_profile(self) -> None:
        """Forget the :meth:`enable_profile` settings and stop this process's profiler if it runs
        (no-op when profiling was never enabled). Workers that already started keep profiling
        until their ``num_rollouts``.

        Examples:
            >>> from rlcollect import Collector
            >>> with Collector("CartPole-v1", frames_per_batch=4) as collector:
            ...     collector.enable_profile(num_rollouts=2, warmup_rollouts=1)
            ...     collector.disable_profile()
            ...     print(collector.profile_config)
            None
        """
        self._profile_config = None
        self._stop_profiler()

    def _stop_profiler(self) -> None:  # noqa: B027 (collectors with a profiler here override it)
        """Stop the profiler that runs in this process, if any."""

    @property
    def profile_config(self) -> ProfileConfig | None:
        """The profiling settings, ``None`` unless :meth:`enable_profile` was called."""
        return self._profile_config

