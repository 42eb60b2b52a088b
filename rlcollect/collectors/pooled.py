"""What every collector with workers shares: MultiSync, MultiAsync and Ray are this class.

The parent builds one :class:`Rollout` locally first (the probe) to learn the batch layout and the
envs per worker and to check the policy on a dry step, closes it, derives ``T`` once, allocates
the slots (shared memory for worker processes, local memory for Ray actors, whose batches arrive
in their reports) and starts the workers through a :class:`WorkerPool`. Where only a
``policy_factory`` builds the policy, worker 0's process builds the probe instead (the factory
runs in the workers alone) and keeps it as its rollout, the other worker processes start
meanwhile, and each gets its setup when the pool starts.
It holds its parts: slots and a schedule, synchronous or asynchronous, chosen here once (``pool_batches``),
what each worker is given (``pool_setups``), the requests to the workers (``pool_requests``).

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

import math
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import cloudpickle
import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.collectors.base import BaseCollector
from rlcollect.collectors.options import CollectorOptions
from rlcollect.collectors.pool_batches import AsyncSchedule, Hooks, Schedule, SyncSchedule
from rlcollect.collectors.pool_requests import WorkerRequests
from rlcollect.collectors.pool_setups import WorkerSetups
from rlcollect.collectors.probe import probe_in_worker, probe_rollout, worker_builds_probe
from rlcollect.collectors.slots import Slots, allocate_slots
from rlcollect.collectors.stats import CollectorStats
from rlcollect.collectors.stream import between_batches
from rlcollect.common.owner import weakly
from rlcollect.common.resources import check_descriptors
from rlcollect.common.state import state_kind
from rlcollect.data.layout import BatchLayout
from rlcollect.rollout.engine import RolloutSpec
from rlcollect.rollout.summary import EngineSummary
from rlcollect.weights.forms import check_model_ids
from rlcollect.weights.schemes import NoWeightSyncScheme, WeightChannel
from rlcollect.weights.senders import channel_for, init_senders
from rlcollect.weights.watch import UnsentEdits
from rlcollect.workers.pool import WorkerPool
from rlcollect.workers.transport import Transport
from rlcollect.workers.worker import WorkerSetup

__all__ = ["PooledCollector"]


class PooledCollector(BaseCollector):
    """Base of the collectors with workers; subclasses call :meth:`_build` from ``__init__``."""

    options: CollectorOptions
    sync: bool  # a batch is all workers' rows of a slot (sync) or one worker's rows (async)
    _schedule_kind: type[Schedule]  # SyncSchedule or AsyncSchedule, chosen once from options.sync
    _weights: WeightChannel
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
        self.options, self.sync, self.compiled_policy = options, options.sync, bool(options.compile_policy)
        self._schedule_kind = kind = SyncSchedule if options.sync else AsyncSchedule  # chosen once
        kind.check(options)
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
        self.num_envs_per_worker = envs = per_process * options.nested_workers
        self.num_envs = envs * workers
        rows = kind.batch_workers(workers) * envs
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
        workers, kind = self.num_workers, self._schedule_kind
        _, outers, traj_start = options.placement  # this collector inside a worker: its ids and seeds
        self._slots: Slots = allocate_slots(kind.slot_count(options), probe.layout, workers,
                                            self.num_envs_per_worker, steps, shared=transport.shared_slots,
                                            masked=options.preemptive_threshold is not None)
        sink = options.replay_buffer
        workers_write = sink is not None and transport.can_write(sink) and self._slots.writable
        self._delivery = options.delivery(workers_write=workers_write)
        self._delivery.unbatched = probe.unbatched
        if self._hooks_in_workers:
            self._delivery.post_collect_hook = None  # each worker runs it (see _worker_spec)
        self._delivery.workers = kind.batch_workers(workers)
        self._delivery.whole = self._slots.stacked  # whole TensorDict batches: stacked (WholeSlots.batch)
        written_elsewhere = self._delivery.written_elsewhere
        check_descriptors(3 * workers + 3, f"{workers} worker processes", "num_workers")  # pipes, sentinels
        if written_elsewhere and hasattr(options.replay_buffer, "init"):
            options.replay_buffer.init(self._slots.batch(0, workers)[:1])  # laid out before the workers write
        self._init_weights(options, transport)
        self._unsent = UnsentEdits(options.policy)  # the policy you hold, which the copies do not follow
        self._setups = WorkerSetups(options, self._slots, self._weights, {
            "num_workers": outers * workers, "traj_start": traj_start, "num_steps": steps,
            "seed": options.seed, "stop_flags": self._slots.stop_flags,
            "replay_buffer": options.replay_buffer if written_elsewhere else None,
            "init_fn": None if options.worker_init_fn is None else cloudpickle.dumps(options.worker_init_fn)},
            num_workers=workers, shared=transport.shared_slots,
            hooks=self._delivery if self._hooks_in_workers else None, finish=weakly(self._worker_spec))
        # the pool (which the finalizer keeps) must not keep this collector alive: a weak setup
        self._pool = WorkerPool(transport, weakly(self._worker_setup), workers, timeout=options.timeout,
                                start_timeout=options.start_timeout,
                                max_restarts=options.max_worker_restarts, traj_start=traj_start,
                                restart_seed_stride=self.num_envs * outers, awaiting=awaiting)
        self._finalizer: weakref.finalize[..., Any] = weakref.finalize(self, self._pool.shutdown)
        self._startup_seconds = math.nan
        self._schedule: Schedule = kind(
            self._pool, self._slots, options, self._delivery, self._weights, self._unsent, self._hooks(),
            steps=steps, total_frames=self.total_frames,
            infos=self._slots.infos or ())
        self._requests = WorkerRequests(self._schedule, weakly(self._ensure_started),
                                        state_kind=state_kind(type(self)), state_keys=self._state_keys)

    def _hooks(self) -> Hooks:
        """What the schedule asks of this collector (through weak references: the parts never keep
        the collector alive, so that dropping it stops its workers)."""
        return Hooks(weakly(self._receive), weakly(self._in_warmup), weakly(self._update_worker))

    def _receive(self) -> None:
        self._weight_part.poll()

    def _update_worker(self, worker: int) -> None:
        self.update_policy_weights_(worker_ids=[worker])

    def _init_weights(self, options: CollectorOptions, transport: Transport) -> None:
        """The schemes' senders and the channel carrying the weights to the workers."""
        schemes = options.weight_sync_schemes
        self._weight_part.senders = init_senders(schemes, self._models, transport.kind, self)
        self._weights = channel_for(self._weight_part.senders, self._models, self.num_workers)
        self.weight_updater = options.weight_updater

    # -- workers ----------------------------------------------------------------------------------
    def _worker_setup(self, worker: int) -> WorkerSetup:
        """Worker ``worker``'s setup (at its start, and at a restart)."""
        return self._setups.setup(worker)

    def _worker_spec(self, worker: int) -> RolloutSpec:
        """What worker ``worker`` builds its rollout from."""
        return self._setups.rollout_spec(worker, self.options)

    def start(self) -> None:
        """As :meth:`BaseCollector.start`; with ``start_method="auto"``, the workers then start (and
        restart) through a forkserver (this process runs a thread), which is started first."""
        self._pool.transport.prepare_threaded_starts()
        super().start()

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
        self._setups.forget()  # the workers' specs are made from the options again

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
                self._setups.forget()  # a restart pickles its spec again
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
        return self._schedule.episode_records.drain()

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

    # -- the parts' answers -------------------------------------------------------------------
    def iterator(self) -> Iterator[TensorDictBase | None]:
        self._ensure_started()
        return self._schedule.iterator()

    def call_workers(self, path: str, args: Sequence[Sequence[Any]] | None = None,
                     kwargs: Sequence[Mapping[str, Any]] | None = None) -> list[Any]:
        return self._requests.call_workers(path, args, kwargs)

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Env ``i`` of worker ``w`` is reset now with ``seed + w * num_envs_per_worker + i``.
        Every batch handed out after it is collected after it: an asynchronous worker's batch
        collected ahead (while the last one was used) and not handed out yet is dropped, not
        counted, and collected again from the reseeded envs (as TorchRL's asynchronous collectors
        do), so that the batches after ``set_seed(s)`` are those of a collector seeded ``s``.

        Returns:
            ``seed`` plus the number of envs of all workers.
        """
        self._requests.set_seed(seed)
        return seed + self.num_envs

    def reset(self, reset_idx: Sequence[bool] | None = None) -> None:
        """Reset the envs of every worker now (unseeded), or of the workers ``reset_idx`` marks
        (one flag per worker): their next batches start new trajectories. A batch a worker
        collected before is still yielded first (asynchronous collectors); trajectories held for
        ``trajs_per_batch`` are dropped.

        Raises:
            ValueError: ``reset_idx`` does not hold one True/False flag per worker.
        """
        self._requests.reset(reset_idx)

    @property
    def policy(self) -> Any:
        """The policy given (the workers run copies of it; ``None`` with only a ``policy_factory``)."""
        return self.options.policy

    def state_dict(self) -> dict[str, Any]:
        """Every worker's state after its batch in flight, those batches, and the counters.

        A collector loaded with it yields the batches that were in flight first, then continues:
        the same frames as the uninterrupted run. From another thread, it is taken once the batch
        under way is handed out.
        """
        with between_batches(self._busy, self.options.timeout, "state_dict()"):
            return self._requests.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore every worker, the batches in flight and the counters from :meth:`state_dict`.

        Raises:
            TypeError, ValueError: not this collector class's state, or one of another number of
                workers (each named); nothing is changed then.
        """
        self._requests.load_state_dict(state_dict)

    def stats(self) -> CollectorStats:
        return self._requests.stats(self._startup_seconds)

    # -- what another collector built from these options reads ------------------------------------
    @property
    def batch_layout(self) -> BatchLayout | None:
        """The layout of the slots the workers fill (``None``: a TorchRL env's data, which each
        worker sends back whole)."""
        return self._slots.layout

    @property
    def weight_sources(self) -> dict[str, torch.nn.Module]:
        """The modules, by model id, that ``update_policy_weights_()`` reads the weights from."""
        return self._models

    @property
    def next_trajectory_id(self) -> int:
        """The first local trajectory id no worker used yet (where a restart starts)."""
        return max(self._pool.next_traj_id)

    # -- weights ----------------------------------------------------------------------------------
    def _update_weights(self, forms: dict[str, Any], worker_ids: list[int] | None) -> None:
        schemes = self._weight_part.senders or {}
        check_model_ids(forms, schemes)
        ids = list(range(self.num_workers)) if worker_ids is None else worker_ids
        weights = {}
        for model_id, source in forms.items():
            if not isinstance(schemes[model_id], NoWeightSyncScheme):
                weights[model_id] = schemes[model_id].prepare_weights(source)  # None: this process's module
        if weights:
            self._weights.push(weights, ids)
        self._weights_sent()

    def _weights_sent(self) -> None:
        self._unsent.sent()

    def _model_ids(self) -> list[str]:
        return list(self._models)

    def receiver_model(self, model_id: str) -> torch.nn.Module:
        return self._models[model_id]
