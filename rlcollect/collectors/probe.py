"""Before a collector with workers starts any: its probe, one rollout built here to learn the batch
layout and the envs per worker and to check the policy on a dry step (built by worker 0 instead
where only a ``policy_factory`` builds the policy); and the worker processes' transport.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import cloudpickle

from rlcollect.collectors.options import CollectorOptions
from rlcollect.envs.envpool_env import ENVPOOL_PREFIX
from rlcollect.envs.factory import source_modules
from rlcollect.rollout.build import make_rollout
from rlcollect.rollout.summary import EngineSummary
from rlcollect.workers.transport import ProcessTransport, Transport, start_forkserver
from rlcollect.workers.worker import WorkerSetup

__all__ = ["preload_modules", "probe_in_worker", "probe_rollout", "worker_builds_probe", "worker_processes"]


def preload_modules(options: CollectorOptions) -> list[str]:
    """The modules of the env sources, which a forkserver imports once for every worker."""
    return sorted({module for source in options.create_env_fn for module in source_modules(source)})


def worker_processes(options: CollectorOptions) -> Callable[[], Transport]:
    """What makes the worker processes' transport; an explicit forkserver starts at once, so it
    imports what the workers need while this process builds its probe."""
    preload = preload_modules(options)
    if options.start_method == "forkserver":
        start_forkserver(preload)
    return lambda: ProcessTransport(options.start_method, preload)


def probe_rollout(options: CollectorOptions, *, policy_in_workers: bool, owner: str
                  ) -> tuple[EngineSummary, int]:
    """The probe built here (closed; its layout, models and policy stay readable) and the envs each
    worker process steps, with every check that needs the env built (``owner``: the collector class
    named in the errors; ``policy_in_workers``: False for a policy server)."""
    # the probe: the layout, the envs per worker and a dry step of the policy, on one env (each
    # copy of a Gymnasium env costs its start-up; a vector env brings its own count)
    # (with policy and policy_factory, policy is where the weights come from: the probe holds it)
    # (an EnvPool name: the probe builds a worker's whole pool, C++ envs that start at once, whose
    # rows are what a worker's batch has: an asynchronous pool's batch_size)
    spec = options.rollout_spec(0)
    whole = _whole_pool(options)
    probe = make_rollout(dataclasses.replace(
        spec, num_envs=options.num_envs_per_worker if whole else 1,
        policy_factory=None if options.policy is not None else spec.policy_factory))
    probe.close()
    summary = EngineSummary.of(probe)
    return summary, _envs_per_process(options, summary, policy_in_workers, owner)


def worker_builds_probe(options: CollectorOptions) -> bool:
    """Whether worker 0 builds the probe (a worker process or Ray actor): the policy comes from
    ``policy_factory`` alone, which then runs in the workers only, as its name promises (not in a
    collector nested in another's workers: that one's process is a worker already). Where each
    worker runs processes of its own, worker 0's probe is one rollout of its first process's
    envs, which it closes when its setup comes."""
    return (options.policy is None and options.policy_factory is not None
            and options.placement == (0, 1, 0))


def probe_in_worker(options: CollectorOptions, transport: Transport, *, owner: str
                    ) -> tuple[EngineSummary, int, list[int]]:
    """Worker 0 started now, through ``transport``: it builds its rollout (its policy from the
    factory), sends back its summary and waits for its setup (the pool's start); worker processes
    1, 2, ... start meanwhile and wait for theirs. The same checks as :func:`probe_rollout`; if one
    fails, the workers started are stopped and ``transport`` closed. Also returns the workers
    started."""
    init_fn = options.worker_init_fn
    setup = WorkerSetup(worker_idx=0, num_workers=options.num_workers, num_steps=0, env_offset=0,
                        spec=cloudpickle.dumps(options.rollout_spec(0)), seed=options.seed, weights=None,
                        init_fn=None if init_fn is None else cloudpickle.dumps(init_fn), probe=True)
    started = [0]
    try:
        transport.spawn(0, setup, options.start_timeout)
        # the others' interpreters (processes, Ray actors) start while worker 0 builds the probe
        waiting = dataclasses.replace(setup, spec=b"", init_fn=None, probe=False, deferred=True)
        for worker in range(1, options.num_workers):
            started.append(worker)
            transport.spawn(worker, dataclasses.replace(waiting, worker_idx=worker), options.start_timeout)
        answers = transport.wait([0], options.start_timeout)
        if not answers:
            raise TimeoutError(f"worker 0 did not build its envs and policy within start_timeout="
                               f"{options.start_timeout} s")
        kind, payload = answers[0][1]
        if kind == "error":
            raise payload.error if payload.error is not None else RuntimeError(
                f"worker 0 failed to build its envs and policy: {payload.message}\n{payload.traceback}")
        if kind != "probed":
            raise RuntimeError(f"worker 0 failed to build its envs and policy: {payload}")
        return payload, _envs_per_process(options, payload, True, owner), started
    except BaseException:
        for worker in started:
            transport.stop(worker, 0.0)
        transport.close()
        raise


def _whole_pool(options: CollectorOptions) -> bool:
    source = options.create_env_fn[0]
    return isinstance(source, str) and source.startswith(ENVPOOL_PREFIX)


def _envs_per_process(options: CollectorOptions, probe: EngineSummary, policy_in_workers: bool,
                      owner: str) -> int:
    """The envs each worker process steps, after the checks that need the probe's envs."""
    whole = _whole_pool(options)
    if probe.layout is None:  # a TorchRL env's own TensorDicts
        if not policy_in_workers:
            raise ValueError(f"{owner}: its policy server reads each env's step from the "
                             f"batch buffers, which this TorchRL env's data does not fit "
                             f"({probe.reason}); use MultiSyncCollector or MultiAsyncCollector")
        if options.preemptive_threshold is not None:
            raise ValueError(f"preemptive_threshold stops workers inside the batch buffers, which this "
                             f"TorchRL env's data does not fit ({probe.reason})")
    if probe.streams and not policy_in_workers:
        raise ValueError("AsyncBatchedCollector with an asynchronous EnvPool (batch_size < num_envs): "
                         "its policy server reads every env's step from shared memory, which the "
                         "pool's envs in flight are not in; use MultiAsyncCollector (the pool already "
                         "overlaps the forward pass with the envs' steps) or a synchronous pool")
    copies = probe.follows_num_envs and not whole
    if not copies and not whole and options.num_envs_per_worker != 1:
        raise ValueError(f"num_envs_per_worker={options.num_envs_per_worker}, but create_env_fn builds "
                         f"{probe.num_envs} env(s) itself ({probe.env_kind}: a vector env, "
                         "a TorchRL env or one env instance); leave num_envs_per_worker=1")
    return options.num_envs_per_worker if copies else probe.num_envs
