"""VMAS: ``rlcollect.torchrl.Collector`` vs TorchRL's own ``Collector`` on a TorchRL batched env.

Workloads ``balance-N``: VMAS's ``balance`` scenario (3 agents carry a package, continuous
actions, episodes of at most 200 steps) through TorchRL's ``VmasEnv`` on the CPU, ``N`` envs in one
env object (batch size ``[N]``), the per-agent MLP 16-64-64-2 (tanh) as a ``TensorDictModule``
reading ``("agents", "observation")`` and writing ``("agents", "action")``, ``T = 16`` steps a
batch. Contenders, each in its own process (bench/README.md), both built as TorchRL code builds
them (``Collector(env, policy, frames_per_batch=N * 16, total_frames=-1, return_same_td=True)``):

- rlcollect: ``rlcollect.torchrl.Collector`` (TorchRL's arguments, rlcollect's engine: the env's
  own TensorDicts stepped with ``step_and_maybe_reset``, the batch checked for NaN and infinity);
- TorchRL: ``torchrl.collectors.Collector``.

Needs ``pip install vmas`` (not an extra of rlcollect's: the benchmark only).

Run: ``python -m bench.vmas`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bench.harness import Batches, Contender, Plan, Ratio, parse_args, run
from bench.workloads import iterate

FAMILY = "vmas"
SIZES = (1024, 4096)
WORKLOADS = tuple(f"balance-{n}" for n in SIZES)
STEPS = 16


def make_env(num_envs: int) -> Any:
    from torchrl.envs.libs.vmas import VmasEnv

    return VmasEnv("balance", num_envs=num_envs, continuous_actions=True, max_steps=200, device="cpu",
                   seed=0)


def make_policy() -> Any:
    """The seeded per-agent MLP (the same weights in both contenders)."""
    from tensordict.nn import TensorDictModule

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2),
                        nn.Tanh())
    return TensorDictModule(net, in_keys=[("agents", "observation")], out_keys=[("agents", "action")])


def collector(name: str, quick: bool, library: str) -> Batches:
    if library == "rlcollect":
        from rlcollect.torchrl import Collector
    else:
        from torchrl.collectors import Collector
    num_envs = int(name.split("-")[1]) // (4 if quick else 1)
    built = Collector(make_env(num_envs), make_policy(), frames_per_batch=num_envs * STEPS, total_frames=-1,
                      return_same_td=True)
    return iterate(built)


def plan(name: str, quick: bool) -> Plan:
    num_envs = int(name.split("-")[1])
    kwargs = {"name": name, "quick": quick}
    contenders = [
        Contender("rlcollect", f"**rlcollect.torchrl Collector, {num_envs} envs**", collector,
                  {**kwargs, "library": "rlcollect"}),
        Contender("torchrl", "TorchRL Collector", collector, {**kwargs, "library": "torchrl"}),
    ]
    ratios = [Ratio("rlcollect", "torchrl", "rlcollect / TorchRL", 1.0)]
    return Plan(f"VMAS balance (3 agents) through TorchRL's VmasEnv, {num_envs} envs, per-agent MLP "
                f"16-64-64-2, T = {STEPS}", contenders, ratios)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(FAMILY, __doc__, WORKLOADS, repetitions=5, seconds=3.0, argv=argv)
    run(FAMILY, "VMAS: rlcollect.torchrl vs TorchRL's Collector on a TorchRL batched env", args, plan)


if __name__ == "__main__":
    main()
