"""EnvPool: rlcollect's Collector on an EnvPool pool vs EnvPool's own loop, and vs Gymnasium envs.

Workloads: ``pong-8`` (EnvPool's ``Pong-v5``: 84 x 84 gray, 4 stacked frames, frame skip 4, the
Nature CNN) and ``halfcheetah-8`` (EnvPool's ``HalfCheetah-v4``, the MLP with tanh), 8 envs in one
process. Contenders, each in its own process (bench/README.md):

- rlcollect: ``Collector("envpool:<task>", policy, num_envs=8, frames_per_batch=..., seed=0,
  return_same_td=True)``, iterated as users do (true final observations, ``terminated`` apart from
  ``truncated``, the data checks on);
- EnvPool loop: what an EnvPool user writes: ``pool.step(policy(obs))`` on a synchronous pool,
  observations, actions, rewards and flags stored into preallocated ``[T, N, ...]`` numpy arrays
  (EnvPool's own autoreset: the step after an episode's end is a reset whose action is dropped);
- EnvPool async loop: the same on an asynchronous pool (``num_envs=16, batch_size=8``:
  ``send`` / ``recv``, each step the 8 envs that answered first), a reference for what
  asynchronous stepping gains on this machine (a row's rewards and flags are those of the envs
  the next ``recv`` answers for, not of the row's actions: no pairing, so less work than a
  correct loop);
- rlcollect async: ``Collector("envpool:<task>", policy, num_envs=16,
  create_env_kwargs={"batch_size": 8}, ...)``: the same asynchronous pool, frames in the order
  they complete (``("collector", "env_ids")`` per frame), against the EnvPool async loop;
- pong-8 only: rlcollect's Collector on Gymnasium's ALE Pong with the same preprocessing
  (``bench.single_process``'s pong-8 env): what EnvPool gains over Gymnasium envs.

HalfCheetah's observations are float64: rlcollect stores them as float32 (``obs_dtype="float32"``),
the loop converts them for the policy. The harness's last column is the time to the first batch
(a new process: imports, building, start-up).

Run: ``python -m bench.envpool`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from bench.harness import (
    Batches,
    Contender,
    Plan,
    Ratio,
    parse_args,
    run,
)
from bench.workloads import (
    MLP,
    NATURE_CNN,
    ScaledTanh,
    iterate,
    make_nature_cnn,
    make_pong_preprocessed,
    step_arrays,
)

FAMILY = "envpool"
WORKLOADS = ("pong-8", "halfcheetah-8")
TASKS = {"pong-8": "Pong-v5", "halfcheetah-8": "HalfCheetah-v4"}
NUM_ENVS = 8
FRAMES = {"pong-8": 256, "halfcheetah-8": 1024}


def make_policy(workload_name: str) -> nn.Module:
    """The seeded policy: the Nature CNN for Pong, the MLP (17 -> 64 -> 64 -> 6, tanh) for HalfCheetah."""
    if workload_name == "pong-8":
        return make_nature_cnn()
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(17, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 6),
                         ScaledTanh(1.0))


def frames_per_batch(workload_name: str, quick: bool) -> int:
    return FRAMES[workload_name] // (4 if quick else 1)


def rlcollect_collector(workload_name: str, quick: bool, gymnasium: bool = False,
                        asynchronous: bool = False) -> Batches:
    from rlcollect import Collector

    env = make_pong_preprocessed if gymnasium else f"envpool:{TASKS[workload_name]}"
    obs_dtype = "float32" if workload_name == "halfcheetah-8" else None
    pool: dict[str, Any] = {"num_envs": NUM_ENVS}
    if asynchronous:  # twice the envs, the first half of them to answer each step
        pool = {"num_envs": 2 * NUM_ENVS, "create_env_kwargs": {"batch_size": NUM_ENVS}}
    fpb = frames_per_batch(workload_name, quick)
    return iterate(Collector(env, make_policy(workload_name), seed=0, return_same_td=True,
                             obs_dtype=obs_dtype, frames_per_batch=fpb, **pool))


def envpool_loop(workload_name: str, quick: bool, asynchronous: bool = False) -> Batches:
    """EnvPool's loop with the same policy, storing each step into preallocated ``[T, N, ...]`` arrays."""
    import envpool

    policy = make_policy(workload_name)
    n, steps = NUM_ENVS, frames_per_batch(workload_name, quick) // NUM_ENVS
    pool = envpool.make(TASKS[workload_name], env_type="gymnasium", num_envs=2 * n if asynchronous else n,
                        batch_size=n, seed=0)
    observations, actions, rewards, terminateds, truncateds, env_ids = step_arrays(
        steps, n, pool.observation_space, pool.action_space)
    if asynchronous:
        pool.async_reset()
        state = list(pool.recv())
    else:
        obs, _ = pool.reset()
        state = [obs, None, None, None, {"env_id": np.arange(n)}]

    def batch() -> int:
        for t in range(steps):
            obs, info = state[0], state[4]
            with torch.inference_mode():
                inputs = torch.from_numpy(obs)
                action = policy(inputs.float() if inputs.dtype == torch.float64 else inputs).numpy()
            observations[t], actions[t], env_ids[t] = obs, action, info["env_id"]
            if asynchronous:
                pool.send(action, info["env_id"])
                state[:] = pool.recv()
            else:
                state[:] = pool.step(action)
            rewards[t], terminateds[t], truncateds[t] = state[1], state[2], state[3]
        return steps * n

    return Batches(batch, pool.close)


def plan(name: str, quick: bool) -> Plan:
    kwargs = {"workload_name": name, "quick": quick}
    task, fpb = TASKS[name], frames_per_batch(name, quick)
    contenders = [
        Contender("rlcollect", f"**rlcollect Collector, `envpool:{task}`**", rlcollect_collector, kwargs),
        Contender("envpool", f"EnvPool loop (`{task}`, synchronous pool of {NUM_ENVS}, into numpy arrays)",
                  envpool_loop, kwargs),
        Contender("envpool_async", f"EnvPool async loop (pool of {2 * NUM_ENVS}, batch_size={NUM_ENVS})",
                  envpool_loop, {**kwargs, "asynchronous": True}),
        Contender("rlcollect_async", f"**rlcollect Collector, `envpool:{task}`, num_envs={2 * NUM_ENVS}, "
                  f"batch_size={NUM_ENVS}**", rlcollect_collector, {**kwargs, "asynchronous": True}),
    ]
    ratios = [
        Ratio("rlcollect", "envpool", "rlcollect / EnvPool loop (synchronous)", 0.9),
        Ratio("rlcollect_async", "envpool_async", "rlcollect async / EnvPool async loop", 0.9),
        Ratio("rlcollect_async", "rlcollect", "rlcollect async / rlcollect synchronous"),
    ]
    if name == "pong-8":
        label = "rlcollect Collector on Gymnasium's ALE Pong (same preprocessing)"
        contenders.append(Contender("gymnasium", label, rlcollect_collector, {**kwargs, "gymnasium": True}))
        ratios.append(Ratio("rlcollect", "gymnasium", "rlcollect on EnvPool / rlcollect on Gymnasium"))
    policy = NATURE_CNN if name == "pong-8" else f"{MLP.replace('obs', '17').replace('act', '6')}"
    heading = f"EnvPool {task}, {NUM_ENVS} envs in one process, {policy}, {fpb} frames per batch"
    return Plan(heading, contenders, ratios)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(FAMILY, __doc__, WORKLOADS, repetitions=7, seconds=1.5, argv=argv)
    run(FAMILY, "EnvPool: rlcollect vs EnvPool's own loop", args, plan)


if __name__ == "__main__":
    main()
