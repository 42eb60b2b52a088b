"""Single-process rows: rlcollect against the hand-written loop, TorchRL and the physical limit.

Workloads (``/work/shared/BENCHMARKS.md``): ``cartpole-1`` (CartPole-v1, 1 env), ``cartpole-8``
(8 envs in one process) and ``pendulum-8`` (Pendulum-v1, 8 envs), each with a seeded MLP policy.

Contenders, each built in its own process and measured interleaved by :mod:`bench.harness`:

- ``env`` and ``policy``: the physical limit's two halves, timed separately: the envs stepped in
  a bare loop with pre-drawn random actions, and the policy's forward alone on a batch of
  ``num_envs`` observations. A frame costs at least its env step plus its share of a forward.
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
import json
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

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
    markdown_table,
    run_interleaved,
)

__all__ = ["WORKLOADS", "Workload", "main"]

RESULTS_DIR = Path(__file__).parent / "results"
HAND_TARGET = 0.95  # rlcollect / hand loop, every row
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


# -- 1. the physical limit, in two halves ------------------------------------------------------
def env_alone(workload: Workload) -> BatchFn:
    """The envs stepped in a bare loop with random actions drawn before timing."""
    envs = [gym.make(workload.env_id) for _ in range(workload.num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
        env.action_space.seed(i)
    discrete = isinstance(envs[0].action_space, gym.spaces.Discrete)
    actions = [
        [int(env.action_space.sample()) if discrete else env.action_space.sample() for env in envs]
        for _ in range(workload.steps)
    ]

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
    policy = make_policy(workload)
    space = gym.make(workload.env_id).observation_space
    space.seed(0)
    obs = torch.as_tensor(np.stack([space.sample() for _ in range(workload.num_envs)]))

    def batch() -> int:
        with torch.inference_mode():
            for _ in range(workload.steps):
                policy(obs)
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
    "hand": hand_loop,
    "torchrl": torchrl_collector,
    "rlcollect": rlcollect_iterator,
    "rlcollect-rollout": rlcollect_rollout,
}


def _labels(workload: Workload) -> dict[str, str]:
    hand = "env.step + policy" if workload.num_envs == 1 else "SyncVectorEnv + policy"
    envs = "GymEnv" if workload.num_envs == 1 else f"SerialEnv of {workload.num_envs} GymEnv"
    return {
        "limit": "physical limit (env + policy)",
        "env": "↳ env alone, random actions",
        "policy": f"↳ policy forward alone, batch {workload.num_envs}",
        "hand": f"hand loop ({hand})",
        "torchrl": f"TorchRL Collector ({envs})",
        "rlcollect": "**rlcollect Collector, iterator**",
        "rlcollect-rollout": "rlcollect Collector, .rollout()",
    }


# -- derived numbers ---------------------------------------------------------------------------------
def physical_limit(env: ContenderResult, policy: ContenderResult) -> list[float]:
    """Per repetition pair: frames/s if a frame cost only its env step and its share of a forward."""
    return [1 / (1 / e.fps + 1 / p.fps) for e, p in zip(env.samples, policy.samples, strict=True)]


@dataclass(frozen=True)
class Ratio:
    """``value``: ratio of the medians; ``low`` / ``high``: extremes of the per-repetition ratios
    (repetition ``i`` of both contenders ran next to each other)."""

    value: float
    low: float
    high: float

    @classmethod
    def of(cls, numerator: list[float], denominator: list[float]) -> Ratio:
        """Ratio of two contenders' frames/s, repetition by repetition."""
        paired = [a / b for a, b in zip(numerator, denominator, strict=True)]
        return cls(Summary.of(numerator).median / Summary.of(denominator).median, min(paired), max(paired))

    def format(self) -> str:
        return f"{self.value:.2f} [{self.low:.2f}–{self.high:.2f}]"


@dataclass(frozen=True)
class Target:
    """A promise: rlcollect / ``versus`` >= ``minimum``."""

    versus: str
    minimum: float
    ratio: Ratio

    @property
    def met(self) -> bool:
        return self.ratio.value >= self.minimum


def analyse(workload: Workload, results: dict[str, ContenderResult]) -> dict[str, Any]:
    """Frames/s per contender, the physical limit, the ratios and the targets of one workload."""
    fps = {name: [s.fps for s in result.samples] for name, result in results.items()}
    fps["limit"] = physical_limit(results["env"], results["policy"])
    ratios = {
        mine: {other: Ratio.of(fps[mine], fps[other]) for other in ("hand", "torchrl", "limit")}
        for mine in ("rlcollect", "rlcollect-rollout")
    }
    targets = [Target("hand", HAND_TARGET, ratios["rlcollect"]["hand"])]
    if workload.torchrl_target is not None:
        targets.append(Target("torchrl", workload.torchrl_target, ratios["rlcollect"]["torchrl"]))
    return {"fps": fps, "ratios": ratios, "targets": targets}


# -- reports -----------------------------------------------------------------------------------------
def workload_markdown(
    workload: Workload, results: dict[str, ContenderResult], analysis: dict[str, Any]
) -> str:
    """The two tables of one workload: frames/s and memory per contender; ratios and targets."""
    labels = _labels(workload)
    title = (
        f"### {workload.name}: {workload.env_id}, {workload.num_envs} env(s) in one process, "
        f"{workload.policy}, {workload.frames_per_batch} frames per batch"
    )
    rows = [[labels["limit"], Summary.of(analysis["fps"]["limit"]).format(), "", ""]]
    for name, result in results.items():
        rows.append(
            [labels[name], result.fps.format(), f"{result.frames_per_rep:,}", f"{result.peak_rss_mb:,.0f}"]
        )
    speed = markdown_table(["contender", "frames/s median [min–max]", "frames / rep", "peak RSS MB"], rows)
    names = {"hand": "hand loop", "torchrl": "TorchRL Collector", "limit": "physical limit"}
    minimums = {t.versus: t for t in analysis["targets"]}
    ratio_rows = []
    for other, label in names.items():
        target = minimums.get(other)
        ratio_rows.append(
            [
                f"rlcollect / {label}",
                analysis["ratios"]["rlcollect"][other].format(),
                analysis["ratios"]["rlcollect-rollout"][other].format(),
                f"≥ {target.minimum:g}" if target else "",
                ("met" if target.met else "**MISSED**") if target else "",
            ]
        )
    ratios = markdown_table(
        ["ratio (medians) [paired min–max]", "iterator", ".rollout()", "target", "iterator meets it"],
        ratio_rows,
    )
    return f"{title}\n\n{speed}\n\n{ratios}\n"


def header_markdown(info: dict[str, str], args: argparse.Namespace) -> str:
    """Title, date, machine and method."""
    versions = ", ".join(
        f"{k} {info[k]}" for k in ("python", "torch", "numpy", "gymnasium", "tensordict", "torchrl")
    )
    command = "python -m bench.single_process" + (" --quick" if args.quick else "")
    return (
        "# Single-process collection: rlcollect vs hand loop, TorchRL and the physical limit\n\n"
        f"- date: {info['date']}\n"
        f"- machine: {info['nproc']} CPUs (`nproc`), {info['cpu']}\n"
        f"- versions: {versions}, rlcollect {info['rlcollect']}\n"
        f"- command: `{command}`\n"
        f"- method: each contender in its own process, torch 1 thread; {args.repetitions} repetitions of "
        f"about {args.seconds:g} s each, contenders interleaved, each repetition after a warm-up batch; "
        "frames = env steps summed over envs; median [min–max] over the repetitions. The physical limit "
        "combines the env-alone and policy-alone repetitions pairwise (1 / (1/env + 1/policy)). Peak RSS "
        "is each contender's process (no contender here starts child processes).\n"
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
    parser.add_argument(
        "--repetitions", type=int, help="timed repetitions per contender (default 5, quick 3)"
    )
    parser.add_argument("--seconds", type=float, help="seconds per repetition (default 2, quick 0.05)")
    args = parser.parse_args(argv)
    args.repetitions = args.repetitions or (3 if args.quick else 5)
    args.seconds = args.seconds or (0.05 if args.quick else 2.0)
    workloads = [w for w in WORKLOADS if not args.workload or w.name in args.workload]

    info = machine_info()
    sections = [header_markdown(info, args)]
    workload_reports: dict[str, Any] = {}
    print(sections[0])
    for workload in workloads:
        print(f"measuring {workload.name} ...", flush=True)
        results = run_interleaved(
            CONTENDERS, workload, repetitions=args.repetitions, target_seconds=args.seconds
        )
        analysis = analyse(workload, results)
        sections.append(workload_markdown(workload, results, analysis))
        print("\n" + sections[-1], flush=True)
        workload_reports[workload.name] = {
            "workload": asdict(workload),
            "contenders": {name: result.to_json() for name, result in results.items()},
            "physical_limit_fps": asdict(Summary.of(analysis["fps"]["limit"])),
            "ratios": {
                mine: {other: asdict(r) for other, r in by_other.items()}
                for mine, by_other in analysis["ratios"].items()
            },
            "targets": [{**asdict(t), "met": t.met} for t in analysis["targets"]],
        }

    stem = "single_process_quick" if args.quick else "single_process"
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / f"{stem}.md").write_text("\n".join(sections))
    report = {"machine": info, "workloads": workload_reports}
    (RESULTS_DIR / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS_DIR / stem}.md and .json")


if __name__ == "__main__":
    main()
