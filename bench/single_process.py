"""Single-process rows: rlcollect against the hand-written loop, TorchRL and the physical limit.

Workloads (``/work/shared/BENCHMARKS.md``): ``cartpole-1`` (CartPole-v1, 1 env), ``cartpole-8``
(8 envs in one process) and ``pendulum-8`` (Pendulum-v1, 8 envs), each with a seeded MLP policy.

Contenders, each built in its own process and measured interleaved by :mod:`bench.harness`:

- ``env`` and ``policy``: the physical limit's two halves, timed separately: the envs stepped in
  a bare loop with pre-recorded actions (the policy's own, so that episodes last as long as in the
  other contenders), and the policy's forward alone on a batch of ``num_envs`` observations. A
  frame costs at least its env step plus its share of a forward.
- ``bare``: the same two halves alternating in one loop, nothing stored: what running env and
  torch code in turn costs (caches, branch predictors) before any collector does anything.
- ``hand``: the loop a user writes instead, storing observation, action, reward, terminated and
  truncated into preallocated numpy arrays: ``env.step`` + policy for 1 env, CleanRL's
  ``gymnasium.vector.SyncVectorEnv`` loop for 8 envs.
- ``torchrl``: TorchRL's ``Collector`` on ``GymEnv`` (``SerialEnv`` of them for 8 envs) with the
  policy as a ``TensorDictModule``.
- ``rlcollect`` (the headline: iterating, as users do) and ``rlcollect-rollout``
  (``Collector.rollout()``), both with ``return_same_td=True``.

Run from the repository root::

    python -m bench.single_process            # full run, writes bench/results/single_process.*
    python -m bench.single_process --quick    # smoke run, writes bench/results/single_process_quick.*
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from bench.harness import (
    BatchFn,
    Builder,
    ContenderResult,
    Summary,
    machine_info,
    run_interleaved,
    source_digest,
)
from bench.report import Ratio, Target, header_markdown, markdown_table, serial_fps, write_results

__all__ = ["WORKLOADS", "Workload", "main"]

RESULTS_DIR = Path(__file__).parent / "results"
#: rlcollect's package folder, found without importing it (the parent process stays light)
RLCOLLECT_DIR = Path(importlib.util.find_spec("rlcollect").origin).parent  # type: ignore[union-attr,arg-type]
HAND_TARGET = 0.95  # rlcollect / hand loop, every row
BARE_BUDGET = 1 / 1.1  # DESIGN.md section 3: time beyond env.step + policy under 10 % at 8 envs
HIDDEN = 64


@dataclass(frozen=True)
class Workload:
    """One row: an env id, how many copies step in the process, frames per batch, targets."""

    name: str
    env_id: str
    num_envs: int
    frames_per_batch: int
    policy: str  # for the report
    torchrl_target: float | None = None  # minimum rlcollect / TorchRL, where we promise one

    @property
    def steps(self) -> int:
        """Time steps per batch."""
        return self.frames_per_batch // self.num_envs


WORKLOADS = (
    Workload("cartpole-1", "CartPole-v1", 1, 1000, "MLP 4-64-64-2, argmax", torchrl_target=8.0),
    Workload("cartpole-8", "CartPole-v1", 8, 1024, "MLP 4-64-64-2, argmax", torchrl_target=8.0),
    Workload("pendulum-8", "Pendulum-v1", 8, 1024, "MLP 3-64-64-1, 2 tanh"),
)


def _shape(space: gym.Space[Any]) -> tuple[int, ...]:
    """The space's shape (``()`` for Discrete)."""
    return tuple(space.shape or ())


# -- the policy (same seeded weights in every contender) ------------------------------------------
class Argmax(nn.Module):
    """Greedy discrete action from logits: ``[N, A] -> [N]`` int64."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)


class ScaledTanh(nn.Module):
    """Squash into ``[-scale, scale]``, Pendulum's torque range."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * self.scale


def make_policy(workload: Workload) -> nn.Module:
    """MLP obs-64-64-out with tanh activations, seeded: argmax (Discrete) or 2 tanh (Box)."""
    env = gym.make(workload.env_id)
    obs_dim = int(np.prod(_shape(env.observation_space)))
    torch.manual_seed(0)
    head: list[nn.Module]
    if isinstance(env.action_space, gym.spaces.Discrete):
        head = [nn.Linear(HIDDEN, int(env.action_space.n)), Argmax()]
    else:
        assert isinstance(env.action_space, gym.spaces.Box)
        head = [nn.Linear(HIDDEN, env.action_space.shape[0]), ScaledTanh(float(env.action_space.high[0]))]
    env.close()
    return nn.Sequential(nn.Linear(obs_dim, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), *head)


# -- 1. the physical limit: its two halves apart, and both in one loop ------------------------------------
def _envs_and_policy_actions(workload: Workload) -> tuple[list[gym.Env[Any, Any]], list[list[Any]]]:
    """Seeded envs and one batch of actions that the policy chose for them, recorded before timing.

    Replayed, they give the envs the policy's episode lengths, hence its reset rate: with random
    actions CartPole's episodes last about 22 steps, with this (seeded, untrained) policy about 9,
    and a reset costs more than a step, so random actions would flatter the env's cost.
    """
    envs = [gym.make(workload.env_id) for _ in range(workload.num_envs)]
    obs = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    discrete = isinstance(envs[0].action_space, gym.spaces.Discrete)
    policy = make_policy(workload)
    actions = []
    with torch.inference_mode():
        for _ in range(workload.steps):
            chosen = policy(torch.as_tensor(obs)).numpy()
            actions.append([int(a) if discrete else np.array(a) for a in chosen])
            for i, (env, action) in enumerate(zip(envs, actions[-1], strict=True)):
                obs[i], _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    obs[i], _ = env.reset()
    return envs, actions


def _observation_batch(workload: Workload) -> torch.Tensor:
    """``[num_envs, *obs]`` observations sampled from the env's space."""
    space = gym.make(workload.env_id).observation_space
    space.seed(0)
    return torch.as_tensor(np.stack([space.sample() for _ in range(workload.num_envs)]))


def env_alone(workload: Workload) -> BatchFn:
    """The envs stepped in a bare loop, replaying actions the policy chose (see above)."""
    envs, actions = _envs_and_policy_actions(workload)

    def batch() -> int:
        for step_actions in actions:
            for env, action in zip(envs, step_actions, strict=True):
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()
        return workload.steps * workload.num_envs

    return batch


def policy_alone(workload: Workload) -> BatchFn:
    """The policy's forward on one batch of ``num_envs`` observations, once per time step."""
    policy, obs = make_policy(workload), _observation_batch(workload)

    def batch() -> int:
        with torch.inference_mode():
            for _ in range(workload.steps):
                policy(obs)
        return workload.steps * workload.num_envs

    return batch


def bare_loop(workload: Workload) -> BatchFn:
    """:func:`env_alone` and :func:`policy_alone` alternating in one loop; nothing is stored."""
    envs, actions = _envs_and_policy_actions(workload)
    policy, obs = make_policy(workload), _observation_batch(workload)

    def batch() -> int:
        with torch.inference_mode():
            for step_actions in actions:
                policy(obs)
                for env, action in zip(envs, step_actions, strict=True):
                    _, _, terminated, truncated, _ = env.step(action)
                    if terminated or truncated:
                        env.reset()
        return workload.steps * workload.num_envs

    return batch


# -- 2. the hand-written loop --------------------------------------------------------------------
def hand_loop(workload: Workload) -> BatchFn:
    """What a user writes instead: one env stepped directly, or a ``SyncVectorEnv`` for several."""
    if workload.num_envs == 1:
        return _hand_loop_one_env(workload)
    return _hand_loop_sync_vector_env(workload)


def _hand_loop_one_env(workload: Workload) -> BatchFn:
    """``env.step`` + policy, the step's data stored into preallocated numpy arrays."""
    policy = make_policy(workload)
    env = gym.make(workload.env_id)
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    steps = workload.steps
    observations = np.zeros((steps, *_shape(env.observation_space)), dtype=np.float32)
    actions = np.zeros((steps, *_shape(env.action_space)), dtype=np.int64 if discrete else np.float32)
    rewards = np.zeros(steps, dtype=np.float32)
    terminateds = np.zeros(steps, dtype=bool)
    truncateds = np.zeros(steps, dtype=bool)
    obs, _ = env.reset(seed=0)

    def batch() -> int:
        nonlocal obs
        with torch.inference_mode():
            for t in range(steps):
                observations[t] = obs
                output = policy(torch.from_numpy(obs).unsqueeze(0))[0]
                action: Any = output.item() if discrete else output.numpy()
                actions[t] = action
                obs, reward, terminated, truncated, _ = env.step(action)
                rewards[t] = reward
                terminateds[t] = terminated
                truncateds[t] = truncated
                if terminated or truncated:
                    obs, _ = env.reset()
        return steps

    return batch


def _hand_loop_sync_vector_env(workload: Workload) -> BatchFn:
    """CleanRL's loop: ``SyncVectorEnv`` + policy into ``[T, N, ...]`` arrays.

    Same-step autoreset, as rlcollect's contract (no frame spent on a reset); it is also the
    faster of Gymnasium's two autoreset modes here, so the stricter baseline.
    """
    policy = make_policy(workload)
    envs = gym.vector.SyncVectorEnv(
        [partial(gym.make, workload.env_id)] * workload.num_envs,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    steps, n = workload.steps, workload.num_envs
    observations = np.zeros((steps, n, *_shape(envs.single_observation_space)), dtype=np.float32)
    actions = np.zeros((steps, n, *_shape(envs.single_action_space)), dtype=envs.single_action_space.dtype)
    rewards = np.zeros((steps, n), dtype=np.float32)
    terminateds = np.zeros((steps, n), dtype=bool)
    truncateds = np.zeros((steps, n), dtype=bool)
    obs, _ = envs.reset(seed=0)

    def batch() -> int:
        nonlocal obs
        with torch.inference_mode():
            for t in range(steps):
                observations[t] = obs
                action = policy(torch.from_numpy(obs)).numpy()
                actions[t] = action
                obs, reward, terminated, truncated, _ = envs.step(action)
                rewards[t] = reward
                terminateds[t] = terminated
                truncateds[t] = truncated
        return steps * n

    return batch


# -- 3. TorchRL ------------------------------------------------------------------------------------
def torchrl_collector(workload: Workload) -> BatchFn:
    """TorchRL's ``Collector`` on ``GymEnv`` (a ``SerialEnv`` of them for several envs)."""
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import Collector as TorchRLCollector
    from torchrl.envs import GymEnv, SerialEnv

    def make_env() -> GymEnv:
        # integer actions, as the policy's argmax gives (TorchRL's default is one-hot)
        return GymEnv(workload.env_id, categorical_action_encoding=True)

    env = make_env() if workload.num_envs == 1 else SerialEnv(workload.num_envs, make_env)
    policy = TensorDictModule(make_policy(workload), in_keys=["observation"], out_keys=["action"])
    collector = TorchRLCollector(
        env,
        policy,
        frames_per_batch=workload.frames_per_batch,
        total_frames=-1,
        return_same_td=True,
        auto_register_policy_transforms=False,  # the policy needs no transform; silences a warning
    )
    collector.set_seed(0)
    batches = iter(collector)

    def batch() -> int:
        return next(batches).numel()

    return batch


# -- 4. rlcollect ------------------------------------------------------------------------------------
def _rlcollect(workload: Workload) -> Any:
    from rlcollect import Collector

    return Collector(
        workload.env_id,
        make_policy(workload),
        frames_per_batch=workload.frames_per_batch,
        num_envs=workload.num_envs,
        seed=0,
        return_same_td=True,
    )


def rlcollect_iterator(workload: Workload) -> BatchFn:
    """rlcollect's ``Collector``, iterated as users do (``for batch in collector``)."""
    batches = iter(_rlcollect(workload))

    def batch() -> int:
        return next(batches).numel()

    return batch


def rlcollect_rollout(workload: Workload) -> BatchFn:
    """rlcollect's ``Collector.rollout()``: one batch in place, no iterator around it."""
    collector = _rlcollect(workload)

    def batch() -> int:
        return collector.rollout().numel()

    return batch


CONTENDERS: dict[str, Builder[Workload]] = {
    "env": env_alone,
    "policy": policy_alone,
    "bare": bare_loop,
    "hand": hand_loop,
    "torchrl": torchrl_collector,
    "rlcollect": rlcollect_iterator,
    "rlcollect-rollout": rlcollect_rollout,
}


def _labels(workload: Workload) -> dict[str, str]:
    hand = "env.step + policy" if workload.num_envs == 1 else "SyncVectorEnv + policy"
    envs = "GymEnv" if workload.num_envs == 1 else f"SerialEnv of {workload.num_envs} GymEnv"
    return {
        "limit": "physical limit (env + policy, timed apart)",
        "env": "↳ env alone, replaying the policy's actions",
        "policy": f"↳ policy forward alone, batch {workload.num_envs}",
        "bare": "env + policy alternating in one loop, nothing stored",
        "hand": f"hand loop ({hand}, into numpy arrays)",
        "torchrl": f"TorchRL Collector ({envs})",
        "rlcollect": "**rlcollect Collector, iterator**",
        "rlcollect-rollout": "rlcollect Collector, .rollout()",
    }


# -- analysis and report ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Analysis:
    """One workload's numbers, by clock (``"wall"`` frames/s, ``"cpu"`` frames per CPU second)."""

    fps: dict[str, dict[str, list[float]]]  # clock -> contender (and "limit") -> per repetition
    ratios: dict[str, dict[str, dict[str, Ratio]]]  # clock -> rlcollect variant -> other -> ratio
    targets: dict[str, dict[str, Target]]  # clock -> other contender -> the iterator's target


def analyse(workload: Workload, results: dict[str, ContenderResult]) -> Analysis:
    """Frames/s, the physical limit, rlcollect's ratios to the others and the targets, per clock."""
    fps, ratios, targets = {}, {}, {}
    for clock in ("wall", "cpu"):
        series = {
            name: [s.fps if clock == "wall" else s.cpu_fps for s in result.samples]
            for name, result in results.items()
        }
        series["limit"] = serial_fps(series["env"], series["policy"])
        fps[clock] = series
        ratios[clock] = {
            mine: {
                other: Ratio.of(series[mine], series[other]) for other in ("hand", "torchrl", "bare", "limit")
            }
            for mine in ("rlcollect", "rlcollect-rollout")
        }
        headline = ratios[clock]["rlcollect"]
        targets[clock] = {"hand": Target("rlcollect / hand loop", HAND_TARGET, headline["hand"])}
        if workload.torchrl_target is not None:
            targets[clock]["torchrl"] = Target(
                "rlcollect / TorchRL", workload.torchrl_target, headline["torchrl"]
            )
        if workload.num_envs > 1:
            targets[clock]["bare"] = Target(
                "rlcollect / bare loop (design budget)", BARE_BUDGET, headline["bare"]
            )
    return Analysis(fps, ratios, targets)


def workload_markdown(
    workload: Workload, results: dict[str, ContenderResult], analysis: Analysis, load: tuple[float, float]
) -> str:
    """The two tables of one workload: frames/s and memory per contender; ratios and targets."""
    labels = _labels(workload)
    title = (
        f"### {workload.name}: {workload.env_id}, {workload.num_envs} env(s) in one process, "
        f"{workload.policy}, {workload.frames_per_batch} frames per batch\n\n"
        f"Load average (1 min) when it started / ended: {load[0]:.2f} / {load[1]:.2f}."
    )
    limit = [Summary.of(analysis.fps[clock]["limit"]).format() for clock in ("wall", "cpu")]
    rows = [[labels["limit"], *limit, "", ""]]
    for name, result in results.items():
        rss = f"{result.peak_rss_mb:,.0f}"
        rows.append(
            [labels[name], result.fps.format(), result.cpu_fps.format(), f"{result.frames_per_rep:,}", rss]
        )
    header = ["contender", "frames/s median [min–max]", "frames / CPU-s", "frames / rep", "peak RSS MB"]
    speed = markdown_table(header, rows)
    others = {
        "hand": "hand loop",
        "torchrl": "TorchRL Collector",
        "bare": "bare env + policy loop",
        "limit": "physical limit",
    }
    ratio_rows = []
    for other, label in others.items():
        target = analysis.targets["wall"].get(other)
        met = ""
        if target is not None:
            met = " / ".join("met" if t[other].met else "**missed**" for t in analysis.targets.values())
        ratio_rows.append(
            [
                f"rlcollect / {label}",
                *(
                    analysis.ratios[clock][mine][other].format()
                    for mine in ("rlcollect", "rlcollect-rollout")
                    for clock in ("wall", "cpu")
                ),
                "" if target is None else f"≥ {target.minimum:.2f}",
                met,
            ]
        )
    header = [
        "ratio: median [min–max] of paired reps",
        "iterator, wall",
        "iterator, CPU",
        ".rollout(), wall",
        ".rollout(), CPU",
        "target",
        "iterator: wall / CPU",
    ]
    return f"{title}\n\n{speed}\n\n{markdown_table(header, ratio_rows)}\n"


def _method(repetitions: int, seconds: float, quick: bool) -> str:
    return (
        f"each contender in its own process, torch 1 thread; {repetitions} repetitions of about "
        f"{seconds:g} s each, contenders interleaved, each repetition after a warm-up batch; frames = env "
        "steps summed over envs; median [min–max] over the repetitions. Frames / CPU-s divides by the "
        "process's CPU time instead of wall time: on this shared machine other jobs take CPUs away at "
        "times (see each row's load average), and CPU time is what a quiet machine's wall time would be "
        "for these single-threaded contenders. The physical limit combines the env-alone and "
        "policy-alone repetitions pairwise (1 / (1/env + 1/policy)). A ratio is the median over "
        "repetitions of the ratio of two repetitions that ran side by side, with its min and max. "
        "Targets: rlcollect ≥ 0.95x the hand loop (every row), ≥ 8x TorchRL (cartpole rows); the design "
        "budget (DESIGN.md §3, collector time beyond env.step + policy under 10 % at 8 envs) is read "
        "against the bare loop. Peak RSS: each contender's process (none starts child processes)"
        + (
            "; this quick run forks the contenders from a parent that imported all of them, so their "
            "peak RSS is not comparable."
            if quick
            else "."
        )
    )


def main(argv: list[str] | None = None) -> None:
    """Run the workloads, print the tables, write ``bench/results/single_process[_quick].{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument(
        "--workload",
        action="append",
        choices=[w.name for w in WORKLOADS],
        help="run only this workload (repeatable); default: all",
    )
    parser.add_argument("--repetitions", type=int, help="repetitions per contender (default 11, quick 3)")
    parser.add_argument("--seconds", type=float, help="seconds per repetition (default 1, quick 0.05)")
    args = parser.parse_args(argv)
    repetitions = args.repetitions or (3 if args.quick else 11)
    seconds = args.seconds or (0.05 if args.quick else 1.0)
    workloads = [w for w in WORKLOADS if not args.workload or w.name in args.workload]
    command = "python -m bench.single_process" + (" --quick" if args.quick else "")

    info = machine_info()
    info["rlcollect_sources"] = source_digest(RLCOLLECT_DIR)
    title = "Single-process collection: rlcollect vs hand loop, TorchRL and the physical limit"
    sections = [header_markdown(title, info, command, _method(repetitions, seconds, args.quick))]
    print(sections[0])
    data: dict[str, Any] = {"machine": info, "repetitions": repetitions, "seconds": seconds, "workloads": {}}
    start_method: Literal["spawn", "fork"] = "spawn"
    if args.quick:  # fork workers from a parent that imported everything: no start-up per contender
        import torchrl.collectors  # noqa: F401
        import torchrl.envs  # noqa: F401

        import rlcollect  # noqa: F401

        start_method = "fork"
    for workload in workloads:
        print(f"measuring {workload.name} ...", flush=True)
        digest = source_digest(RLCOLLECT_DIR)  # the code its rlcollect workers are about to import...
        load_start = os.getloadavg()[0]
        results = run_interleaved(
            CONTENDERS, workload, repetitions=repetitions, target_seconds=seconds, start_method=start_method
        )
        if source_digest(RLCOLLECT_DIR) != digest:  # ... unless it changed while they started
            digest = f"{digest} (changed while measuring)"
        load = (load_start, os.getloadavg()[0])
        analysis = analyse(workload, results)
        sections.append(workload_markdown(workload, results, analysis, load))
        print("\n" + sections[-1], flush=True)
        data["workloads"][workload.name] = {
            "workload": asdict(workload),
            "rlcollect_sources": digest,
            "contenders": {name: result.to_json() for name, result in results.items()},
            "load_average_1min": {"start": load[0], "end": load[1]},
            "physical_limit": {
                clock: asdict(Summary.of(fps["limit"])) for clock, fps in analysis.fps.items()
            },
            "ratios": {
                clock: {
                    mine: {other: asdict(ratio) for other, ratio in by_other.items()}
                    for mine, by_other in by_mine.items()
                }
                for clock, by_mine in analysis.ratios.items()
            },
            "targets": {
                clock: {key: {**asdict(t), "met": t.met} for key, t in by_key.items()}
                for clock, by_key in analysis.targets.items()
            },
        }
    digests = {name: row["rlcollect_sources"] for name, row in data["workloads"].items()}
    if len(set(digests.values())) > 1:
        measured = ", ".join(f"{name} {digest}" for name, digest in digests.items())
        warning = f"rlcollect's sources changed during this run; rows measured {measured}"
        print(f"WARNING: {warning}")
        sections.append(f"**Warning: {warning}.**\n")
        data["warning"] = warning
    stem = "single_process_quick" if args.quick else "single_process"
    write_results(RESULTS_DIR, stem, "\n".join(sections), data)


if __name__ == "__main__":
    main()
