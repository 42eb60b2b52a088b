"""The API every collector shares (TorchRL's ``BaseCollector`` surface): iteration, ``next()``,
``len()``, the context manager, stats, episodes, hooks, nesting and calls on the workers, the
profiling settings, and background collection through its part
(:class:`~rlcollect.collectors.background.Background`). Weights sent and received have their own
module (:mod:`~rlcollect.collectors.weight_api`).
"""

from __future__ import annotations

import abc
import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from tensordict import TensorDict, TensorDictBase
from torch.utils.data import IterableDataset

from rlcollect.collectors.background import Background
from rlcollect.collectors.checks import refuse_dataloader_workers
from rlcollect.collectors.hooks import Hook
from rlcollect.collectors.stats import CollectorStats, HandedOut
from rlcollect.collectors.stream import Stream
from rlcollect.collectors.weight_api import WeightApi
from rlcollect.common.owner import weakly
from rlcollect.data.attributes import call_path, resolve_path, worker_entries
from rlcollect.policies.devices import policy_on_device
from rlcollect.rollout.episodes import episode_table
from rlcollect.rollout.profiling import ProfileConfig

__all__ = ["BaseCollector"]

_OWN_DEVICE: Any = object()  # _get_policy_and_device's default: the collector's policy_device


class BaseCollector(WeightApi, IterableDataset,  # type: ignore[type-arg]
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
        """The reference's helper: ``policy`` on ``policy_device`` (default ``self.policy_device``)
        and a function returning its original weights, or ``(policy, None)`` where nothing moves
        (:func:`~rlcollect.policies.devices.policy_on_device`; ``env_maker*`` unused, as there)."""
        if policy_device is _OWN_DEVICE:
            policy_device = getattr(self, "policy_device", None)
        return policy_on_device(policy, policy_device, trust_policy=self.trust_policy)

    # -- profiling (the settings; the rollouts read them where they run) ------------------
    _profile_config: ProfileConfig | None = None

    def enable_profile(self, *, workers: list[int] | None = None, num_rollouts: int = 3,
                       warmup_rollouts: int = 1, save_path: str | Path | None = None,
                       activities: list[str] | None = None, record_shapes: bool = True,
                       profile_memory: bool = False, with_stack: bool = True, with_flops: bool = False,
                       on_trace_ready: Callable[[Any], None] | None = None) -> None:
        """Profile the first ``num_rollouts`` rollouts (of ``workers``) with ``torch.profiler``, the
        first ``warmup_rollouts`` discarded; Chrome traces at ``save_path`` (made absolute here, for
        workers elsewhere; ``{worker_idx}`` replaced). ``RuntimeError`` after iteration started,
        ``ValueError`` for ``num_rollouts <= warmup_rollouts``."""
        if self._iteration_started:
            raise RuntimeError("Cannot enable profiling after iteration started: enable_profile() must be "
                               "called before iterating the collector")
        self._profile_config = ProfileConfig(
            workers=[0] if workers is None else list(workers), num_rollouts=num_rollouts,
            warmup_rollouts=warmup_rollouts, record_shapes=record_shapes, profile_memory=profile_memory,
            save_path=None if save_path is None else Path(save_path).absolute(),  # workers may run elsewhere
            activities=["cpu", "cuda"] if activities is None else list(activities),
            with_stack=with_stack, with_flops=with_flops, on_trace_ready=on_trace_ready)

    def disable_profile(self) -> None:
        """Forget the :meth:`enable_profile` settings and stop this process's profiler, if it runs
        (workers that started keep profiling until their ``num_rollouts``).

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

    # -- hooks, nesting and calls (TorchRL's attributes) -----------------------------------
    options: Any = None
    _delivery: Any = None

    pre_collect_hook = Hook("Called before each batch, where it is collected (in each worker, with "
                            "workers); settable (with workers, before the first batch).")
    post_collect_hook = Hook("Called with each batch before it is yielded (or written): here, or in each "
                             "worker on its batch in the multi-process collectors, as TorchRL's; settable "
                             "(with workers, before the first batch).")

    def _set_post_collect_hook(self, hook: Callable[[TensorDictBase], None] | None) -> None:
        """Hand a new ``post_collect_hook`` to where it runs (by default: this process's delivery)."""
        self._delivery.post_collect_hook = hook

    def _set_pre_collect_hook(self, hook: Callable[[], None] | None) -> None:
        """Hand a new ``pre_collect_hook`` to what collects (a subclass's rollout or workers)."""
        raise NotImplementedError

    @property
    def worker_idx(self) -> int:
        """This collector's index among the workers of an outer collector (``RuntimeError`` if it
        is none's)."""
        if self._worker_idx is None:
            raise RuntimeError("worker_idx has not been set: this collector is not a worker of another "
                               "collector")
        return self._worker_idx

    @worker_idx.setter
    def worker_idx(self, value: int | None) -> None:
        self._worker_idx = value

    def cascade_execute(self, attr_path: str, *args: Any, **kwargs: Any) -> Any:
        """Call (or read) the attribute at ``attr_path`` of this collector, such as
        ``"_receiver_schemes['policy'].receive"`` (``AttributeError``, ``KeyError`` or
        ``IndexError`` where it does not resolve)."""
        return call_path(self, attr_path, args, kwargs)

    def call_workers(self, path: str, args: Sequence[Sequence[Any]] | None = None,
                     kwargs: Sequence[Mapping[str, Any]] | None = None) -> list[Any]:
        """Read (``args`` None) or call the attribute at ``path`` in each worker, in worker order,
        with one entry of ``args`` (and ``kwargs``) per worker, once the batches under way finish.
        A worker answers for its ``worker_idx``, ``frames_per_batch``, ``replay_buffer``,
        ``policy``, ``policy_version``, ``env`` (:class:`~rlcollect.workers.worker.WorkerView`); a
        collector without workers is its own one. ``ValueError`` for entries not one per worker;
        a path that does not resolve raises here (the worker carries on).

        Examples:
            >>> from rlcollect import Collector
            >>> with Collector("CartPole-v1", frames_per_batch=8) as collector:
            ...     read = collector.call_workers("frames_per_batch")
            ...     called = collector.call_workers("stats", [()])  # one argument entry per worker
            >>> read, called[0].frames
            ([8], 0)
        """
        (entry,), (keywords,) = worker_entries(1, args, kwargs)
        return [resolve_path(self, path) if entry is None else call_path(self, path, entry, keywords)]

    # -- background collection into the replay buffer (its part: Background) ---------------
    replay_buffer: Any = None

    @functools.cached_property
    def _background(self) -> Background:
        return Background()

    def start(self) -> None:
        """Collect into ``replay_buffer`` in a thread until :meth:`async_shutdown` (with worker
        processes, the workers write a shared or memmap buffer and the thread hands out the work).

        Raises:
            RuntimeError: no ``replay_buffer`` was given, or collection already started.
        """
        if self.replay_buffer is None:
            raise RuntimeError(f"{type(self).__name__}.start() needs replay_buffer= at construction")
        self._background.start(self.iterator, self._quiesce, self._on_background_error)

    def pause(self, timeout: float = 60.0) -> contextlib.AbstractContextManager[None]:
        """While the context is open, nothing is written to the replay buffer; entering waits up to
        ``timeout`` seconds for the batches under way to be written."""
        return self._background.pause(timeout, lambda: self.shutdown(timeout=timeout))

    def async_shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stop :meth:`start`'s collection, then shut down (every thread and process is stopped
        before an error of the collection is raised: :meth:`shutdown`)."""
        self.shutdown(timeout=timeout, close_env=close_env)

    def _stop_background(self, deadline: float, interrupt: Callable[[], None] | None = None
                         ) -> BaseException | None:
        """Stop background collection (:meth:`Background.stop`) and the receiver schemes; every
        ``shutdown`` starts with this and raises the error returned once everything is stopped."""
        try:
            return self._background.stop(deadline, interrupt)
        finally:
            self._shutdown_receivers()

    def _on_background_error(self) -> None:  # noqa: B027 (collectors with workers override it)
        """Run in the background thread if collection stops on an error (releases the workers)."""

    # -- iteration -------------------------------------------------------------------------
    @abc.abstractmethod
    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yield batches until ``total_frames`` are collected (forever if it is -1)."""

    def __iter__(self) -> Iterator[TensorDictBase]:
        """Yield batches, going on from where the last iterator stopped (one stream: see
        :class:`~rlcollect.collectors.stream.Stream`). With a ``replay_buffer``, ``None`` for each
        batch written (typed as the reference's): read the buffer, not the loop's variable."""
        refuse_dataloader_workers(type(self).__name__)
        return self._batches.iterator(self._source)

    def next(self) -> TensorDictBase | None:
        """The next batch, or ``None`` once ``total_frames`` are collected."""
        refuse_dataloader_workers(type(self).__name__)
        return cast("TensorDictBase | None", self._batches.next(self._source))

    @functools.cached_property
    def _batches(self) -> Stream:
        """The one stream of batches (:class:`~rlcollect.collectors.stream.Stream`)."""
        background = self._background  # (the stream keeps no reference to the collector)
        return Stream(weakly(self.shutdown), lambda: background.running)

    def _source(self) -> Iterator[TensorDictBase | None]:  # counted where stats() is this class's
        batches = self.iterator()
        return self._handed_out.count(batches) if type(self).stats is BaseCollector.stats else batches

    @property
    def _busy(self) -> threading.RLock:  # held while a batch is made: another thread's state waits
        return self._batches.busy

    @property
    def _iteration_started(self) -> bool:
        return self._batches.started or self._background.running

    def _closed_error(self) -> RuntimeError:
        """The error for a use after :meth:`shutdown`, saying why it was shut down."""
        return self._batches.closed_error()

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"a {type(self).__name__} cannot be pickled or copied: it holds its envs, threads "
                        "and worker processes. Build a collector where it is needed (from the same "
                        "arguments), and carry its progress with state_dict() / load_state_dict()")

    def __len__(self) -> int:
        """Number of batches; only for collectors with a finite ``total_frames``."""
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
    def shutdown(self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
                 ) -> None:
        """Release envs, processes and shared memory; idempotent."""

    init_random_frames: int = 0

    def _in_warmup(self, collected: int, in_flight: int = 0) -> bool:
        """Whether the next batch takes random actions: the frames collected (or written to the
        replay buffer, if it counts) and under way are below ``init_random_frames``."""
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
        """Frames, batches, fps, episodes, mean return, restarts, policy lag (this default, for a
        subclass with the reference's methods only: the batches handed out, :class:`HandedOut`)."""
        return self._handed_out.stats()

    @functools.cached_property
    def _handed_out(self) -> HandedOut:
        return HandedOut()

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
        """Every episode the envs ended since the last call (one a reset abandoned is none), a row
        each, in the order learnt of: a TensorDict ``[episodes]`` of ``"return"`` (float64),
        ``"length"`` (int64), ``"env"`` (its index in the collector: ``worker * envs per worker +
        its index``), ``"traj_id"`` (its frames' ``("collector", "traj_ids")``),
        ``"policy_version"`` (that of its last action) and ``"worker"`` (0 in one process).

        Computed per batch where the batch is made, in every collector, in iteration and in
        :meth:`start`'s collection. The last 10,000 are kept between calls (under 0.5 MB per
        process that steps envs); older ones are dropped (``stats().episodes`` counts them all).

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


