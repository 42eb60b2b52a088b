"""What every collector with workers shares: MultiSync, MultiAsync and Ray are this class.

The parent builds one :class:`Rollout` locally first (the probe) to learn the batch layout and the
envs per worker and to check the policy on a dry step, closes it, derives ``T`` once, allocates
the slots (shared memory for worker processes, local memory for Ray actors, whose batches arrive
in their reports) and starts the workers through a :class:`WorkerPool`. Where only a
``policy_factory`` builds the policy, worker 0's process builds the probe instead (the factory
runs in the workers alone) and keeps it as its rollout, the other worker processes start
meanwhile, and each gets its setup when the pool starts.
The batches themselves: :mod:`rlcollect.collectors.pool_batches`.

Examples:
    >>> from rlcollect import MultiSyncCollector
    >>> with MultiSyncCollector("CartPole-v1", num_workers=2, frames_per_batch=8, total_frames=16,
    ...                         seed=0) as collector:
    ...     state = collector.state_dict()  # taken between batches: every in-flight batch is in it
    ...     first = collector.next()
    >>> with MultiSyncCollector("CartPole-v1", num_workers=2, frames_per_batch=8, total_frames=16,
    ...                         seed=0) as resumed:
    ...     resumed.load_state_dict(state)
    ...     again = resumed.next()
    >>> bool((first == again).all())
    True
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.collectors.base import BaseCollector
from rlcollect.collectors.delivery import WorkerHook
from rlcollect.collectors.options import CollectorOptions
from rlcollect.collectors.pool_batches import WorkerBatches
from rlcollect.collectors.pool_requests import WorkerRequests
from rlcollect.collectors.probe import preload_modules, probe_in_worker, probe_rollout, worker_builds_probe
from rlcollect.common.resources import check_descriptors
from rlcollect.data.buffers import BatchBuffers
from rlcollect.rollout.engine import RolloutSpec
from rlcollect.rollout.episodes import EpisodeRecords
from rlcollect.rollout.summary import EngineSummary
from rlcollect.weights.senders import channel_for, init_senders
from rlcollect.weights.watch import UnsentEdits
from rlcollect.workers.pool import WorkerPool
from rlcollect.workers.transport import ProcessTransport, Transport, start_forkserver
from rlcollect.workers.worker import BatchReport, WorkerSetup

__all__ = ["PooledCollector"]


class PooledCollector(WorkerBatches, WorkerRequests, BaseCollector):
    """Base of the collectors with workers; subclasses call :meth:`_build` from ``__init__``."""

    sync: bool  # a batch is all workers' rows of a slot (sync) or one worker's rows (async)
    _policy_in_workers = True  # False: the policy runs in this process (a policy server)
    #: What this collector's state holds (checked by load_state_dict before anything changes).
    _state_keys: tuple[str, ...] = ("frames", "batches", "weights", "next_traj_id", "pending", "workers")
    _hooks_in_workers = False  # True: post_collect_hook runs in each worker on its batch (TorchRL's)
    _worker_probes = False  # True: worker 0 builds the probe where only policy_factory builds the policy

    def _build(self, options: CollectorOptions, make_transport: Callable[[], Transport]) -> None:
        """Everything is checked, and the probe built, before ``make_transport`` starts anything
        (``options.sync``: synchronous or asynchronous batches); where worker 0 builds the probe
        (:func:`~rlcollect.collectors.probe.worker_builds_probe`), the transport starts it first
        (and is closed if the probe fails)."""
        self.options, self.sync = options, sync = options, options.sync
        if not sync and options.preemptive_threshold is not None:
            raise ValueError("preemptive_threshold applies to synchronous collection only")
        if not sync and options.prefetch:
            raise ValueError("prefetch=True applies to synchronous collection only: asynchronous "
                             "workers never wait anyway")
        options.unpicklable(with_policy=self._policy_in_workers)
        self.requested_frames_per_batch = options.frames_per_batch
        self.total_frames, self.init_random_frames = options.total_frames, options.init_random_frames
        self.replay_buffer = options.replay_buffer
        self.num_workers = workers = options.num_workers

        self._constructed_at = time.time()
        owner, transport = type(self).__name__, None
        awaiting: list[int] = []  # workers the probe started, waiting for their setups
        if self._worker_probes and worker_builds_probe(options):  # the other workers start meanwhile
            transport = make_transport()
            probe, per_process, awaiting = probe_in_worker(options, transport, owner=owner)
        else:
            probe, per_process = probe_rollout(options, policy_in_workers=self._policy_in_workers,
                                               owner=owner)
        # a TorchRL env whose data the buffers cannot hold: each worker sends its batches back whole
        self._tensordict = probe.layout is None
        self.num_envs_per_worker = envs = per_process * options.nested_workers
        self.num_envs = envs * workers
        rows = self.num_envs if sync else envs
        steps = options.steps_per_batch(rows)
        self.frames_per_batch = steps * rows
        self._models = dict(probe.models)  # the modules weights are pulled from on update()
        transport = make_transport() if transport is None else transport
        try:
            self._allocate(options, transport, probe, steps, awaiting=awaiting)
        except BaseException:
            for worker in awaiting:
                transport.stop(worker, 0.0)
            transport.close()
            raise

    def _allocate(self, options: CollectorOptions, transport: Transport, probe: EngineSummary,
                  steps: int, awaiting: list[int]) -> None:
        """Slots, weights, the workers' setups and the pool (started at the first batch; the
        workers in ``awaiting`` run already, built by the probe, and wait for their setups)."""
        workers, sync = self.num_workers, self.sync
        _, outers, traj_start = options.placement  # this collector inside a worker: its ids and seeds
        sink = options.replay_buffer
        workers_write = sink is not None and transport.can_write(sink) and not self._tensordict
        self._delivery = options.delivery(workers_write=workers_write)
        self._delivery.unbatched = probe.unbatched
        if self._hooks_in_workers:
            self._delivery.post_collect_hook = None  # each worker runs it (see _worker_spec)
        self._delivery.workers = workers if sync else 1
        self._delivery.whole = self._tensordict  # whole TensorDict batches: stacked here (_slot_batch)
        written_elsewhere = self._delivery.written_elsewhere
        self._num_slots = num_slots = 2 if (options.prefetch or not sync) else 1
        self._num_steps = steps
        masked = options.preemptive_threshold is not None
        shared = transport.shared_slots
        layout = probe.layout
        self._slots: list[BatchBuffers] = [] if layout is None else BatchBuffers.allocate_slots(
            num_slots, layout, self.num_envs, steps, shared=shared, masked=masked)
        check_descriptors(3 * workers + 3, f"{workers} worker processes", "num_workers")  # pipes, sentinels
        self._whole: dict[tuple[int, int], TensorDictBase] = {}  # (slot, worker): a worker's whole batch
        self._stop_flags = (torch.zeros(num_slots, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
                            if masked else None)
        if written_elsewhere and hasattr(options.replay_buffer, "init"):
            options.replay_buffer.init(self._slots[0].batch[:1])  # laid out before the workers get it
        self._init_weights(options, transport)
        self._unsent = UnsentEdits(options.policy)  # the policy you hold, which the copies do not follow
        self._setup_arguments: dict[str, Any] = {
            "num_workers": outers * workers, "traj_start": traj_start, "num_steps": steps,
            "seed": options.seed, "stop_flags": self._stop_flags,
            "replay_buffer": options.replay_buffer if written_elsewhere else None,
            "init_fn": None if options.worker_init_fn is None else cloudpickle.dumps(options.worker_init_fn)}
        self._specs: dict[int, bytes] = {}  # pickled rollout specs, kept while the workers start
        # the pool (which the finalizer keeps) must not keep this collector alive: a weak setup
        self._pool = WorkerPool(transport, _weakly(self._worker_setup), workers, timeout=options.timeout,
                                start_timeout=options.start_timeout,
                                max_restarts=options.max_worker_restarts, traj_start=traj_start,
                                restart_seed_stride=self.num_envs * outers, awaiting=awaiting)
        self._finalizer: weakref.finalize[..., Any] = weakref.finalize(self, self._pool.shutdown)
        self._frames = self._batches = self._last_lag = 0
        self._startup_seconds = math.nan
        self._reports: list[BatchReport | None] = [None] * workers
        self._redo: dict[int, int] = {}
        self._returns: deque[float] = deque(maxlen=100)
        self._lengths: deque[int] = deque(maxlen=100)
        self._episode_records = EpisodeRecords(infos=layout.infos if layout else ())  # until episodes()

    def _init_weights(self, options: CollectorOptions, transport: Transport) -> None:
        """The schemes' senders and the channel carrying the weights to the workers."""
        schemes = options.weight_sync_schemes
        self._weight_sync_schemes = init_senders(schemes, self._models, transport.kind, self)
        self._weights = channel_for(self._weight_sync_schemes, self._models, self.num_workers)
        self.weight_updater = options.weight_updater

    # -- workers ----------------------------------------------------------------------------------
    def _worker_setup(self, worker: int) -> WorkerSetup:
        """Worker ``worker``'s setup with the current weights (at its start, and at a restart)."""
        options, envs = self.options, self.num_envs_per_worker
        outer = options.placement[0]
        rows = slice(worker * envs, (worker + 1) * envs)
        shared = self._pool.transport.shared_slots and not self._tensordict
        return WorkerSetup(
            worker_idx=outer * self.num_workers + worker, spec=self._spec(worker),
            env_offset=(outer * self.num_workers + worker) * envs, weights=self._weights.receiver(worker),
            slots=tuple(s.storage[rows] for s in self._slots) if shared else None,
            own_weights=isinstance(options.policy_factory, tuple), **self._setup_arguments,
        )

    def _spec(self, worker: int) -> bytes:
        """Worker ``worker``'s rollout spec, pickled (the policy with it): once for all the workers
        whose env source is the same while they start, again for a restart."""
        options = self.options
        same = (options.create_env_fn[worker] is options.create_env_fn[0]
                and options.create_env_kwargs[worker] == options.create_env_kwargs[0]
                and options.worker_policy_factory(worker) is options.worker_policy_factory(0))
        key = 0 if same else worker
        if key not in self._specs:
            self._specs[key] = cloudpickle.dumps(self._worker_spec(key))
        return self._specs[key]

    def _worker_spec(self, worker: int) -> RolloutSpec:
        """What worker ``worker`` builds its rollout from (its policy from ``policy_factory`` if
        given, even with ``policy``: that one stays here as the source of the weights)."""
        spec = dataclasses.replace(self.options.rollout_spec(worker),  # info_keys: laid out as the slots
                                   info_fields=self._slots[0].layout.infos if self._slots else None)
        hook = self.options.post_collect_hook
        if self._hooks_in_workers and hook is not None:  # one worker's rows, in the collector's layout
            rows = dataclasses.replace(self._delivery, workers=1, replay_buffer=None, postproc=None,
                                       storing_device=None, post_collect_hook=None)
            spec = dataclasses.replace(spec, post_collect_hook=WorkerHook(hook, rows))
        return spec if spec.policy_factory is None else dataclasses.replace(spec, policy=None)

    def start(self) -> None:
        """As :meth:`BaseCollector.start`; with ``start_method="auto"``, the workers then start (and
        restart) through a forkserver (this process runs a thread), which is started first."""
        self._warm_forkserver()
        super().start()

    def _warm_forkserver(self) -> None:
        """Start the forkserver now, in the background, where workers will start or restart while
        this process runs threads: a restart then does not wait for its imports (seconds)."""
        options = self.options
        if (options.start_method == "auto" and isinstance(self._pool.transport, ProcessTransport)
                and "forkserver" in multiprocessing.get_all_start_methods()):
            start_forkserver(preload_modules(options))

    def _set_pre_collect_hook(self, hook: Callable[[], None] | None) -> None:
        self._hook_for_workers("pre_collect_hook", hook)

    def _set_post_collect_hook(self, hook: Callable[[TensorDictBase], None] | None) -> None:
        if self._hooks_in_workers:
            self._hook_for_workers("post_collect_hook", hook)
        else:
            super()._set_post_collect_hook(hook)

    def _hook_for_workers(self, name: str, hook: Callable[..., None] | None) -> None:
        """Check that a hook the workers run can still reach them, and be sent."""
        if self._pool.started:
            raise RuntimeError(f"{type(self).__name__}.{name} runs in the workers, which got theirs when "
                               f"they started: set it before the first batch, or pass {name}= at "
                               "construction")
        try:
            cloudpickle.dumps(hook)
        except Exception as error:
            raise TypeError(f"{name} ({hook!r:.80}) cannot be sent to a worker process: {error}. "
                            "Define it at module level") from None
        self._specs.clear()  # the workers' specs are made from the options again

    def _ensure_started(self) -> None:
        if self._pool.closed:
            raise self._closed_error()
        if not self._pool.started:
            try:
                self._pool.start(profile=self._profile_config)
            except BaseException:  # a worker that did not start: none of the others is left running
                self._pool.shutdown(0.0)
                raise
            finally:
                self._specs.clear()  # a restart pickles its spec again
            ready = [info.ready_at for info in self._pool.infos if info is not None]
            self._startup_seconds = max(ready) - self._constructed_at

    @property
    def preemptive_threshold(self) -> float | None:
        """The fraction of workers whose finished batch stops the others (``None``: never)."""
        return self.options.preemptive_threshold

    @property
    def worker_pids(self) -> list[int | None]:
        """Process ids of the workers (they start with the first batch, ``set_seed`` or a state)."""
        return [info.pid if info else None for info in self._pool.infos]

    def _drain_episodes(self) -> dict[str, np.ndarray]:
        return self._episode_records.drain()

    def _quiesce(self) -> None:
        self._pool.drain()  # batches under way finish (and are written); no new one is handed out

    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        """Stop background collection, then the workers, then raise the error background
        collection stopped on (if any, and ``raise_on_error``); idempotent.

        The whole takes at most ``timeout`` seconds (default: the collector's ``timeout``) and about
        a second more: a batch under way may finish (and be written) for half of it, workers then
        get what is left to exit by themselves, and those still running (a hung env) are
        terminated, then killed.
        """
        deadline = time.monotonic() + (self.options.timeout if timeout is None else timeout)
        error = None
        try:
            error = self._stop_background(deadline, self._pool.interrupt)
            self._stop_server(deadline)
        finally:
            self._finalizer.detach()
            self._pool.shutdown(max(0.0, deadline - time.monotonic()))
        if error is not None and raise_on_error:
            raise error

    def _stop_server(self, deadline: float) -> None:
        """Stop what serves the workers, before they are stopped (the policy server)."""
        return

    def _on_background_error(self) -> None:
        self._pool.close_soon()  # the workers exit after their batch under way


def _weakly(method: Callable[[int], WorkerSetup]) -> Callable[[int], WorkerSetup]:
    """``method`` (a bound method) called through a weak reference to its object."""
    ref = weakref.WeakMethod(method)

    def call(worker: int) -> WorkerSetup:
        bound = ref()
        if bound is None:
            raise RuntimeError("the collector is gone: no worker can be set up")
        return bound(worker)

    return call
