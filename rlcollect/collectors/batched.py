"""``AsyncBatchedCollector``: env workers, and one policy server batching their observations.

The workers are the multi-process collectors' workers with a :class:`ServedPolicy` in place of
their policy: they step their envs, and at each step the server in this process runs the policy
once for whichever workers are waiting, reading and writing their shared-memory slots in place
(see :mod:`rlcollect.workers.inference`). Delivery is asynchronous, as
:class:`~rlcollect.MultiAsyncCollector`'s: each batch is one worker's ``[M, T]`` rows.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from typing_extensions import Unpack  # typing has it from Python 3.11

from rlcollect.collectors.arguments import (
    EnvArguments,
    WorkerArguments,
    argument_names,
    check_accepted,
    named_as,
)
from rlcollect.collectors.checks import check_int
from rlcollect.collectors.options import CollectorOptions
from rlcollect.collectors.pool_batches import Hooks
from rlcollect.collectors.pooled import PooledCollector
from rlcollect.collectors.probe import worker_processes
from rlcollect.collectors.slots import BufferSlots
from rlcollect.collectors.stats import CollectorStats
from rlcollect.common.owner import weakly
from rlcollect.envs.factory import EnvSource
from rlcollect.policies.module_policy import ModulePolicy
from rlcollect.policies.tensordict_policy import TensorDictPolicy
from rlcollect.rollout.engine import Rollout, RolloutSpec, compile_adapter
from rlcollect.rollout.models import check_fits
from rlcollect.rollout.summary import EngineSummary
from rlcollect.weights.forms import check_model_ids
from rlcollect.weights.frozen import FrozenWeights
from rlcollect.weights.schemes import WeightSyncScheme
from rlcollect.weights.senders import init_senders
from rlcollect.workers.inference import PolicyServer, ServedPolicy
from rlcollect.workers.pool import WorkerPool
from rlcollect.workers.transport import Transport
from rlcollect.workers.worker import WorkerSetup

__all__ = ["AsyncBatchedCollector"]


class BatchedArguments(EnvArguments, WorkerArguments, total=False):
    """The keyword arguments of :class:`AsyncBatchedCollector` besides those it names."""


class AsyncBatchedCollector(PooledCollector):
    """Env workers step their envs; one policy server in this process acts for all of them.

    The server takes the observations of whichever env workers are waiting (up to
    ``max_batch_size`` envs), runs the policy once on them, and writes the actions back into the
    workers' shared-memory slots. There is one copy of the weights (updates wait for the forward
    pass under way), a fast env never waits for a slow one, and a large policy, or one on a GPU
    (``device="cuda"``), sees large batches. Each yielded batch is one env worker's
    ``[envs_per_worker, T]`` rows, as :class:`~rlcollect.MultiAsyncCollector`'s; every frame is
    stamped with the version of the weights that chose its action.

    Args:
        create_env_fn: one env source for every env (with ``num_envs``), or, as in TorchRL, a
            list with one source per env; the envs of one worker must share their source.
        policy: an ``nn.Module`` / callable from observations to actions, or a TensorDict policy.
            The server runs a copy of a module (never sent to a worker), so training the module
            never races a forward pass: ``update_policy_weights_()`` copies its weights in between
            two passes. ``policy_factory`` builds the policy instead.
        frames_per_batch: frames per yielded batch (one worker's; rounded up to a multiple of
            ``envs_per_worker``).
        total_frames: frames to collect before iteration stops, in whole batches (20 with
            8-frame batches: 3 batches, 24 frames, as in TorchRL); -1 for no end.
        num_envs: envs in all (default: the length of the ``create_env_fn`` list, else
            ``envs_per_worker``); a multiple of ``envs_per_worker``.
        envs_per_worker: envs ``M`` per env worker; there are ``num_envs / M`` worker processes.
        env_groups: groups ``G`` a worker steps its envs in (a divisor of ``envs_per_worker``;
            default 1). With 2, each worker steps half its envs while the server computes the other
            half's actions (Sample Factory's double-buffered sampling), so that neither waits for
            the other where stepping ``M / G`` envs takes about as long as a forward pass; the
            server then serves each group as a worker of its own (passes of ``M / G`` envs and
            more). The frames are those of ``env_groups=1``. Takes Gymnasium envs (an env id, or a
            function building one env), not a vector env or a pool.
        max_batch_size: most envs per forward pass (default: all); at least ``envs_per_worker /
            env_groups``.
        min_batch_size: envs to wait for before a forward pass, for at most ``server_timeout``
            seconds (default 1: serve whoever is waiting at once).
        server_timeout: see ``min_batch_size``.
        device: where the policy runs (a copy is made there once if it lives elsewhere).
        yield_completed_trajectories: yield one complete episode at a time (``[length]``) instead
            of fixed batches (``trajs_per_batch=1, traj_format="cat"``).
        weight_sync: the scheme of the policy's weights (same as ``weight_sync_schemes={"policy":
            weight_sync}``); the policy runs in this process, so every scheme but
            :class:`~rlcollect.weights.NoWeightSyncScheme` updates it in place.

        **arguments: the :class:`~rlcollect.collectors.arguments.EnvArguments` and
            :class:`~rlcollect.collectors.arguments.WorkerArguments` (``seed``, ``timeout``,
            ``replay_buffer``, ``check``, ...).

    A recurrent policy's state (a TensorDict policy reading ``is_init``, or state it writes and
    reads back) is kept by the server, per env, and stored in the batches as in every collector.

    Frames are reproducible for a deterministic policy: the batches then equal
    :class:`~rlcollect.MultiAsyncCollector`'s with the same seed. A policy that samples draws in the
    order the workers' requests arrive.

    Examples:
        >>> import torch
        >>> from rlcollect import AsyncBatchedCollector
        >>> policy = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Softmax(-1))
        >>> greedy = lambda obs: policy(obs).argmax(-1)
        >>> with AsyncBatchedCollector("CartPole-v1", greedy, num_envs=4, envs_per_worker=2,
        ...                            frames_per_batch=20, total_frames=80, seed=0) as collector:
        ...     shapes = {batch.shape for batch in collector}
        >>> shapes
        {torch.Size([2, 10])}
    """

    _policy_in_workers = False
    _state_keys = (*PooledCollector._state_keys, "server")

    #: The keyword arguments the constructor takes besides those it names.
    accepted_arguments: ClassVar[frozenset[str]] = argument_names(EnvArguments, WorkerArguments)

    def __init__(
        self,
        create_env_fn: EnvSource | Sequence[EnvSource],
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        num_envs: int | None = None,
        envs_per_worker: int = 1,
        env_groups: int = 1,
        max_batch_size: int | None = None,
        min_batch_size: int = 1,
        server_timeout: float = 0.01,
        device: Any = None,
        yield_completed_trajectories: bool = False,
        weight_sync: WeightSyncScheme | None = None,
        **arguments: Unpack[BatchedArguments],
    ) -> None:
        check_accepted(type(self), arguments)
        if policy is None and arguments.get("policy_factory") is None:
            raise TypeError("AsyncBatchedCollector serves a policy: give policy or policy_factory")
        if policy is not None and arguments.get("policy_factory") is not None:
            raise TypeError("AsyncBatchedCollector serves one policy, in this process: give policy or "
                            "policy_factory, not both")
        if isinstance(arguments.get("policy_factory"), (list, tuple)):
            raise TypeError("AsyncBatchedCollector serves one policy, in this process: give one "
                            "policy_factory, not one per worker (MultiSyncCollector and "
                            "MultiAsyncCollector take a list)")
        sources, num_workers = _group_envs(create_env_fn, num_envs, envs_per_worker)
        if weight_sync is not None:
            if arguments.get("weight_sync_schemes") is not None:
                raise ValueError("give weight_sync or weight_sync_schemes, not both")
            arguments["weight_sync_schemes"] = {"policy": weight_sync}
        if yield_completed_trajectories:
            if arguments.get("trajs_per_batch") is not None:
                raise ValueError("give yield_completed_trajectories or trajs_per_batch, not both")
            arguments["trajs_per_batch"], arguments["traj_format"] = 1, "cat"
        with named_as({"num_envs_per_worker": "envs_per_worker", "policy_device": "device"}):
            options = CollectorOptions(
                create_env_fn=sources, policy=policy, frames_per_batch=frames_per_batch,
                total_frames=total_frames, num_workers=num_workers, num_envs_per_worker=envs_per_worker,
                policy_device=device, sync=False, **arguments)
        self._env_groups = _check_groups(env_groups, envs_per_worker)
        self._server_settings = _server_settings(max_batch_size, min_batch_size, server_timeout,
                                                 envs_per_worker, self._env_groups,
                                                 num_workers * envs_per_worker)
        self._build(options, worker_processes(options))

    # -- the server -------------------------------------------------------------------------------
    def _allocate(self, options: CollectorOptions, transport: Transport, probe: EngineSummary,
                  steps: int, awaiting: list[int]) -> None:
        engine = probe.engine  # built here: the server's policy is this process's
        assert isinstance(engine, Rollout)  # a TensorDictRollout was refused by _build
        if self._env_groups > 1 and not engine.envs.steps_rows:
            raise TypeError(f"env_groups={self._env_groups}: a worker steps its envs in groups, which "
                            f"takes a list of Gymnasium envs (an env id, or a function building one env); "
                            f"{type(engine.envs).__name__} steps all its envs at once: use env_groups=1")
        policy = engine.policy
        if isinstance(policy, (ModulePolicy, TensorDictPolicy)) and policy.module is options.policy:  # yours:
            try:  # training must not race a forward pass
                policy.callable = policy.module = copy.deepcopy(policy.module)
                compile_adapter(policy, options.compile_policy)
            except Exception as error:
                raise TypeError(
                    f"AsyncBatchedCollector's policy server runs a copy of policy (so that training never "
                    f"races a forward pass), but copy.deepcopy(policy) failed for "
                    f"{type(policy.module).__name__}: {error}. Make it deep-copyable (e.g. create locks or "
                    "open files lazily, or define __deepcopy__), or pass policy_factory= to build the "
                    "server's policy instead"
                ) from error
            self._models["policy"] = policy.module
        super()._allocate(options, transport, probe, steps, awaiting)
        assert isinstance(self._slots, BufferSlots)  # a Rollout's batches have a layout
        self._server = PolicyServer(
            policy, self._slots.buffers, self.num_envs_per_worker // self._env_groups,
            timeout=options.timeout, exploration_type=options.exploration_type, **self._server_settings,
        )
        self._pool.check, self._pool.stalled = self._server.check, self._server.stalled
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _stop, self._server, self._pool)

    def _init_weights(self, options: CollectorOptions, transport: Transport) -> None:
        self._weight_part.senders = init_senders(options.weight_sync_schemes, self._models, "local", self)
        # no weights to send; the version is the server's, read through a weak reference: a
        # collector dropped without shutdown() is freed (and its workers stopped) at once
        collector = weakref.ref(self)
        self._weights = FrozenWeights(self.num_workers, version=lambda: _server_version(collector))
        self.weight_updater = options.weight_updater

    def _worker_spec(self, worker: int) -> RolloutSpec:
        return dataclasses.replace(super()._worker_spec(worker), policy=None, policy_factory=None)

    def _worker_setup(self, worker: int) -> WorkerSetup:
        served, groups = self._server.policy, self._env_groups
        # the server serves each group of the worker's envs as a worker of its own
        conns = [self._server.connect(worker * groups + group) for group in range(groups)]
        client = ServedPolicy(conns, served.extras, self.options.timeout, served.action_dtype,
                              served.reads_is_init)
        return dataclasses.replace(super()._worker_setup(worker), served_policy=client)

    def _ensure_started(self) -> None:
        started = self._pool.started
        super()._ensure_started()
        self._server.start()  # after the workers: this process has no thread of its own while they fork
        if not started:
            self._pool.transport.prepare_threaded_starts()  # restarts, from now on, go through it

    def _hooks(self) -> Hooks:
        return dataclasses.replace(super()._hooks(), assign=weakly(self._assign))

    def _assign(self, worker: int, slot: int) -> None:
        """The server answers ``worker``'s envs into ``slot`` (before the worker is handed it)."""
        for group in range(self._env_groups):
            self._server.assign(worker * self._env_groups + group, slot)

    @property
    def policy(self) -> Any:
        """The policy the server runs (the device copy where one was made)."""
        return getattr(self._server.policy, "callable", None)

    # -- weights ----------------------------------------------------------------------------------
    def _update_weights(self, forms: dict[str, Any], worker_ids: list[int] | None) -> None:
        """Update the server's policy: it acts for every env worker, so ``worker_ids`` (checked
        against ``num_workers``) update them all, as in TorchRL's ``AsyncBatchedCollector``."""
        check_model_ids(forms, self._models)
        self._weight_part.update_in_process(forms, self.options.policy)
        self._weights_sent()

    def _apply_received(self, forms: dict[str, Any]) -> None:
        with self._server.lock:  # between two forward passes
            self._weight_part.apply_in_process(forms)
            self._server.version += 1

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """As :meth:`MultiAsyncCollector.state_dict`, with the served policy's weights and version."""
        state = super().state_dict()
        module = self._server.policy.module
        weights = {} if module is None else {k: v.detach().clone() for k, v in module.state_dict().items()}
        return {**state, "server": {"version": self._server.version, "policy": weights}}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        server = state_dict.get("server") if isinstance(state_dict, Mapping) else None
        module = self._server.policy.module
        if module is not None and isinstance(server, Mapping):  # the served policy's, before anything
            check_fits(module, server.get("policy"), "served policy")
        super().load_state_dict(state_dict)  # checks every key, "server" included, first
        server = state_dict["server"]
        with self._server.lock:
            if self._server.policy.module is not None:
                self._server.policy.module.load_state_dict(server["policy"])
            self._server.version = int(server["version"])

    def stats(self) -> CollectorStats:
        server = self._server
        batch = server.envs_served / server.forward_passes if server.forward_passes else math.nan
        return dataclasses.replace(super().stats(), policy_version=server.version, inference_batch_size=batch)

    def _stop_server(self, deadline: float) -> None:
        """The server stops before the workers (which it releases): see :meth:`shutdown`."""
        self._server.stop(min(5.0, max(0.0, deadline - time.monotonic()) / 2))

    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        """Stop background collection, the server (which releases waiting workers), then the
        workers, then raise the error background collection stopped on (if any); bounded by
        ``timeout`` as :meth:`MultiAsyncCollector.shutdown`, idempotent."""
        try:
            super().shutdown(timeout, close_env, raise_on_error)
        finally:
            self._server.stop(0.0)  # closed already, unless shutdown failed before reaching it


def _group_envs(create_env_fn: Any, num_envs: int | None, envs_per_worker: int) -> tuple[list[Any], int]:
    """One env source per worker, and the number of workers."""
    envs_per_worker = check_int("envs_per_worker", envs_per_worker, minimum=1, allowed="a positive int")
    listed = isinstance(create_env_fn, (list, tuple))
    if num_envs is None:
        num_envs = len(create_env_fn) if listed else envs_per_worker
    num_envs = check_int("num_envs", num_envs, minimum=1, allowed="a positive int")
    if listed and len(create_env_fn) != num_envs:
        raise ValueError(f"create_env_fn has {len(create_env_fn)} entries for num_envs={num_envs}")
    if num_envs % envs_per_worker:
        raise ValueError(f"num_envs={num_envs} is not a multiple of envs_per_worker={envs_per_worker}")
    workers = num_envs // envs_per_worker
    if not listed:
        return [create_env_fn] * workers, workers
    sources = []
    for worker in range(workers):
        group = create_env_fn[worker * envs_per_worker : (worker + 1) * envs_per_worker]
        if any(source is not group[0] and source != group[0] for source in group):
            raise ValueError(f"create_env_fn[{worker * envs_per_worker}:{(worker + 1) * envs_per_worker}] "
                             f"(worker {worker}'s envs) are built from different sources; the envs of one "
                             "worker share one source: pass envs_per_worker=1, or group equal sources")
        sources.append(group[0])
    return sources, workers


def _check_groups(env_groups: Any, envs_per_worker: int) -> int:
    """``env_groups``, checked: a divisor of ``envs_per_worker``."""
    groups: int = check_int("env_groups", env_groups, minimum=1, allowed="a positive int")
    if envs_per_worker % groups:
        raise ValueError(f"env_groups={groups} does not divide envs_per_worker={envs_per_worker}: "
                         "each group has as many envs")
    return groups


def _server_settings(max_batch_size: Any, min_batch_size: Any, server_timeout: Any, envs_per_worker: int,
                     env_groups: int, num_envs: int) -> dict[str, Any]:
    """The server's batching arguments, checked."""
    if max_batch_size is not None:  # a worker's envs (a group of them) are served together
        least = f"envs_per_worker={envs_per_worker}" if env_groups == 1 else (
            f"envs_per_worker / env_groups = {envs_per_worker // env_groups}")
        max_batch_size = check_int("max_batch_size", max_batch_size, minimum=envs_per_worker // env_groups,
                                   allowed=f"None or an int >= {least}")
    min_batch_size = check_int("min_batch_size", min_batch_size, minimum=1, allowed="a positive int")
    if min_batch_size > num_envs:
        raise ValueError(f"min_batch_size={min_batch_size} is more than the {num_envs} envs")
    if max_batch_size is not None and min_batch_size > max_batch_size:
        raise ValueError(f"min_batch_size={min_batch_size} is more than max_batch_size={max_batch_size}: "
                         "a forward pass could never hold the minimum")
    if isinstance(server_timeout, bool) or not isinstance(server_timeout, (int, float, np.number)):
        raise TypeError(f"server_timeout must be a number of seconds >= 0, got {server_timeout!r}")
    if not 0 <= server_timeout < math.inf:  # NaN fails too: the server would never serve a partial batch
        raise ValueError(f"server_timeout must be a finite number of seconds >= 0, got {server_timeout!r}")
    return {"max_batch_size": max_batch_size, "min_batch_size": min_batch_size,
            "server_timeout": float(server_timeout)}


def _server_version(collector: weakref.ref[AsyncBatchedCollector]) -> int:
    alive = collector()
    return alive._server.version if alive is not None else 0


def _stop(server: PolicyServer, pool: WorkerPool) -> None:
    server.stop(1.0)
    pool.shutdown()
