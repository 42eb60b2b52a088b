"""The API every collector shares (TorchRL's ``BaseCollector`` surface).

Subclasses implement :meth:`BaseCollector.iterator`, :meth:`~BaseCollector.shutdown`,
:meth:`~BaseCollector.set_seed`, :meth:`~BaseCollector.state_dict` and
:meth:`~BaseCollector.load_state_dict` (the reference's abstract methods); rlcollect's own
collectors also implement :meth:`~BaseCollector.stats` and :meth:`~BaseCollector._update_weights`,
which have defaults here; iteration, ``next()``, ``len()``, the context manager,
profiling settings and the many forms of ``update_policy_weights_`` live here.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import inspect
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils.data import IterableDataset

from rlcollect.collectors.stats import CollectorStats
from rlcollect.data.attributes import call_path, resolve_path
from rlcollect.rollout.episodes import episode_table
from rlcollect.rollout.profiling import ProfileConfig
from rlcollect.weights.forms import apply_weights, as_weights, check_model_ids, weight_update_forms
from rlcollect.weights.schemes import NoWeightSyncScheme, WeightSyncScheme
from rlcollect.weights.updater import WeightUpdaterBase

__all__ = ["BaseCollector"]


class BaseCollector(IterableDataset, metaclass=abc.ABCMeta):
    """Base class of the collectors: an iterable of ``[N, T]`` TensorDict batches, and a torch
    ``IterableDataset``: ``DataLoader(collector, batch_size=None, collate_fn=lambda batch: batch)``
    hands out its batches.

    A subclass implements the reference's abstract methods, :meth:`iterator`, :meth:`shutdown`,
    :meth:`set_seed`, :meth:`state_dict` and :meth:`load_state_dict`; everything else has a
    working default (:meth:`stats` counts the batches handed out, weight updates go to
    ``self.policy``).
    """

    total_frames: int
    frames_per_batch: int
    requested_frames_per_batch: int
    _profile_config: ProfileConfig | None = None
    _iteration_started: bool = False
    _iterator: Iterator[TensorDictBase | None] | None = None
    _stream_ref: weakref.ref[Generator[TensorDictBase | None, None, None]] | None = None

    # -- iteration -------------------------------------------------------------------------
    @abc.abstractmethod
    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yield batches until ``total_frames`` are collected (forever if it is -1)."""

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        """Yield batches, going on from where the last iterator stopped.

        A collector has one stream of batches: while an iterator over it is alive (referenced and
        not finished), ``iter(collector)`` returns that same iterator, so two of them share the
        stream and every step is delivered once, to one of them. An iterator that is dropped
        (``break``, ``next(iter(collector))``) leaves the collector as it is, ready for the next
        loop; an error of collection (a Ctrl-C while it waits, too) shuts it down before it
        propagates.
        """
        live = self._stream_ref() if self._stream_ref is not None else None
        if live is not None and inspect.getgeneratorstate(live) != inspect.GEN_CLOSED:
            return live
        stream = self._stream()
        self._stream_ref = weakref.ref(stream)
        return stream

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
        """Number of batches; only for collectors with a finite ``total_frames``."""
        if self.total_frames > 0:
            return -(self.total_frames // -self.frames_per_batch)
        raise RuntimeError("a collector with total_frames=-1 never ends and has no length")

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

    # -- background collection into the replay buffer ---------------------------------------
    replay_buffer: Any = None
    _background: _Background | None = None

    def start(self) -> None:
        """Collect into ``replay_buffer`` in the background until :meth:`async_shutdown`.

        A thread drives the collector; with worker processes, the workers write a shared or
        memmap buffer themselves and the thread only hands out the work.

        Raises:
            RuntimeError: no ``replay_buffer`` was given, or collection already started.
        """
        if self.replay_buffer is None:
            raise RuntimeError(f"{type(self).__name__}.start() needs replay_buffer= at construction")
        if self._background is not None:
            raise RuntimeError("start() was already called")
        self._iteration_started = True
        self._background = _Background(self.iterator(), self._quiesce, self._on_background_error)

    @contextlib.contextmanager
    def pause(self, timeout: float = 60.0) -> Iterator[None]:
        """While the context is open, nothing is written to the replay buffer.

        Entering waits (up to ``timeout`` seconds) for the batches under way to be written.
        """
        background = self._background
        if background is None:
            raise RuntimeError("pause() needs background collection: call start() first")
        if not background.hold(timeout):  # collection stopped on an error: stop the rest, raise it
            self.shutdown(timeout=timeout)
            raise RuntimeError("background collection stopped")  # (shutdown raised its error)
        try:
            yield
        finally:
            background.release()

    def async_shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stop background collection started by :meth:`start`, then shut down (see
        :meth:`shutdown`: every thread and process is stopped before an error of the collection
        is raised)."""
        self.shutdown(timeout=timeout, close_env=close_env)

    def _stop_background(self, deadline: float, interrupt: Callable[[], None] | None = None
                         ) -> BaseException | None:
        """Stop the background thread, if any, and the receiver schemes (every ``shutdown``
        starts with this); return the error collection stopped on, for the caller to raise once
        everything is stopped.

        The thread may finish the batch under way until half the time left to ``deadline``
        (``time.monotonic()``); then ``interrupt`` makes it give up its waits.
        """
        background, self._background = self._background, None
        try:
            return background.stop(deadline, interrupt) if background is not None else None
        finally:
            self._shutdown_receivers()

    def _on_background_error(self) -> None:
        """Called in the background thread once collection stopped on an error: release what
        would otherwise keep running until :meth:`shutdown` (the workers)."""
        return

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
        per ``update_policy_weights_``); ``None`` in TorchRL's layout without
        ``track_policy_version``, as in TorchRL.

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
        if options is not None and not options.layout.reports_policy_version(options.track_policy_version):
            return None
        return self.stats().policy_version

    def get_policy_version(self) -> int | None:
        """:attr:`policy_version` (a method, as TorchRL's collectors have one for Ray's calls)."""
        return self.policy_version

    def episodes(self) -> TensorDict:
        """Every episode that ended since the last call (since the start, the first time), one row
        each, in the order the collector learnt of them: a TensorDict ``[episodes]`` of

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

    # -- weights: sending ---------------------------------------------------------------------
    _weight_sync_schemes: dict[str, WeightSyncScheme] | None = None
    _weight_updater: WeightUpdaterBase | None = None

    @property
    def weight_sync_schemes(self) -> dict[str, WeightSyncScheme]:
        """``{model_id: scheme}`` moving each model's weights to the workers (defaults included)."""
        return dict(self._weight_sync_schemes or {})

    @property
    def weight_updater(self) -> WeightUpdaterBase | None:
        """The legacy updater called by ``update_policy_weights_`` instead of the schemes."""
        return self._weight_updater

    @weight_updater.setter
    def weight_updater(self, value: Any) -> None:
        if value is not None:
            if isinstance(value, type):  # a class: built with its default constructor
                value = value()
            if not callable(value):
                raise TypeError(f"weight_updater must be callable (a WeightUpdaterBase), got "
                                f"{type(value).__name__}")
            register = getattr(value, "register_collector", None)
            if register is not None:
                register(self)
        self._weight_updater = value

    def init_updater(self, *args: Any, **kwargs: Any) -> None:
        """Pass ``args`` and ``kwargs`` to the legacy weight updater's ``init`` (no-op without one)."""
        init = getattr(self._weight_updater, "init", None)
        if init is not None:
            init(*args, **kwargs)

    def update_policy_weights_(
        self,
        policy_or_weights: Any = None,
        *,
        weights: Any = None,
        policy: Any = None,
        worker_ids: int | torch.device | Sequence[int | torch.device] | None = None,
        model_id: str | None = None,
        weights_dict: Mapping[str, Any] | None = None,
        policy_weights: Any = None,
    ) -> None:
        """Bring the collector's weights up to date and bump their version.

        Accepts the reference API's forms: no argument (pull from the policy given at
        construction), a module, a TensorDict or a dict of weights (positionally or as
        ``policy_or_weights=``, or as ``weights=`` / ``policy=``), ``model_id=`` for another model
        than ``"policy"``, ``weights_dict={model_id: weights, ...}`` for several models at once
        (atomically), and ``worker_ids=`` (ints, or devices: the workers whose policy runs there)
        to update only some workers. ``policy_weights=`` is the deprecated name of
        ``policy_or_weights``. The weights travel through :attr:`weight_sync_schemes`, or through
        the legacy ``weight_updater`` when one was given.

        Raises:
            ValueError: forms that exclude each other were combined, ``model_id`` or
                ``weights_dict`` with a legacy ``weight_updater``, or a worker id or device this
                collector does not have.
            KeyError: an unknown model id (the known ones are listed).
        """
        if policy_weights is not None:
            warnings.warn("update_policy_weights_(policy_weights=...) is deprecated: pass the weights "
                          "positionally or as policy_or_weights=", DeprecationWarning, stacklevel=2)
            if policy_or_weights is not None:
                raise ValueError("give the weights once: got policy_or_weights and policy_weights together")
            policy_or_weights = policy_weights
        forms = weight_update_forms(
            policy_or_weights, weights=weights, policy=policy, model_id=model_id,
            weights_dict=weights_dict,
        )
        if self._weight_updater is not None:
            if weights_dict is not None or model_id is not None:
                raise ValueError("model_id and weights_dict are not supported with the legacy "
                                 "weight_updater: use weight_sync_schemes for several models")
            self._weight_updater(policy_or_weights=forms["policy"], worker_ids=worker_ids)
            return
        self._update_weights(forms, self._worker_ids(worker_ids))

    num_workers: int = 1
    def _worker_ids(self, worker_ids: Any) -> list[int] | None:
        """``worker_ids`` as a sorted list of ints (devices: the workers whose policy runs there)."""
        if worker_ids is None:
            return None
        if isinstance(worker_ids, np.ndarray) and worker_ids.ndim <= 1 and worker_ids.dtype.kind in "iu":
            worker_ids = worker_ids.tolist()
        items = list(worker_ids) if isinstance(worker_ids, (list, tuple, range)) else [worker_ids]
        options = getattr(self, "options", None)
        policy_device = options.policy_device if options is not None else None
        ids: set[int] = set()
        for item in items:
            if isinstance(item, (torch.device, str)):
                try:
                    device = torch.device(item)
                except (RuntimeError, ValueError):
                    raise ValueError(f"worker_ids={worker_ids!r}: {item!r} is neither a worker index nor a "
                                     "device") from None
                if device != torch.device(policy_device or "cpu"):
                    raise ValueError(f"worker_ids={item!r}: the workers' policy runs on "
                                     f"{policy_device or 'cpu'}, not {device}")
                ids.update(range(self.num_workers))
            elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                if not 0 <= item < self.num_workers:
                    raise ValueError(f"worker_ids={worker_ids!r}: worker {int(item)} is out of range for "
                                     f"num_workers={self.num_workers}")
                ids.add(int(item))
            else:
                raise TypeError(f"worker_ids must be ints or devices, got {item!r} ({type(item).__name__})")
        return sorted(ids)

    def _update_weights(self, forms: dict[str, Any], worker_ids: list[int] | None) -> None:
        """Apply ``{model_id: weights or None}`` to the given workers (all if ``None``).

        rlcollect's collectors send the weights to their workers; this default (for a subclass
        that implements only the reference's abstract methods) copies the ``"policy"`` weights into
        the module it holds as ``self.policy``.

        Raises:
            NotImplementedError: another model id, or no ``self.policy`` module to update.
        """
        policy = self.__dict__.get("policy")
        for model_id, weights in forms.items():
            if model_id != "policy" or not isinstance(policy, torch.nn.Module):
                raise NotImplementedError(
                    f"{type(self).__name__} cannot take weights for {model_id!r}: override _update_weights, "
                    "or hold the policy module as self.policy")
            if weights is not None:
                apply_weights(policy, as_weights(weights))

    def _update_in_process(self, forms: dict[str, Any], user_policy: Any) -> None:
        """``_update_weights`` of a collector whose models run in this process: every scheme
        applies in place, except ``NoWeightSyncScheme`` (nothing changes); ``None`` for the policy
        pulls from ``user_policy``, the policy given at construction (nothing to copy when that is
        the module that runs)."""
        modules = {model_id: self._receiver_model(model_id) for model_id in forms}  # KeyError first
        schemes = self.weight_sync_schemes
        moving = {m: s for m, s in forms.items() if not isinstance(schemes.get(m), NoWeightSyncScheme)}
        if not moving:
            return
        if "policy" in moving and moving["policy"] is None:
            moving["policy"] = user_policy
        self._apply_received({m: None if s is None or s is modules[m] else schemes[m].prepare_weights(s)
                              for m, s in moving.items()})

    def _apply_in_process(self, forms: dict[str, Any]) -> None:
        """Copy ``{model_id: weights}`` into the modules (``None``: applied already)."""
        for model_id, source in forms.items():
            module = self._receiver_model(model_id)
            if source is not None and source is not module:
                apply_weights(module, as_weights(source), model_id)

    # -- weights: receiving ------------------------------------------------------------------
    _receiver_schemes: dict[str, WeightSyncScheme] | None = None

    def receive_weights(
        self, policy_or_weights: Any = None, *, weights: Any = None, policy: Any = None
    ) -> None:
        """Apply weights received from upstream to what this collector runs.

        With no argument, take the newest weights of every receiver scheme registered with
        :meth:`register_scheme_receiver` (a collector polls them itself before each batch).
        With weights (a module, a TensorDict or a dict; positionally, ``weights=`` or
        ``policy=``), apply them to the policy.

        Raises:
            ValueError: two forms together, or weights given while receiver schemes are
                registered (the schemes know where the weights come from).
        """
        source = weight_update_forms(policy_or_weights, weights=weights, policy=policy)["policy"]
        if self._receiver_schemes:
            if source is not None:
                raise ValueError("receive_weights() takes no weights when receiver schemes are registered: "
                                 "they know where the weights come from")
            self._receive_weights_scheme()
        elif source is not None:
            self._apply_received({"policy": source})

    def register_scheme_receiver(
        self, weight_recv_schemes: Mapping[str, WeightSyncScheme], *, synchronize_weights: bool = True
    ) -> None:
        """Receive weights through ``weight_recv_schemes`` ``{model_id: scheme}`` from a sender
        elsewhere (a learner process, a parent collector); each batch then starts with the newest
        weights received, forwarded to this collector's own workers.

        Raises:
            TypeError: not a dict of ``{model_id: WeightSyncScheme}``.
            KeyError: a model id this collector does not have (the known ones are listed).
            RuntimeError: a scheme already initialised on the sender side, or as the receiver of
                another collector or model (each receiver feeds one model of one collector).
        """
        if not isinstance(weight_recv_schemes, Mapping):
            raise TypeError(f"register_scheme_receiver takes a dict {{model_id: WeightSyncScheme}} (e.g. "
                            f"{{'policy': scheme}}), got {type(weight_recv_schemes).__name__}")
        for model_id, scheme in weight_recv_schemes.items():
            if not isinstance(scheme, WeightSyncScheme):
                raise TypeError(f"weight_recv_schemes[{model_id!r}] must be a WeightSyncScheme, got "
                                f"{type(scheme).__name__} {scheme!r:.80}")
        check_model_ids(weight_recv_schemes, self._model_ids())
        receivers = dict(self._receiver_schemes or {})
        for model_id, scheme in weight_recv_schemes.items():
            if not scheme.initialized_on_receiver:
                scheme.init_on_receiver(model_id=model_id, context=self, worker_idx=self._worker_idx)
            elif scheme.model_id != model_id or scheme.context not in (None, self):
                raise RuntimeError(
                    f"this {type(scheme).__name__} already feeds model {scheme.model_id!r} of another "
                    "collector: a receiver scheme serves one model of one collector (ask the sender for "
                    "one receiver per collector: sender.receiver(worker_idx))")
            receivers[model_id] = scheme
        self._receiver_schemes = receivers
        if synchronize_weights:
            synchronized: dict[str, Any] = {}
            for model_id, scheme in weight_recv_schemes.items():
                if not scheme.synchronized_on_receiver and scheme.connect(worker_idx=self._worker_idx):
                    synchronized[model_id] = None
            if synchronized:  # the sender's weights, applied to this collector's model: to the workers
                self._apply_received(synchronized)

    def _shutdown_receivers(self) -> None:
        """Stop the receiver schemes registered here (threads, process groups); every shutdown
        does this."""
        receivers, self._receiver_schemes = self._receiver_schemes or {}, None
        for scheme in receivers.values():
            scheme.shutdown()

    def _receive_weights_scheme(self) -> None:
        """Take the newest weights of every receiver scheme; forward those that changed."""
        received: dict[str, Any] = {}
        for model_id, scheme in (self._receiver_schemes or {}).items():
            if scheme.receive() is not None:
                received[model_id] = None  # applied to the receiver model: pull from it
        if received:
            self._apply_received(received)

    def _apply_received(self, forms: dict[str, Any]) -> None:
        """Weights that arrived from upstream: by default, an update of every worker."""
        self._update_weights(forms, None)

    def _model_ids(self) -> list[str]:
        return ["policy"]

    def _receiver_model(self, model_id: str) -> torch.nn.Module:
        """The module a receiver scheme applies ``model_id``'s weights to."""
        raise NotImplementedError

    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled batch shaped as this collector's batches: single-process collectors only."""
        raise NotImplementedError(f"{type(self).__name__} has no fake_tensordict: a batch's shape depends "
                                  "on which workers' frames it holds; Collector has one")

    @property
    def traj_format(self) -> str | None:
        """How ``trajs_per_batch`` batches hold their episodes: ``"padded"`` or ``"cat"``."""
        return None if self._delivery is None else self._delivery.traj_format

    # -- hooks (TorchRL's attributes) --------------------------------------------------------
    options: Any = None
    _delivery: Any = None

    @property
    def pre_collect_hook(self) -> Callable[[], None] | None:
        """Called before each batch, where the batch is collected (in each worker, with workers).

        Settable; a collector with workers takes a new one before its first batch only (the workers
        get theirs when they start).

        Examples:
            >>> from rlcollect import Collector
            >>> calls = []
            >>> with Collector("CartPole-v1", frames_per_batch=4) as collector:
            ...     collector.pre_collect_hook = lambda: calls.append(1)
            ...     _ = collector.next()
            >>> calls
            [1]
        """
        return None if self.options is None else self.options.pre_collect_hook

    @pre_collect_hook.setter
    def pre_collect_hook(self, hook: Callable[[], None] | None) -> None:
        _check_hook("pre_collect_hook", hook)
        self._set_pre_collect_hook(hook)
        self.options = dataclasses.replace(self.options, pre_collect_hook=hook)

    @property
    def post_collect_hook(self) -> Callable[[TensorDictBase], None] | None:
        """Called with each batch before it is yielded (or written): in this process, or in each
        worker on its own batch for the multi-process collectors (as TorchRL's); settable (with
        workers, before the first batch)."""
        return None if self.options is None else self.options.post_collect_hook

    @post_collect_hook.setter
    def post_collect_hook(self, hook: Callable[[TensorDictBase], None] | None) -> None:
        _check_hook("post_collect_hook", hook)
        self._set_post_collect_hook(hook)
        self.options = dataclasses.replace(self.options, post_collect_hook=hook)

    def _set_post_collect_hook(self, hook: Callable[[TensorDictBase], None] | None) -> None:
        """Hand a new ``post_collect_hook`` to where it runs (by default: this process's delivery)."""
        self._delivery.post_collect_hook = hook

    def _set_pre_collect_hook(self, hook: Callable[[], None] | None) -> None:
        """Hand a new ``pre_collect_hook`` to what collects (a subclass's rollout or workers)."""
        raise NotImplementedError

    # -- nesting -----------------------------------------------------------------------------
    _worker_idx: int | None = None

    @property
    def worker_idx(self) -> int:
        """This collector's index among the workers of an outer collector.

        Raises:
            RuntimeError: it is not a worker of another collector.
        """
        if self._worker_idx is None:
            raise RuntimeError("worker_idx has not been set: this collector is not a worker of another "
                               "collector")
        return self._worker_idx

    @worker_idx.setter
    def worker_idx(self, value: int | None) -> None:
        self._worker_idx = value

    def cascade_execute(self, attr_path: str, *args: Any, **kwargs: Any) -> Any:
        """Call (or read) the attribute at ``attr_path`` of this collector, e.g.
        ``"_receiver_schemes['policy'].receive"`` or ``"weight_sync_schemes['policy'].strategy"``.

        Raises:
            AttributeError, KeyError, IndexError: the path does not resolve.
            ValueError: arguments given for an attribute that is not callable.
        """
        return call_path(self, attr_path, args, kwargs)

    def get_distant_attr(self, attr: str) -> Any:
        """The attribute at the path ``attr`` (as :meth:`cascade_execute` reads it); a collector
        with workers returns each worker's, in worker order (TorchRL's remote helper).

        Examples:
            >>> from rlcollect import Collector
            >>> with Collector("CartPole-v1", frames_per_batch=8) as collector:
            ...     collector.get_distant_attr("frames_per_batch")
            8
        """
        return resolve_path(self, attr)

    def map_fn(self, method_name: str, list_of_args: Sequence[tuple[Any, ...]] | None = None,
               list_of_kwargs: Sequence[Mapping[str, Any]] | None = None) -> list[Any]:
        """Call the method at the path ``method_name`` once per entry of ``list_of_args`` and
        ``list_of_kwargs`` (one call without arguments if neither is given); return the results. A
        collector with workers calls it in each worker, one entry per worker (TorchRL's remote helper).

        Raises:
            ValueError: the two lists differ in length.
            AttributeError: the attribute is not callable.
        """
        if list_of_args is None:
            list_of_args = [()] * len(list_of_kwargs) if list_of_kwargs else [()]
        if list_of_kwargs is None:
            list_of_kwargs = [{}] * len(list_of_args)
        if len(list_of_args) != len(list_of_kwargs):
            raise ValueError(f"list_of_args and list_of_kwargs must have the same length, got "
                             f"{len(list_of_args)} and {len(list_of_kwargs)}")
        method = resolve_path(self, method_name)
        if not callable(method):
            raise AttributeError(f"{method_name} is not callable: map_fn calls a method "
                                 "(get_distant_attr reads an attribute)")
        return [method(*args, **kwargs) for args, kwargs in zip(list_of_args, list_of_kwargs, strict=True)]

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

    def __repr__(self) -> str:
        total = "endless" if self.total_frames < 0 else self.total_frames
        return f"{type(self).__name__}(frames_per_batch={self.frames_per_batch}, total_frames={total})"


class _Background:
    """A thread running a collector's iterator, which can be held between batches and stopped."""

    def __init__(self, batches: Iterator[TensorDictBase | None], quiesce: Callable[[], None],
                 on_error: Callable[[], None] = lambda: None) -> None:
        self._batches, self._quiesce, self._on_error = batches, quiesce, on_error
        self._stop, self._hold = threading.Event(), threading.Event()
        self._held, self._released = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rlcollect-background", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for _ in self._batches:
                if self._stop.is_set():
                    break
                while self._hold.is_set() and not self._stop.is_set():  # paused again at once: still held
                    self._quiesce()
                    self._held.set()
                    while not (self._released.wait(0.05) or self._stop.is_set()):
                        pass
                    self._released.clear()
        except BaseException as error:  # kept for the caller: raised after the shutdown
            if not self._stop.is_set():  # errors caused by the shutdown itself are not news
                self.error = error
                with contextlib.suppress(BaseException):
                    self._on_error()
        finally:
            self._held.set()

    def hold(self, timeout: float) -> bool:
        """Pause between batches; ``False`` if collection stopped on an error instead."""
        self._hold.set()
        if not self._held.wait(timeout):
            self._hold.clear()
            raise TimeoutError(f"background collection did not pause within {timeout} s")
        return self.error is None

    def release(self) -> None:
        """End a :meth:`hold`. ``held`` is cleared here, not by the thread: a ``hold`` right after
        this one must wait for the thread to stop again, not find the previous pause's flag."""
        self._held.clear()
        self._hold.clear()
        self._released.set()

    def stop(self, deadline: float, interrupt: Callable[[], None] | None = None) -> BaseException | None:
        """Stop the thread (see :meth:`BaseCollector._stop_background`); return its error."""
        self._stop.set()
        self._released.set()
        self._thread.join(max(0.0, (deadline - time.monotonic()) / 2))
        if self._thread.is_alive() and interrupt is not None:
            interrupt()
            self._thread.join(min(max(0.0, deadline - time.monotonic()), 0.5) or 0.2)
        return self.error


def _check_hook(name: str, hook: Any) -> None:
    if hook is not None and not callable(hook):
        raise TypeError(f"{name} must be callable or None, got {type(hook).__name__} {hook!r:.80}")
