"""Batched simulators: one env object stepping N envs per call, rlcollect vs a plain loop over it.

Workloads, CartPole with the MLP 4-64-64-2 (tanh, argmax), N envs in one object:

- ``gym-N``: Gymnasium's default vector env, ``gym.make_vec("CartPole-v1", num_envs=N)``
  (``CartPoleVectorEnv``, numpy, ``NEXT_STEP`` autoreset, ``reset()`` resets all);
- ``torch-N``: :class:`bench.sims.TorchCartPoleVectorEnv`, CartPole in torch tensors with
  ``SAME_STEP`` autoreset and the final observations in ``info``, as GPU simulators hand theirs out.

Contenders, each in its own process (bench/README.md):

- rlcollect: ``Collector(make_env, policy, frames_per_batch=N * T, seed=0, return_same_td=True)``,
  iterated as users do, the data checks on;
- plain loop: the loop a user writes over the same env, storing each step's observation, action,
  reward, terminated, truncated and true next observation into preallocated ``[T, N, ...]``
  arrays (numpy for ``gym-N``, with the mask of the reset steps; torch for ``torch-N``, the final
  observations written over the reset ones);
- rlcollect, 2 workers: ``MultiSyncCollector`` of two such envs of ``N / 2`` each.

Frames are transitions: the reset steps of a ``NEXT_STEP`` env (masked out) are not counted, in any
contender. The collector's overhead per step is ``N / fps(rlcollect) - N / fps(plain loop)``.

Run: ``python -m bench.batched_sims`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from bench.harness import Batches, Contender, Plan, Ratio, parse_args, run
from bench.sims import TorchCartPoleVectorEnv
from bench.workloads import Argmax

FAMILY = "batched_sims"
SIZES = (256, 1024, 4096, 16384, 65536)
WORKLOADS = tuple(f"{kind}-{n}" for kind in ("gym", "torch") for n in SIZES)
STEPS = {256: 64, 1024: 32, 4096: 16, 16384: 8, 65536: 4}  # T: batches of 16k to 262k frames


def make_policy() -> nn.Module:
    """The seeded MLP (the same weights in every contender)."""
    torch.manual_seed(0)
    layers = [nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2), Argmax()]
    return nn.Sequential(*layers)


def make_env(kind: str, num_envs: int) -> Any:
    if kind == "torch":
        return TorchCartPoleVectorEnv(num_envs)
    import gymnasium as gym

    return gym.make_vec("CartPole-v1", num_envs=num_envs)


class EnvMaker:
    """A picklable factory of one workload's env (for the workers)."""

    def __init__(self, kind: str, num_envs: int) -> None:
        self.kind, self.num_envs = kind, num_envs

    def __call__(self) -> Any:
        return make_env(self.kind, self.num_envs)


def _size(name: str) -> tuple[str, int, int]:
    kind, n = name.split("-")
    return kind, int(n), STEPS[int(n)]


def rlcollect_collector(name: str, quick: bool, workers: int = 1) -> Batches:
    from rlcollect import Collector, MultiSyncCollector

    kind, n, steps = _size(name)
    steps = max(steps // (4 if quick else 1), 2)
    policy = make_policy()
    if workers == 1:
        collector: Any = Collector(EnvMaker(kind, n), policy, frames_per_batch=n * steps, seed=0,
                                   return_same_td=True)
    else:
        collector = MultiSyncCollector([EnvMaker(kind, n // workers)] * workers, policy,
                                       frames_per_batch=n * steps, seed=0, return_same_td=True)
    batches = iter(collector)

    def batch() -> int:
        out = next(batches)
        mask = out.get(("collector", "mask"), None)
        return int(out.numel() if mask is None else mask.sum())

    return Batches(batch, collector.shutdown)


def plain_loop(name: str, quick: bool) -> Batches:
    kind, n, steps = _size(name)
    steps = max(steps // (4 if quick else 1), 2)
    policy, env = make_policy(), make_env(kind, n)
    return _torch_loop(env, policy, n, steps) if kind == "torch" else _numpy_loop(env, policy, n, steps)


def _numpy_loop(env: Any, policy: nn.Module, n: int, steps: int) -> Batches:
    """A ``NEXT_STEP`` env: each step's arrays stored; the mask marks the steps that reset an env."""
    obs = np.zeros((steps, n, 4), np.float32)
    next_obs, action = np.zeros_like(obs), np.zeros((steps, n), np.int64)
    reward, terminated, truncated = np.zeros((steps, n), np.float32), np.zeros((steps, n), bool), np.zeros(
        (steps, n), bool)
    real = np.zeros((steps, n), bool)
    state = {"obs": env.reset(seed=0)[0], "resetting": np.zeros(n, bool)}

    def batch() -> int:
        current, resetting = state["obs"], state["resetting"]
        with torch.inference_mode():
            for t in range(steps):
                obs[t] = current
                action[t] = chosen = policy(torch.from_numpy(current)).numpy()
                current, reward[t], terminated[t], truncated[t], _ = env.step(chosen)
                next_obs[t], real[t] = current, ~resetting
                resetting = (terminated[t] | truncated[t]) & ~resetting
        state["obs"], state["resetting"] = current, resetting
        return int(real.sum())

    return Batches(batch, env.close)


def _torch_loop(env: Any, policy: nn.Module, n: int, steps: int) -> Batches:
    """A ``SAME_STEP`` torch env: each step's tensors stored, the final observations where envs reset."""
    obs = torch.zeros(steps, n, 4)
    next_obs, action = torch.zeros_like(obs), torch.zeros(steps, n, dtype=torch.int64)
    reward = torch.zeros(steps, n)
    terminated, truncated = torch.zeros(steps, n, dtype=torch.bool), torch.zeros(steps, n, dtype=torch.bool)
    state = {"obs": env.reset(seed=0)[0]}

    def batch() -> int:
        current = state["obs"]
        with torch.inference_mode():
            for t in range(steps):
                obs[t] = current
                action[t] = chosen = policy(current)
                current, reward[t], terminated[t], truncated[t], info = env.step(chosen)
                next_obs[t] = current
                if "final_obs" in info:
                    ended = info["_final_obs"]
                    next_obs[t][ended] = info["final_obs"][ended]
        state["obs"] = current
        return steps * n

    return Batches(batch, env.close)


def plan(name: str, quick: bool) -> Plan:
    kwargs = {"name": name, "quick": quick}
    kind, n, steps = _size(name)
    what = ("Gymnasium's `CartPoleVectorEnv` (`gym.make_vec`, NEXT_STEP)" if kind == "gym"
            else "`TorchCartPoleVectorEnv` (torch tensors, SAME_STEP)")
    contenders = [
        Contender("rlcollect", f"**rlcollect Collector, {n} envs**", rlcollect_collector, kwargs),
        Contender("plain", "plain loop into preallocated arrays", plain_loop, kwargs),
        Contender("rlcollect_2w", f"rlcollect MultiSyncCollector, 2 workers x {n // 2}", rlcollect_collector,
                  {**kwargs, "workers": 2}),
    ]
    ratios = [
        Ratio("rlcollect", "plain", "rlcollect / plain loop", 0.9),
        Ratio("rlcollect_2w", "plain", "rlcollect 2 workers / plain loop", cpu_target=False),
    ]
    return Plan(f"{what}, {n} envs, MLP 4-64-64-2, T = {steps}", contenders, ratios)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(FAMILY, __doc__, WORKLOADS, repetitions=5, seconds=1.0, argv=argv)
    run(FAMILY, "Batched simulators: rlcollect vs a plain loop over the same env", args, plan)


if __name__ == "__main__":
    main()
