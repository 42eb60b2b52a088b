"""The API every collector shares (TorchRL's ``BaseCollector`` surface), each method handing its
work to a part where one does it (weights, background collection, the stream of batches).
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
import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils.data import IterableDataset

from rlcollect.collectors.background import Background
from rlcollect.collectors.checks import refuse_dataloader_workers
from rlcollect.collectors.hooks import Hook
from rlcollect.collectors.stats import CollectorStats, HandedOut
from rlcollect.collectors.stream import Stream
from rlcollect.collectors.weight_api import Weights
from rlcollect.common.owner import weakly
from rlcollect.data.attributes import call_path, resolve_path, worker_entries
from rlcollect.policies.devices import policy_on_device
from rlcollect.rollout.episodes import episode_table
from rlcollect.rollout.profiling import ProfileConfig
from rlcollect.weights.schemes import WeightSyncScheme
from rlcollect.weights.updater import WeightUpdaterBase

__all__ = ["BaseCollector"]

_OWN_DEVICE: Any = object()  # _get_policy_and_device's default: the collector's policy_device


class BaseCollector(IterableDataset,  # type: ignore[type-arg]
                    metaclass=abc.ABCMeta):
    """Base class of the collectors: an iterable of ``[N, T]`` TensorDict batches, and a torch
    ``IterableDataset`` that ``DataLoader(collector, batch_size=None, collate_fn=lambda b: b)`` reads
    (in this process, ``num_workers=0``: the collector's own workers collect in parallel).

    A subclass implements the reference's abstract methods (:meth:`iterator`, :meth:`shutdown`,
    :meth:`set_seed`, :meth:`state_dict`, :meth:`load_state_dict`); the rest has a default.
    """

    total_frames: int
    frames_per_batch: int
    requested_frames_per_batch: int
    #: The reference's flags: the policy's device trusted without a warning (policy devices are
    #: always checked by a dry step here), the policy captured in CUDA graphs or compiled
    #: (``compile_policy``), chatter.
    trust_policy: bool = False
    cudagraphed_policy: bool = False
    verbose: bool = False

    compiled_policy: bool = False

    def _get_policy_and_device(self, policy: Any = None, policy_device: Any = _OWN_DEVICE,
                               env_maker: Any = None, env_maker_kwargs: Any = None) -> tuple[Any, Any]:
        """The reference's helper: :func:`~rlcollect.policies.devices.policy_on_device` on
        ``policy_device`` (default ``self.policy_device``; ``env_maker*`` unused, as there)."""
        if policy_device is _OWN_DEVICE:
            policy_device = getattr(self, "policy_device", None)
        return policy_on_device(policy, policy_device, trust_policy=self.trust_policy)

    # -- weights (their part: Weights; a subclass says how they reach what it runs) ------------
    num_workers: int = 1
    _worker_idx: int | None = None

    @functools.cached_property
    def _weight_part(self) -> Weights:
        return Weights(self)

    @property
    def weight_sync_schemes(self) -> dict[str, WeightSyncScheme]:
        """``{model_id: scheme}`` moving each model's weights to the workers (defaults included)."""
        return dict(self._weight_part.senders or {})

    @property
    def weight_updater(self) -> WeightUpdaterBase | None:
        """The legacy updater called by ``update_policy_weights_`` instead of the schemes; settable."""
        return self._weight_part.updater

    @weight_updater.setter
    def weight_updater(self, value: Any) -> None:
        self._weight_part.set_updater(value)

    @property
    def _receiver_schemes(self) -> dict[str, WeightSyncScheme] | None:  # the reference's name, read by it
        return self._weight_part.receivers

    def init_updater(self, *args: Any, **kwargs: Any) -> None:
        """Pass ``args`` and ``kwargs`` to the legacy weight updater's ``init`` (no-op without one)."""
        self._weight_part.init_updater(*args, **kwargs)

    def update_policy_weights_(
            self, policy_or_weights: Any = None, *, weights: Any = None, policy: Any = None,
            worker_ids: int | torch.device | Sequence[int | torch.device] | None = None,
            model_id: str | None = None, weights_dict: Mapping[str, Any] | None = None,
            policy_weights: Any = None, **updater_kwargs: Any) -> None:
        """Bring the weights up to date, a version more (each form: ``weight_api.Weights.update``)."""
        self._weight_part.update(policy_or_weights, weights=weights, policy=policy, worker_ids=worker_ids,
                                 model_id=model_id, weights_dict=weights_dict,
                                 policy_weights=policy_weights, **updater_kwargs)

    def receive_weights(self, policy_or_weights: Any = None, *, weights: Any = None, policy: Any = None
                        ) -> None:
        """Apply weights received from upstream (``weight_api.Weights.receive`` says how)."""
        self._weight_part.receive(policy_or_weights, weights=weights, policy=policy)

    def register_scheme_receiver(self, weight_recv_schemes: Mapping[str, WeightSyncScheme], *,
                                 synchronize_weights: bool = True) -> None:
        """Receive weights through ``{model_id: scheme}`` (``weight_api.Weights.register`` says how)."""
        self._weight_part.register(weight_recv_schemes, synchronize_weights)

    def _receive_weights_scheme(self, model_version: int | None = None) -> None:
        """Receive through every receiver scheme (``model_version`` unused: an update is a version)."""
        self._weight_part.receive_all()

    def _update_weights(self, forms: dict[str, Any], worker_ids: list[int] | None) -> None:
        """Apply ``{model_id: weights or None}`` to these workers (``None``: all); here: ``self.policy``."""
        self._weight_part.apply_to_policy_attribute(forms)

    def _apply_received(self, forms: dict[str, Any]) -> None:  # weights from upstream: to every worker
        self._update_weights(forms, None)

    def _weights_sent(self) -> None:  # noqa: B027 (a collector that warns about unsent edits notes it)
        pass

    def _model_ids(self) -> list[str]:
        return ["policy"]

    def receiver_model(self, model_id: str) -> torch.nn.Module:
        """The module weights of ``model_id`` are applied to (``KeyError`` for a model id this
        collector lacks; what a receiver scheme asks: :class:`~rlcollect.weights.context.WeightContext`)."""
        raise NotImplementedError

    # -- profiling (the settings; the rollouts read them where they run) ------------------
    _profile_config: ProfileConfig | None = None

    def enable_profile(self, *, workers: list[int] | None = None, num_rollouts: int = 3,
                       warmup_rollouts: int = 1, save_path: str | Path | None = None,
                       activities: list[str] | None = None, record_shapes: bool = True,
                       profile_memory: bool = False, with_stack: bool = True, with_flops: bool = False,
                       on_trace_ready: Callable[[Any], None] | None = None) -> None:
        """Profile rollouts with ``torch.profiler`` (:class:`~rlcollect.rollout.profiling.ProfileConfig`
        says each setting); ``RuntimeError`` once iteration started."""
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
        (workers that started keep profiling until their ``num_rollouts``)."""
        self._profile_config = None
        self._stop_profiler()

    def _stop_profiler(self) -> None:  # noqa: B027 (a collector whose profiler runs here stops it)
        pass

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

    def _set_post_collect_hook(self, hook: Callable[[TensorDictBase], None] | None) -> None:  # where it runs
        self._delivery.post_collect_hook = hook

    def _set_pre_collect_hook(self, hook: Callable[[], None] | None) -> None:  # to the rollout or workers
        raise NotImplementedError

    @property
    def worker_idx(self) -> int:
        """This collector's index among an outer collector's workers (``RuntimeError``: none's)."""
        if self._worker_idx is None:
            raise RuntimeError("worker_idx has not been set: this collector is not a worker of another "
                               "collector")
        return self._worker_idx

    @worker_idx.setter
    def worker_idx(self, value: int | None) -> None:
        self._worker_idx = value

    def cascade_execute(self, attr_path: str, *args: Any, **kwargs: Any) -> Any:
        """Call (or read) the attribute at ``attr_path`` of this collector, such as
        ``"_receiver_schemes['policy'].receive"`` (an error where it does not resolve)."""
        return call_path(self, attr_path, args, kwargs)

    def call_workers(self, path: str, args: Sequence[Sequence[Any]] | None = None,
                     kwargs: Sequence[Mapping[str, Any]] | None = None) -> list[Any]:
        """Read (``args`` None) or call, with its entry of ``args`` (and ``kwargs``), the attribute at
        ``path`` in each worker (:class:`~rlcollect.workers.worker.WorkerView`; without workers: here).

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
        """Collect into ``replay_buffer`` in a thread until :meth:`async_shutdown` (workers write a
        shared or memmap buffer); ``RuntimeError`` without one, or if collection started."""
        if self.replay_buffer is None:
            raise RuntimeError(f"{type(self).__name__}.start() needs replay_buffer= at construction")
        self._background.start(self.iterator, self._quiesce, self._on_background_error)

    def pause(self, timeout: float = 60.0) -> contextlib.AbstractContextManager[None]:
        """Nothing is written to the replay buffer while open (entering waits for the batches under
        way, up to ``timeout`` seconds)."""
        return self._background.pause(timeout, lambda: self.shutdown(timeout=timeout))

    def async_shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stop :meth:`start`'s collection and shut down (its error raised once all is stopped)."""
        self.shutdown(timeout=timeout, close_env=close_env)

    def _stop_background(self, deadline: float, interrupt: Callable[[], None] | None = None
                         ) -> BaseException | None:
        """Stop background collection and the receiver schemes (every ``shutdown`` starts so, and
        raises the error returned once everything is stopped)."""
        try:
            return self._background.stop(deadline, interrupt)
        finally:
            self._weight_part.shutdown()

    def _on_background_error(self) -> None:  # noqa: B027 (in the thread, on an error: workers are released)
        pass

    # -- iteration -------------------------------------------------------------------------
    @abc.abstractmethod
    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yield batches until ``total_frames`` are collected (forever if it is -1)."""

    def __iter__(self) -> Iterator[TensorDictBase]:
        """Yield batches, going on where the last iterator stopped (one stream); with a
        ``replay_buffer``, ``None`` for each batch written: read the buffer, not the loop's variable."""
        refuse_dataloader_workers(type(self).__name__)
        return self._batches.iterator(self._source)

    def next(self) -> TensorDictBase | None:
        """The next batch, or ``None`` once ``total_frames`` are collected."""
        refuse_dataloader_workers(type(self).__name__)
        return cast("TensorDictBase | None", self._batches.next(self._source))

    @functools.cached_property
    def _batches(self) -> Stream:  # the one stream of batches
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

    def _closed_error(self) -> RuntimeError:  # for a use after shutdown(), saying why it was shut down
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
        """Whether the next batch acts at random: frames collected (or written to the replay
        buffer, if it counts) and under way below ``init_random_frames``."""
        written = int(getattr(self.replay_buffer, "write_count", collected))
        return written + in_flight < self.init_random_frames

    def _quiesce(self) -> None:  # returns once no batch is under way (in one process: none is)
        return

    @abc.abstractmethod
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed env ``i`` with ``seed + i`` at its next reset; return ``seed + number of envs``."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume collection where it stands."""

    @abc.abstractmethod
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`."""

    def stats(self) -> CollectorStats:
        """Frames, batches, fps, episodes, mean return, restarts, policy lag (by default: the
        batches handed out)."""
        return self._handed_out.stats()

    @functools.cached_property
    def _handed_out(self) -> HandedOut:
        return HandedOut()

    @property
    def policy_version(self) -> int | None:
        """The version of the weights the next frames are collected with (0, one more per update or
        edit in place of ``Collector``'s acting module); ``None`` where the layout stamps none."""
        options = getattr(self, "options", None)
        if options is not None and not options.layout.reports_policy_version():
            return None
        return self.stats().policy_version

    def get_policy_version(self) -> int | None:
        """:attr:`policy_version` (a method, as TorchRL's collectors have one for Ray's calls)."""
        return self.policy_version

    def episodes(self) -> TensorDict:
        """Every episode ended since the last call (the last 10,000 are kept), a row each, in the order
        learnt of (:func:`~rlcollect.rollout.episodes.episode_table` says its columns).

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

    def _drain_episodes(self) -> dict[str, np.ndarray]:  # the records since the last call
        raise NotImplementedError(f"{type(self).__name__} keeps no episode records")

    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled batch shaped as this collector's batches: single-process collectors only."""
        raise NotImplementedError(f"{type(self).__name__} has no fake_tensordict: a batch's shape depends "
                                  "on which workers' frames it holds; Collector has one")

    @property
    def traj_format(self) -> str | None:
        """How ``trajs_per_batch`` batches hold their episodes: ``"padded"`` or ``"cat"``."""
        return None if self._delivery is None else self._delivery.traj_format

    def __repr__(self) -> str:  # the batch size and the frames to collect, where set
        total = getattr(self, "total_frames", -1)
        shown = {"frames_per_batch": getattr(self, "frames_per_batch", None),
                 "total_frames": "endless" if total < 0 else total}
        fields = ", ".join(f"{name}={value}" for name, value in shown.items() if value is not None)
        return f"{type(self).__name__}({fields})"


