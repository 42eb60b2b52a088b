"""Before a collector with workers starts any: its probe, one rollout built here to learn the batch
layout and the envs per worker and to check the policy on a dry step; and the worker processes'
transport.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from rlcollect.collectors.options import CollectorOptions
from rlcollect.envs.envpool_env import ENVPOOL_PREFIX
from rlcollect.envs.factory import source_modules
from rlcollect.rollout.build import Engine, make_rollout
from rlcollect.workers.transport import ProcessTransport, Transport, start_forkserver

__all__ = ["preload_modules", "probe_rollout", "worker_processes"]


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
                  ) -> tuple[Engine, int]:
    """The probe (closed; its layout, models and policy stay readable) and the envs each worker
    process steps, with every check that needs the env built (``owner``: the collector class
    named in the errors; ``policy_in_workers``: False for a policy server)."""
    # the probe: the layout, the envs per worker and a dry step of the policy, on one env (each
    # copy of a Gymnasium env costs its start-up; a vector env brings its own count)
    # (with policy and policy_factory, policy is where the weights come from: the probe holds it)
    # (an EnvPool name: the probe builds a worker's whole pool, C++ envs that start at once, whose
    # rows are what a worker's batch has: an asynchronous pool's batch_size)
    spec = options.rollout_spec(0)
    whole = isinstance(spec.create_env_fn, str) and spec.create_env_fn.startswith(ENVPOOL_PREFIX)
    probe = make_rollout(dataclasses.replace(
        spec, num_envs=options.num_envs_per_worker if whole else 1,
        policy_factory=None if options.policy is not None else spec.policy_factory))
    probe.close()
    if probe.layout is None:  # a TorchRL env's own TensorDicts
        if not policy_in_workers:
            raise ValueError(f"{owner}: its policy server reads each env's step from the "
                             f"batch buffers, which this TorchRL env's data does not fit "
                             f"({probe.envs.reason}); use MultiSyncCollector or MultiAsyncCollector")
        if options.preemptive_threshold is not None:
            raise ValueError(f"preemptive_threshold stops workers inside the batch buffers, which this "
                             f"TorchRL env's data does not fit ({probe.envs.reason})")
    if probe.envs.streams and not policy_in_workers:
        raise ValueError("AsyncBatchedCollector with an asynchronous EnvPool (batch_size < num_envs): "
                         "its policy server reads every env's step from shared memory, which the "
                         "pool's envs in flight are not in; use MultiAsyncCollector (the pool already "
                         "overlaps the forward pass with the envs' steps) or a synchronous pool")
    copies = probe.envs.follows_num_envs and not whole
    if not copies and not whole and options.num_envs_per_worker != 1:
        raise ValueError(f"num_envs_per_worker={options.num_envs_per_worker}, but create_env_fn builds "
                         f"{probe.num_envs} env(s) itself ({type(probe.envs).__name__}: a vector env, "
                         "a TorchRL env or one env instance); leave num_envs_per_worker=1")
    return probe, options.num_envs_per_worker if copies else probe.num_envs
