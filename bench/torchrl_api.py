"""TorchRL users' code, one import changed: ``rlcollect.torchrl.Collector`` vs TorchRL's ``Collector``.

Both collectors get the same TorchRL env and the same ``TensorDictModule`` policy (the seeded MLP
of cartpole-1, argmax), built the same way in each contender's process, ``return_same_td=True``:

- gymenv-1: ``GymEnv("CartPole-v1")``, 1000 frames per batch;
- serialenv-8: ``SerialEnv(8, GymEnv)``, 1024 frames per batch;
- parallelenv-8: ``ParallelEnv(8, GymEnv)`` (8 env processes), 1024 frames per batch.

rlcollect steps a TorchRL env through TorchRL's own ``step`` / ``step_mdp`` / ``maybe_reset``, so
this measures what the collector adds around the env, not a different env.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from bench.harness import Batches, Contender, Plan, Ratio, parse_args, run
from bench.workloads import iterate, register, torchrl_policy, workload

WORKLOADS = ("gymenv-1", "serialenv-8", "parallelenv-8")


def _gym_env(env_id: str) -> Any:
    from torchrl.envs import GymEnv

    register(env_id)
    return GymEnv(env_id, categorical_action_encoding=True)


def make_env(workload_name: str) -> Any:
    """The TorchRL env of a workload, built in the contender's process."""
    from torchrl.envs import ParallelEnv, SerialEnv

    if workload_name == "gymenv-1":
        return _gym_env("CartPole-v1")
    batched = SerialEnv if workload_name == "serialenv-8" else ParallelEnv
    return batched(8, partial(_gym_env, "CartPole-v1"))


def _frames_per_batch(workload_name: str, quick: bool) -> int:
    return workload("cartpole-1" if workload_name == "gymenv-1" else "cartpole-8", quick).frames_per_batch


def collector(workload_name: str, quick: bool, library: str) -> Batches:
    """``Collector`` from ``rlcollect.torchrl`` (``library="rlcollect"``) or ``torchrl.collectors``,
    the one line a TorchRL user changes; the rest is the same code."""
    if library == "rlcollect":
        from rlcollect.torchrl import Collector
    else:
        from torchrl.collectors import Collector

    policy = torchrl_policy(workload("cartpole-1", quick))
    frames_per_batch = _frames_per_batch(workload_name, quick)
    built = Collector(make_env(workload_name), policy, frames_per_batch=frames_per_batch, total_frames=-1,
                      return_same_td=True)
    built.set_seed(0)
    return iterate(built)


def plan(name: str, quick: bool) -> Plan:
    kwargs = {"workload_name": name, "quick": quick}
    env = {"gymenv-1": "GymEnv('CartPole-v1')", "serialenv-8": "SerialEnv(8, GymEnv('CartPole-v1'))",
           "parallelenv-8": "ParallelEnv(8, GymEnv('CartPole-v1'))"}[name]
    heading = f"{env}, TensorDictModule(MLP 4-64-64-2, argmax), {_frames_per_batch(name, quick)} frames/batch"
    return Plan(heading, [
        Contender("rlcollect", "**rlcollect.torchrl Collector**", collector,
                  {**kwargs, "library": "rlcollect"}),
        Contender("torchrl", "TorchRL Collector", collector, {**kwargs, "library": "torchrl"}),
    ], [Ratio("rlcollect", "torchrl", "rlcollect.torchrl / TorchRL Collector", 2.0)])


def main(argv: list[str] | None = None) -> None:
    args = parse_args("torchrl_api", __doc__, WORKLOADS, repetitions=5, seconds=1.0, argv=argv)
    run("torchrl_api", "TorchRL's API: rlcollect.torchrl vs TorchRL, same env and policy", args, plan)


if __name__ == "__main__":
    main()
