"""Ray: rlcollect's RayCollector vs its MultiSyncCollector vs TorchRL's RayCollector, cartpole-2x8.

Contenders, each in its own process (bench/README.md), 2 x 8 CartPole envs, synchronous batches
of all 16 envs:

- rlcollect ``RayCollector(num_collectors=2, collector_kwargs={"num_envs": 8})``: 2 Ray actors,
  each a ``Collector`` of 8 envs;
- rlcollect ``MultiSyncCollector(num_workers=2, num_envs_per_worker=8)``: worker processes,
  shared memory, no Ray;
- TorchRL 0.14 ``torchrl.collectors.distributed.RayCollector``: 2 remote ``Collector`` s, each on
  a ``SerialEnv`` of 8 ``GymEnv``, ``sync=True``.

This script starts one local Ray (4 logical CPUs: both Ray contenders' actors exist at once, only
one contender collects at a time); the contenders connect to it (``RAY_ADDRESS``). Ray actors are
not in the contender's process tree: their CPU time and memory are added by pid. Ray's own
daemons (GCS, raylet) are not counted.
"""

from __future__ import annotations

import os
from functools import partial

from bench.harness import Batches, Contender, Plan, Ratio, parse_args, run
from bench.workloads import iterate, make_policy, torchrl_env, torchrl_policy, workload


def rlcollect_ray(workload_name: str, quick: bool) -> Batches:
    from rlcollect import RayCollector

    w = workload(workload_name, quick)
    collector = RayCollector(
        w.env_id, make_policy(w), num_collectors=w.num_workers,
        collector_kwargs={"num_envs": w.envs_per_worker}, frames_per_batch=w.frames_per_batch, seed=0,
        ray_init_config={"address": os.environ["RAY_ADDRESS"], "log_to_driver": False},
    )
    return iterate(collector, pids=lambda: collector.actor_pids)


def rlcollect_multisync(workload_name: str, quick: bool) -> Batches:
    from rlcollect import MultiSyncCollector

    w = workload(workload_name, quick)
    return iterate(MultiSyncCollector(
        w.env_id, make_policy(w), num_workers=w.num_workers, num_envs_per_worker=w.envs_per_worker,
        frames_per_batch=w.frames_per_batch, seed=0, return_same_td=True,
    ))


def torchrl_ray(workload_name: str, quick: bool) -> Batches:
    import ray
    from torchrl.collectors import Collector
    from torchrl.collectors.distributed import RayCollector

    w = workload(workload_name, quick)
    policy = torchrl_policy(w)
    collector = RayCollector(
        [partial(torchrl_env, w.env_id, w.envs_per_worker)] * w.num_workers, policy,
        collector_class=Collector, collector_kwargs={"auto_register_policy_transforms": False},
        frames_per_batch=w.frames_per_batch, total_frames=10**15,  # -1 stops at once in 0.14.1
        sync=True, num_collectors=w.num_workers, remote_configs={"num_cpus": 1},
        ray_init_config={"address": os.environ["RAY_ADDRESS"], "log_to_driver": False},
    )
    collector.update_policy_weights_(policy)  # TorchRL warns unless the weights are synced first
    pids = ray.get([a.__ray_call__.remote(lambda self: os.getpid()) for a in collector.remote_collectors])
    return iterate(collector, pids=lambda: list(pids))


def plan(name: str, quick: bool) -> Plan:
    w, kwargs = workload(name, quick), {"workload_name": name, "quick": quick}
    workers, m = w.num_workers, w.envs_per_worker
    contenders = [
        Contender("ray", f"**rlcollect RayCollector ({workers} actors x Collector of {m} envs)**",
                  rlcollect_ray, kwargs),
        Contender("multisync", f"rlcollect MultiSyncCollector ({workers} workers x {m} envs)",
                  rlcollect_multisync, kwargs),
        Contender("torchrl-ray", f"TorchRL RayCollector ({workers} actors x Collector on SerialEnv of {m})",
                  torchrl_ray, kwargs),
    ]
    ratios = [
        Ratio("ray", "multisync", "rlcollect RayCollector / rlcollect MultiSyncCollector", 0.7),
        Ratio("ray", "torchrl-ray", "rlcollect RayCollector / TorchRL RayCollector", 5.0),
    ]
    heading = f"{w.env_id}, {workers} x {m} envs, {w.policy}, {w.frames_per_batch} frames per batch"
    return Plan(heading, contenders, ratios)


def main(argv: list[str] | None = None) -> None:
    args = parse_args("ray", __doc__, ["cartpole-2x8"], repetitions=5, seconds=4.0, argv=argv)
    import ray

    os.environ["OMP_NUM_THREADS"] = "1"  # the actors' torch threads (Ray's workers inherit it)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        address = ray.get_runtime_context().gcs_address
        title = "Ray: rlcollect RayCollector vs MultiSyncCollector vs TorchRL RayCollector"
        run("ray", title, args, plan, env={"RAY_ADDRESS": address})
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
