"""The API every collector shares (TorchRL's ``BaseCollector`` surface).

Subclasses implement the reference's abstract methods (:meth:`BaseCollector.iterator`, ``shutdown``,
``set_seed``, ``state_dict``, ``load_state_dict``); everything else has a working default.
Iteration, ``next()``, ``len()``, the context manager, stats, episodes and the profiling settings
live here; the other parts of the API each have a module: background collection
(:mod:`~rlcollect.collectors.background`), weights sent and received
(:mod:`~rlcollect.collectors.weight_api`), hooks, nesting and calls on the workers
(:mod:`~rlcollect.collectors.remote`).
"""

from __future__ import annotations

import abc
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from tensordict import TensorDict, TensorDictBase
from torch.utils.data import IterableDataset

from rlcollect.collectors.background import BackgroundCollection
from rlcollect.collectors.checks import refuse_dataloader_workers
from rlcollect.collectors.remote import RemoteApi
from rlcollect.collectors.stats import CollectorStats
from rlcollect.collectors.stream import Batches
from rlcollect.collectors.weight_api import WeightApi
from rlcollect.policies.devices import policy_on_device
from rlcollect.rollout.episodes import episode_table
from rlcollect.rollout.profiling import ProfileConfig

__all__ = ["BaseCollector"]

_OWN_DEVICE: Any = object()  # _get_policy_and_device's default: the collector's policy_device


class BaseCollector(BackgroundCollection, WeightApi, RemoteApi, IterableDataset,  # type: ignore[type-arg]
                    metaclass=abc.ABCMeta):
    """Base class of the collectors: an iterable of ``[N, T]`` TensorDict batches, and a torch
    ``IterableDataset`` that ``DataLoader(collector, batch_size=None, collate_fn=lambda b: b)`` reads
    (in this process, ``num_workers=0``: the collector's own workers collect in parallel).

    A subclass implements the reference's abstract methods, :meth:`iterator`, :meth:`shutdown`,
    :meth:`set_seed`, :meth:`state_dict` and :meth:`load_state_dict`; everything else has a
    working default (:meth:`stats` counts the batches handed out, weight updates go to
    ``self.policy``).
    """

    total_frames: int
    frames_per_batch: int
    requested_frames_per_batch: int
    _iterator: Iterator[TensorDictBase | None] | None = None
    _stream_ref: weakref.ref[Batches] | None = None
    _busy_lock: threading.RLock | None = None
    #: The reference's flags: the policy's device trusted without a warning (policy devices are
    #: always checked by a dry step here), the policy compiled or captured in CUDA graphs, chatter.
    trust_policy: bool = False
    cudagraphed_policy: bool = False
    verbose: bool = False

    _compiled_policy: bool | None = None  # set by a subclass; else read from the options
    @property
    def compiled_policy(self) -> bool:
        """Whether the policy runs ``torch.compile``-d (``compile_policy``); settable."""
        if self._compiled_policy is not None:
            return self._compiled_policy
        options = getattr(self, "options", None)
        return bool(options is not None and options.compile_policy)

    @compiled_policy.setter
    def compiled_policy(self, value: bool) -> None:
        self._compiled_policy = bool(value)

    def _get_policy_and_device(self, policy: Any = None, policy_device: Any = _OWN_DEVICE,
                               env_maker: Any = None, env_maker_kwargs: Any = None) -> tuple[Any, Any]:
        """The reference's helper for subclasses: ``policy`` copied onto ``policy_device`` (by
        default ``self.policy_device``) and a function returning its original weights, or
        ``(policy, None)`` where nothing moves (see :func:`~rlcollect.policies.devices.policy_on_device`;
        ``env_maker`` and its kwargs are accepted and unused, as in the reference)."""
        if policy_device is _OWN_DEVICE:
            policy_device = getattr(self, "policy_device", None)
        return policy_on_device(policy, policy_device, trust_policy=self.trust_policy)

    # -- profiling (the settings; the rollouts read them where they run) ------------------
    _profile_config: ProfileConfig | None = None

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

    # -- iteration -------------------------------------------------------------------------
    @abc.abstractmethod
    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yield batches until ``total_frames`` are collected (forever if it is -1)."""

    def __iter__(self) -> Iterator[TensorDictBase]:
        """Yield batches, going on from where the last iterator stopped.

        Typed as the reference types it, ``Iterator[TensorDictBase]``, so that a loop over batches
        type-checks as it is written. A collector given a ``replay_buffer`` yields ``None`` for each
        batch instead (the batch went into the buffer; the loop only paces collection): read the
        buffer, not the loop's variable.

        A collector has one stream of batches: while an iterator over it is alive (referenced and
        not finished), ``iter(collector)`` returns that same iterator, so two of them share the
        stream and every step is delivered once, to one of them. An iterator that is dropped
        (``break``, ``next(iter(collector))``) leaves the collector as it is, ready for the next
        loop; an error of collection (a Ctrl-C while it waits, too) shuts it down before it propagates.
        """
        refuse_dataloader_workers(type(self).__name__)
        live = self._stream_ref() if self._stream_ref is not None else None
        if live is not None and not live.finished:
            return live
        stream = Batches(self._stream(), self._busy, lambda: self._background is not None)
        self._stream_ref = weakref.ref(stream)
        return stream

    @property
    def _busy(self) -> threading.RLock:
        """Held while a batch is being made: a state from another thread waits for it."""
        if self._busy_lock is None:
            self._busy_lock = threading.RLock()
        return self._busy_lock

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"a {type(self).__name__} cannot be pickled or copied: it holds its envs, threads "
                        "and worker processes. Build a collector where it is needed (from the same "
                        "arguments), and carry its progress with state_dict() / load_state_dict()")

    def _stream(self) -> Generator[TensorDictBase | None, None, None]:
        self._iteration_started = True
        batches = self.iterator()
        if type(self).stats is BaseCollector.stats:  # a subclass with the reference's methods only
            batches = self._counted(batches)
        try:
            yield from batches
        except GeneratorExit:  # the loop was left, or the iterator dropped: not an error
            raise
        except BaseException as error:
            self._shutdown_quietly(error)
            raise

    _shutdown_cause = "shutdown() was called"

    def _closed_error(self) -> RuntimeError:
        """The error for a use after :meth:`shutdown`, saying why it was shut down."""
        return RuntimeError(f"the collector was shut down ({self._shutdown_cause}): build a new one to "
                            "collect more")

    def _shutdown_quietly(self, error: BaseException) -> None:
        """Shut down while ``error`` propagates: a failure of the shutdown itself is a warning, not
        a second exception on top of the first."""
        self._shutdown_cause = f"collection stopped on {type(error).__name__}: {str(error)[:200]}"
        try:
            self.shutdown(raise_on_error=False)
        except Exception as failure:
            warnings.warn(f"shutting down after {type(error).__name__} failed too: {failure!r}",
                          RuntimeWarning, stacklevel=3)

    def next(self) -> TensorDictBase | None:
        """The next batch, or ``None`` once ``total_frames`` are collected."""
        if self._iterator is None:
            self._iterator = iter(self)
        try:
            return next(self._iterator)
        except StopIteration:
            return None

    def __len__(self) -> int:
        """Number of batches; only for collectors with a finite ``total_frames`` (a subclass that
        sets none has no length either)."""
        total = getattr(self, "total_frames", -1)
        if total > 0:
            return -(total // -self.frames_per_batch)
        raise RuntimeError(f"a collector with total_frames={total} never ends and has no length")

    def __enter__(self) -> BaseCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- lifecycle -------------------------------------------------------------------------
    @abc.abstractmethod
    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        """Release envs, processes and shared memory; idempotent."""

    init_random_frames: int = 0

    def _in_warmup(self, collected: int, in_flight: int = 0) -> bool:
        """Whether the next batch takes random actions: the frames collected (or written to the
        replay buffer, when it counts its writes) and those under way are below ``init_random_frames``."""
        written = int(getattr(self.replay_buffer, "write_count", collected))
        return written + in_flight < self.init_random_frames

    def _quiesce(self) -> None:
        """Return once no batch is under way: in one process, none is between two yields."""
        return

    @abc.abstractmethod
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed env ``i`` with ``seed + i`` at its next reset; return ``seed + number of envs``."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume collection where it stands."""

    @property
    def _state_kind(self) -> str:
        """The collector class a state belongs to: the first of rlcollect's own in this class's
        bases (a subclass, TorchRL's names included, loads the states of the class it extends)."""
        for cls in type(self).__mro__:
            if cls.__module__.startswith("rlcollect.collectors"):
                return cls.__name__
        return type(self).__name__

    @abc.abstractmethod
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`."""

    def stats(self) -> CollectorStats:
        """Frames, batches, fps, episodes, mean return, restarts, policy lag.

        rlcollect's collectors count all of them where the batches are made; this default (for a
        subclass that implements only the reference's abstract methods) counts the frames and
        batches handed out, and their rate since the first one was asked for.
        """
        frames, batches, started = self._handed_out
        seconds = time.perf_counter() - started if started else 0.0
        return CollectorStats(frames=frames, batches=batches, fps=frames / seconds if seconds > 0 else 0.0)

    _handed_out: tuple[int, int, float] = (0, 0, 0.0)  # frames, batches, when the first was asked for

    def _counted(self, batches: Iterator[TensorDictBase | None]) -> Iterator[TensorDictBase | None]:
        """``batches``, counted for the default :meth:`stats`."""
        frames, count, started = self._handed_out
        self._handed_out = (frames, count, started or time.perf_counter())
        try:
            for batch in batches:
                if batch is not None:
                    frames, count, started = self._handed_out
                    self._handed_out = (frames + batch.numel(), count + 1, started)
                yield batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    @property
    def policy_version(self) -> int | None:
        """The version of the weights the next frames are collected with (0 at the start, one more
        per update, or ``Collector``'s acting module edited in place); ``None`` where the layout
        stamps none (TorchRL's, unless told to track it).

        Examples:
            >>> import torch
            >>> from rlcollect import Collector
            >>> policy = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Softmax(-1))
            >>> greedy = lambda obs: policy(obs).argmax(-1)
            >>> collector = Collector("CartPole-v1", greedy, frames_per_batch=4, models={"policy": policy})
            >>> with collector:
            ...     collector.update_policy_weights_(policy)
            ...     collector.get_policy_version()
            1
        """
        options = getattr(self, "options", None)
        if options is not None and not options.layout.reports_policy_version():
            return None
        return self.stats().policy_version

    def get_policy_version(self) -> int | None:
        """:attr:`policy_version` (a method, as TorchRL's collectors have one for Ray's calls)."""
        return self.policy_version

    def episodes(self) -> TensorDict:
        """Every episode the env ended since the last call (the first time: since the start; one a
        reset abandoned is none), a row each, in the order learnt of: a TensorDict ``[episodes]`` of

        - ``"return"`` (float64) and ``"length"`` (int64, steps),
        - ``"env"``: the env's index in the collector (the row of its frames in a batch of every
          env; ``worker * envs per worker + its index`` in its worker),
        - ``"traj_id"``: the trajectory id of its frames (``("collector", "traj_ids")``),
        - ``"policy_version"``: the version that chose its last action,
        - ``"worker"``: the worker process (or Ray actor) that stepped it; 0 in one process.

        Computed per batch where the batch is made, vectorised; the same in every collector, in
        iteration and in background collection (:meth:`start`). The last 10,000 are kept between
        calls, in arrays allocated once per process that steps envs (under 0.5 MB each), so a
        collector whose episodes are never asked for does not grow; older ones are dropped
        (``stats().episodes`` counts every episode all the same).

        Examples:
            >>> from rlcollect import Collector
            >>> with Collector("CartPole-v1", frames_per_batch=256, total_frames=512, seed=0) as collector:
            ...     frames = sum(batch.numel() for batch in collector)
            ...     table = collector.episodes()
            >>> table.batch_size[0] > 0, sorted(table.keys())
            (True, ['env', 'length', 'policy_version', 'return', 'traj_id', 'worker'])
            >>> collector.episodes().batch_size  # drained
            torch.Size([0])
        """
        return episode_table(self._drain_episodes())

    def _drain_episodes(self) -> dict[str, np.ndarray]:
        """The episode records since the last call (``EpisodeTracker.drain``)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no episode records")

    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled batch shaped as this collector's batches: single-process collectors only."""
        raise NotImplementedError(f"{type(self).__name__} has no fake_tensordict: a batch's shape depends "
                                  "on which workers' frames it holds; Collector has one")

    @property
    def traj_format(self) -> str | None:
        """How ``trajs_per_batch`` batches hold their episodes: ``"padded"`` or ``"cat"``."""
        return None if self._delivery is None else self._delivery.traj_format

    def __repr__(self) -> str:
        """The batch size and the frames to collect, where set (a subclass may set neither)."""
        total = getattr(self, "total_frames", -1)
        shown = {"frames_per_batch": getattr(self, "frames_per_batch", None),
                 "total_frames": "endless" if total < 0 else total}
        fields = ", ".join(f"{name}={value}" for name, value in shown.items() if value is not None)
        return f"{type(self).__name__}({fields})"


