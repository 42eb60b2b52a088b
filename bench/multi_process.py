"""Multi-process: rlcollect's MultiSync / MultiAsync collectors vs one process, AsyncVectorEnv and TorchRL.

Workloads cartpole-2x8 and pong-2x4 (2 workers x M envs, bench/workloads.py). Contenders, each in
its own process, CPU time and memory over its whole process tree (bench/README.md):

- rlcollect ``MultiSyncCollector`` and ``MultiAsyncCollector`` (``num_workers=2,
  num_envs_per_worker=M, seed=0, return_same_td=True``), iterated; an asynchronous batch is one
  worker's (``frames_per_batch / 2``: the same steps per env), and each of its repetitions starts
  after 3 warm-up batches (those collected ahead are used up first);
- rlcollect ``Collector``: all 2 x M envs in one process;
- the CleanRL loop on Gymnasium's ``AsyncVectorEnv`` (a process per env, same-step autoreset),
  the policy in the main process, storing into preallocated numpy arrays;
- TorchRL 0.14 ``MultiSyncCollector``: 2 workers, each a ``SerialEnv`` of M ``GymEnv``.
"""

from __future__ import annotations

from functools import partial

import gymnasium as gym

from bench.harness import Batches, Contender, Plan, Ratio, parse_args, run
from bench.workloads import iterate, make_policy, torchrl_env, torchrl_policy, vector_loop, workload

WORKLOADS = ("cartpole-2x8", "pong-2x4")


def rlcollect_multi(workload_name: str, quick: bool, sync: bool) -> Batches:
    from rlcollect import MultiAsyncCollector, MultiSyncCollector

    w = workload(workload_name, quick)
    collector = (MultiSyncCollector if sync else MultiAsyncCollector)(
        w.env_id, make_policy(w), num_workers=w.num_workers, num_envs_per_worker=w.envs_per_worker,
        frames_per_batch=w.frames_per_batch if sync else w.frames_per_batch // w.num_workers,
        seed=0, return_same_td=True,
    )
    return iterate(collector, warmup_batches=1 if sync else w.num_workers + 1)


def rlcollect_single(workload_name: str, quick: bool) -> Batches:
    from rlcollect import Collector

    w = workload(workload_name, quick)
    return iterate(Collector(w.env_id, make_policy(w), frames_per_batch=w.frames_per_batch,
                             num_envs=w.num_envs, seed=0, return_same_td=True))


def async_vector_env(workload_name: str, quick: bool) -> Batches:
    return vector_loop(workload(workload_name, quick), gym.vector.AsyncVectorEnv)


def torchrl_multisync(workload_name: str, quick: bool) -> Batches:
    from torchrl.collectors import MultiSyncCollector

    w = workload(workload_name, quick)
    collector = MultiSyncCollector(
        [partial(torchrl_env, w.env_id, w.envs_per_worker)] * w.num_workers, torchrl_policy(w),
        frames_per_batch=w.frames_per_batch, total_frames=10**15, num_threads=1,
        auto_register_policy_transforms=False,
    )
    collector.set_seed(0)
    return iterate(collector)


def plan(name: str, quick: bool) -> Plan:
    w, kwargs = workload(name, quick), {"workload_name": name, "quick": quick}
    n, workers, m = w.num_envs, w.num_workers, w.envs_per_worker
    contenders = [
        Contender("sync", f"**rlcollect MultiSyncCollector ({workers} x {m} envs)**", rlcollect_multi,
                  {**kwargs, "sync": True}),
        Contender("async", f"**rlcollect MultiAsyncCollector ({workers} x {m} envs)**", rlcollect_multi,
                  {**kwargs, "sync": False}),
        Contender("single", f"rlcollect Collector, 1 process x {n} envs", rlcollect_single, kwargs),
        Contender("async-vec", f"AsyncVectorEnv loop ({n} env processes + policy, into numpy arrays)",
                  async_vector_env, kwargs),
        Contender("torchrl-sync", f"TorchRL MultiSyncCollector ({workers} x SerialEnv of {m} GymEnv)",
                  torchrl_multisync, kwargs),
    ]
    ratios = [
        Ratio("sync", "torchrl-sync", "rlcollect MultiSync / TorchRL MultiSync",
              10.0 if name == "cartpole-2x8" else None),
        Ratio("sync", "single", "rlcollect MultiSync / rlcollect Collector (1 process)",
              1.5 if name == "pong-2x4" else None, cpu_target=False),
        Ratio("async", "single", "rlcollect MultiAsync / rlcollect Collector (1 process)"),
        Ratio("sync", "async-vec", "rlcollect MultiSync / AsyncVectorEnv loop"),
    ]
    heading = (f"{w.env_id}, {workers} workers x {m} envs, {w.policy}, {w.frames_per_batch} frames per "
               f"synchronous batch ({w.frames_per_batch // workers} per asynchronous one)")
    return Plan(heading, contenders, ratios)


def main(argv: list[str] | None = None) -> None:
    args = parse_args("multi_process", __doc__, WORKLOADS, repetitions=7, seconds=2.0, argv=argv)
    run("multi_process", "Multi-process: rlcollect vs one process, AsyncVectorEnv and TorchRL", args, plan)


if __name__ == "__main__":
    main()
