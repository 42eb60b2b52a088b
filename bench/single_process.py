"""Single process: rlcollect's Collector vs a hand-written Gymnasium loop, a bare loop and TorchRL.

Workloads cartpole-1, cartpole-8 and pendulum-8 (bench/workloads.py), and pong-8 (rlcollect with and
without its data checks only). Contenders, each in its own process (bench/README.md):

- rlcollect: ``Collector(env_id, policy, num_envs=N, frames_per_batch=..., seed=0,
  return_same_td=True)``, iterated as users do; the same with ``check="off"`` prices the data
  checks (every write and every batch checked by default);
- hand loop: what a user writes instead, storing observation, action, reward, terminated and
  truncated into preallocated numpy arrays: ``env.step`` + policy for one env, CleanRL's
  ``SyncVectorEnv`` loop (same-step autoreset) for 8;
- bare loop: the envs stepped with the policy's actions, nothing stored (what any collector adds to);
- TorchRL 0.14 ``Collector`` on a ``GymEnv`` (a ``SerialEnv`` of them for 8), the policy a
  ``TensorDictModule``, ``return_same_td=True``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from bench.harness import Batches, Contender, Plan, Ratio, parse_args, run
from bench.workloads import (
    iterate,
    make_env,
    make_policy,
    make_pong_preprocessed,
    torchrl_env,
    torchrl_policy,
    vector_loop,
    workload,
)

WORKLOADS = ("cartpole-1", "cartpole-8", "pendulum-8", "pong-8")


def rlcollect_collector(workload_name: str, quick: bool, check: str = "full") -> Batches:
    from rlcollect import Collector

    w = workload(workload_name, quick)
    env = make_pong_preprocessed if workload_name == "pong-8" else w.env_id
    return iterate(Collector(env, make_policy(w), frames_per_batch=w.frames_per_batch,
                             num_envs=w.num_envs, seed=0, return_same_td=True, check=check))


def hand_loop(workload_name: str, quick: bool) -> Any:
    """One env: ``env.step`` + policy into numpy arrays; several: CleanRL's ``SyncVectorEnv`` loop."""
    w = workload(workload_name, quick)
    if w.num_envs > 1:
        return vector_loop(w, gym.vector.SyncVectorEnv)
    policy, env, steps = make_policy(w), make_env(w.env_id), w.steps
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    observations = np.zeros((steps, *(env.observation_space.shape or ())), dtype=np.float32)
    actions = np.zeros((steps, *(env.action_space.shape or ())), dtype=np.int64 if discrete else np.float32)
    rewards = np.zeros(steps, dtype=np.float32)
    terminateds, truncateds = np.zeros(steps, dtype=bool), np.zeros(steps, dtype=bool)
    obs, _ = env.reset(seed=0)

    def batch() -> int:
        nonlocal obs
        with torch.inference_mode():
            for t in range(steps):
                observations[t] = obs
                output = policy(torch.from_numpy(obs).unsqueeze(0))[0]
                actions[t] = action = output.item() if discrete else output.numpy()
                obs, rewards[t], terminateds[t], truncateds[t], _ = env.step(action)
                if terminateds[t] or truncateds[t]:
                    obs, _ = env.reset()
        return steps

    return batch


def bare_loop(workload_name: str, quick: bool) -> Any:
    """The envs stepped one by one with the policy's actions (one forward per step), nothing stored."""
    w = workload(workload_name, quick)
    policy, envs = make_policy(w), [make_env(w.env_id) for _ in range(w.num_envs)]
    obs = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    discrete = isinstance(envs[0].action_space, gym.spaces.Discrete)

    def batch() -> int:
        with torch.inference_mode():
            for _ in range(w.steps):
                actions = policy(torch.from_numpy(obs)).numpy()
                for i, env in enumerate(envs):
                    action = int(actions[i]) if discrete else actions[i]
                    obs[i], _, terminated, truncated, _ = env.step(action)
                    if terminated or truncated:
                        obs[i], _ = env.reset()
        return w.steps * w.num_envs

    return batch


def torchrl_collector(workload_name: str, quick: bool) -> Batches:
    from torchrl.collectors import Collector

    w = workload(workload_name, quick)
    collector = Collector(
        torchrl_env(w.env_id, w.num_envs), torchrl_policy(w), frames_per_batch=w.frames_per_batch,
        total_frames=-1, return_same_td=True, auto_register_policy_transforms=False,
    )
    collector.set_seed(0)
    return iterate(collector)


def plan(name: str, quick: bool) -> Plan:
    w, kwargs = workload(name, quick), {"workload_name": name, "quick": quick}
    if name == "pong-8":  # what the data checks cost on large observations (bench.batched has the rest)
        return Plan(f"{w.env_id}, 8 envs in one process, {w.policy}, {w.frames_per_batch} frames per batch", [
            Contender("rlcollect", "**rlcollect Collector**", rlcollect_collector, kwargs),
            Contender("unchecked", "rlcollect Collector, check='off' (no data checks)", rlcollect_collector,
                      {**kwargs, "check": "off"}),
        ], [Ratio("rlcollect", "unchecked", "rlcollect / check='off' (the data checks' cost)", 0.98)])
    vector = "env.step" if w.num_envs == 1 else f"SyncVectorEnv of {w.num_envs}"
    serial = "GymEnv" if w.num_envs == 1 else f"SerialEnv of {w.num_envs} GymEnv"
    contenders = [
        Contender("rlcollect", "**rlcollect Collector**", rlcollect_collector, kwargs),
        Contender("unchecked", "rlcollect Collector, check='off' (no data checks)", rlcollect_collector,
                  {**kwargs, "check": "off"}),
        Contender("hand", f"hand loop ({vector} + policy, into numpy arrays)", hand_loop, kwargs),
        Contender("bare", "bare loop (env steps + policy forward, nothing stored)", bare_loop, kwargs),
        Contender("torchrl", f"TorchRL Collector ({serial})", torchrl_collector, kwargs),
    ]
    ratios = [
        Ratio("rlcollect", "unchecked", "rlcollect / check='off' (the data checks' cost)", 0.98),
        Ratio("rlcollect", "hand", "rlcollect / hand loop", 1.0),
        Ratio("rlcollect", "bare", "rlcollect / bare loop (overhead budget at 8 envs)",
              0.94 if w.num_envs > 1 else None),
        Ratio("rlcollect", "torchrl", "rlcollect / TorchRL Collector",
              8.0 if w.env_id == "CartPole-v1" else None),
    ]
    heading = (f"{w.env_id}, {w.num_envs} env(s) in one process, {w.policy}, "
               f"{w.frames_per_batch} frames per batch")
    return Plan(heading, contenders, ratios)


def main(argv: list[str] | None = None) -> None:
    args = parse_args("single_process", __doc__, WORKLOADS, repetitions=11, seconds=1.0, argv=argv)
    run("single_process", "Single process: rlcollect vs hand loop, bare loop and TorchRL", args, plan)


if __name__ == "__main__":
    main()
