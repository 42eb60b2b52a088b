"""Multi-process rows: rlcollect's multi-process collectors against one process, AsyncVectorEnv and TorchRL.

Workloads (``/work/shared/BENCHMARKS.md``): ``cartpole-2x8`` (CartPole-v1, 2 workers x 8 envs, the
seeded MLP 4-64-64-2 argmax of :mod:`bench.single_process`) and ``pong-2x4`` (``ALE/Pong-v5``,
2 workers x 4 envs, uint8 ``[N, 210, 160, 3]`` observations, a small seeded CNN, argmax over 6
actions).

Contenders, each built in its own process and measured interleaved by :mod:`bench.harness` with
``daemon=False, process_tree=True`` (they start processes of their own: repetitions are sized by
wall time, CPU time and memory are the contender's whole process tree's):

- ``env`` and ``policy``: the physical limit of one process, timed apart: all ``N`` envs stepped
  in a bare loop replaying actions the policy chose, and the policy's forward alone on ``N``
  observations. Two cores can at best double it.
- ``single``: rlcollect's single-process ``Collector`` with the same ``N`` envs.
- ``async-vec``: the CleanRL loop on ``gymnasium.vector.AsyncVectorEnv`` (one process per env, as
  Gymnasium does; same-step autoreset, shared memory), the policy in the main process, each
  step's data stored into preallocated numpy arrays.
- ``torchrl-sync`` and ``torchrl-async``: TorchRL 0.14's ``MultiSyncCollector`` and
  ``MultiAsyncCollector``, 2 workers each running a ``SerialEnv`` of the worker's ``GymEnv`` s
  (``categorical_action_encoding=True``), the policy a ``TensorDictModule``, one torch thread.
- ``sync`` and ``async``: rlcollect's ``MultiSyncCollector`` and ``MultiAsyncCollector`` (2
  workers), ``return_same_td=True``, iterated.

Batches: a synchronous batch holds ``frames_per_batch`` frames over all envs; an asynchronous one
(one worker's) holds ``frames_per_batch / num_workers``: the same number of steps per env.

Run from the repository root::

    python -m bench.multi_process            # full run, writes bench/results/multi_process.*
    python -m bench.multi_process --quick    # smoke run, writes bench/results/multi_process_quick.*
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from collections.abc import Callable
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
    Sample,
    Summary,
    machine_info,
    run_interleaved,
    source_digest,
)
from bench.report import Ratio, Target, header_markdown, markdown_table, serial_fps, write_results

__all__ = ["WORKLOADS", "MultiWorkload", "PongCNN", "main", "make_env", "make_policy"]

RESULTS_DIR = Path(__file__).parent / "results"
RLCOLLECT_DIR = Path(importlib.util.find_spec("rlcollect").origin).parent  # type: ignore[union-attr,arg-type]
HIDDEN = 64


@dataclass(frozen=True)
class MultiWorkload:
    """One row: env id, workers x envs per worker, frames per synchronous batch, targets."""

    name: str
    env_id: str
    num_workers: int
    envs_per_worker: int
    frames_per_batch: int  # per synchronous batch, over all workers
    policy: str  # for the report
    torchrl_target: float | None = None  # minimum rlcollect MultiSync / TorchRL MultiSync
    single_target: float | None = None  # minimum rlcollect MultiSync / rlcollect single process

    @property
    def num_envs(self) -> int:
        """Envs over all workers."""
        return self.num_workers * self.envs_per_worker

    @property
    def steps(self) -> int:
        """Time steps per batch (per env)."""
        return self.frames_per_batch // self.num_envs

    @property
    def worker_frames(self) -> int:
        """Frames of one worker's batch (an asynchronous batch)."""
        return self.frames_per_batch // self.num_workers


WORKLOADS = (
    MultiWorkload("cartpole-2x8", "CartPole-v1", 2, 8, 2048, "MLP 4-64-64-2, argmax", torchrl_target=10.0),
    MultiWorkload(
        "pong-2x4", "ALE/Pong-v5", 2, 4, 256, "CNN (uint8 obs, 2 conv + linear), argmax", single_target=1.5
    ),
)


# -- envs and policies (same seeded weights in every contender) ------------------------------------
def register(env_id: str) -> None:
    """Register ale-py's ``ALE/...`` ids with Gymnasium, where ``env_id`` is one (in any process)."""
    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)


def make_env(env_id: str) -> gym.Env[Any, Any]:
    """``gym.make(env_id)``, registering ale-py's ids first (worker processes too)."""
    register(env_id)
    return gym.make(env_id)


class PongCNN(nn.Module):
    """uint8 frames ``[N, 210, 160, 3]`` -> action ``[N]``: every 4th pixel, 2 strided convs, linear.

    About 50-80 us of CPU per frame at batch 4-8 (one thread), a fifth to a third of a Pong step.
    """

    def __init__(self, num_actions: int = 6) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 8, kernel_size=4, stride=2)  # [3, 53, 40] -> [8, 25, 19]
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, stride=2)  # -> [16, 12, 9]
        self.head = nn.Linear(16 * 12 * 9, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs[:, ::4, ::4].permute(0, 3, 1, 2).float().div_(255)
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.head(x.flatten(1)).argmax(-1)


def make_policy(env_id: str) -> nn.Module:
    """The seeded policy: the CNN for Atari, else :mod:`bench.single_process`'s MLP (same weights)."""
    if env_id.startswith("ALE/"):
        return PongCNN()
    from bench.single_process import Workload
    from bench.single_process import make_policy as mlp

    return mlp(Workload(env_id, env_id, 1, 1, "MLP"))


def _frames(batch: Any) -> int:
    """Frames in a yielded batch (a TensorDict ``[envs, steps]``)."""
    return int(batch.numel())


class Batches:
    """A :data:`BatchFn` with a ``close()`` that the harness calls before the contender exits.

    ``warmup_batches``: an asynchronous collector starts each worker's next batch as soon as it
    delivered one, so after the pause between repetitions ``num_workers`` batches wait, ready;
    ``num_workers + 1`` warm-up batches use them up and leave the workers collecting, as in a
    steady run.
    """

    def __init__(
        self, next_batch: Callable[[], int], close: Callable[[], None], warmup_batches: int = 1
    ) -> None:
        self._next_batch, self._close = next_batch, close
        self.warmup_batches = warmup_batches  # read by the harness before each repetition

    def __call__(self) -> int:
        return self._next_batch()

    def close(self) -> None:
        self._close()


# -- 1. the physical limit of one process ----------------------------------------------------------
def _envs_and_policy_actions(workload: MultiWorkload) -> tuple[list[gym.Env[Any, Any]], list[list[int]]]:
    """All ``N`` envs, seeded, and one batch of the policy's actions for them, recorded before timing."""
    envs = [make_env(workload.env_id) for _ in range(workload.num_envs)]
    obs = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    policy = make_policy(workload.env_id)
    actions = []
    with torch.inference_mode():
        for _ in range(workload.steps):
            actions.append([int(a) for a in policy(torch.as_tensor(obs)).numpy()])
            for i, (env, action) in enumerate(zip(envs, actions[-1], strict=True)):
                obs[i], _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    obs[i], _ = env.reset()
    return envs, actions


def env_alone(workload: MultiWorkload) -> BatchFn:
    """All ``N`` envs stepped in a bare loop in this process, replaying the policy's actions."""
    envs, actions = _envs_and_policy_actions(workload)

    def batch() -> int:
        for step_actions in actions:
            for env, action in zip(envs, step_actions, strict=True):
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()
        return workload.frames_per_batch

    return batch


def policy_alone(workload: MultiWorkload) -> BatchFn:
    """The policy's forward on ``N`` observations sampled from the env's space, once per step."""
    space = make_env(workload.env_id).observation_space
    space.seed(0)
    obs = torch.as_tensor(np.stack([space.sample() for _ in range(workload.num_envs)]))
    policy = make_policy(workload.env_id)

    def batch() -> int:
        with torch.inference_mode():
            for _ in range(workload.steps):
                policy(obs)
        return workload.frames_per_batch

    return batch


# -- 2. rlcollect in one process -------------------------------------------------------------------
def rlcollect_single(workload: MultiWorkload) -> BatchFn:
    """rlcollect's single-process ``Collector`` with all ``N`` envs, iterated."""
    from rlcollect import Collector

    collector = Collector(
        workload.env_id,
        make_policy(workload.env_id),
        frames_per_batch=workload.frames_per_batch,
        num_envs=workload.num_envs,
        seed=0,
        return_same_td=True,
    )
    batches = iter(collector)
    return Batches(lambda: _frames(next(batches)), collector.shutdown)


# -- 3. the hand-written loop on AsyncVectorEnv ----------------------------------------------------
def async_vector_env(workload: MultiWorkload) -> BatchFn:
    """CleanRL's loop on ``AsyncVectorEnv`` (a process per env) + policy, into ``[T, N, ...]`` arrays."""
    policy = make_policy(workload.env_id)
    envs = gym.vector.AsyncVectorEnv(
        [partial(make_env, workload.env_id)] * workload.num_envs,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    steps, n = workload.steps, workload.num_envs
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    observations = np.zeros((steps, n, *(obs_space.shape or ())), dtype=obs_space.dtype)
    actions = np.zeros((steps, n, *(act_space.shape or ())), dtype=act_space.dtype)
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

    return Batches(batch, envs.close)


# -- 4. TorchRL ------------------------------------------------------------------------------------
def _torchrl_gym_env(env_id: str) -> Any:
    from torchrl.envs import GymEnv

    register(env_id)
    return GymEnv(env_id, categorical_action_encoding=True)


def _torchrl_serial_env(env_id: str, num_envs: int) -> Any:
    """One TorchRL worker's envs: a ``SerialEnv`` of ``num_envs`` ``GymEnv`` s."""
    from torchrl.envs import SerialEnv

    return SerialEnv(num_envs, partial(_torchrl_gym_env, env_id))


def _torchrl(workload: MultiWorkload, sync: bool) -> BatchFn:
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import MultiAsyncCollector, MultiSyncCollector

    obs_key = "pixels" if workload.env_id.startswith("ALE/") else "observation"
    policy = TensorDictModule(make_policy(workload.env_id), in_keys=[obs_key], out_keys=["action"])
    make = partial(_torchrl_serial_env, workload.env_id, workload.envs_per_worker)
    cls = MultiSyncCollector if sync else MultiAsyncCollector
    collector = cls(
        [make] * workload.num_workers,
        policy,
        frames_per_batch=workload.frames_per_batch if sync else workload.worker_frames,
        total_frames=10**15,  # endless
        num_threads=1,  # the parent's torch threads (workers: num_sub_threads=1)
        auto_register_policy_transforms=False,  # the policy needs no transform; silences a warning
    )
    collector.set_seed(0)
    batches = iter(collector)
    warmup = 1 if sync else workload.num_workers + 1
    return Batches(lambda: _frames(next(batches)), collector.shutdown, warmup)


def torchrl_sync(workload: MultiWorkload) -> BatchFn:
    """TorchRL's ``MultiSyncCollector``: each worker a ``SerialEnv`` of its envs."""
    return _torchrl(workload, sync=True)


def torchrl_async(workload: MultiWorkload) -> BatchFn:
    """TorchRL's ``MultiAsyncCollector``: each worker a ``SerialEnv`` of its envs."""
    return _torchrl(workload, sync=False)


# -- 5. rlcollect's multi-process collectors -------------------------------------------------------
def _rlcollect_multi(workload: MultiWorkload, sync: bool) -> BatchFn:
    from rlcollect import MultiAsyncCollector, MultiSyncCollector

    cls = MultiSyncCollector if sync else MultiAsyncCollector
    collector = cls(
        workload.env_id,
        make_policy(workload.env_id),
        num_workers=workload.num_workers,
        num_envs_per_worker=workload.envs_per_worker,
        frames_per_batch=workload.frames_per_batch if sync else workload.worker_frames,
        seed=0,
        return_same_td=True,
    )
    batches = iter(collector)
    warmup = 1 if sync else workload.num_workers + 1
    return Batches(lambda: _frames(next(batches)), collector.shutdown, warmup)


def rlcollect_sync(workload: MultiWorkload) -> BatchFn:
    """rlcollect's ``MultiSyncCollector``, iterated."""
    return _rlcollect_multi(workload, sync=True)


def rlcollect_async(workload: MultiWorkload) -> BatchFn:
    """rlcollect's ``MultiAsyncCollector``, iterated."""
    return _rlcollect_multi(workload, sync=False)


CONTENDERS: dict[str, Builder[MultiWorkload]] = {
    "env": env_alone,
    "policy": policy_alone,
    "single": rlcollect_single,
    "async-vec": async_vector_env,
    "torchrl-sync": torchrl_sync,
    "torchrl-async": torchrl_async,
    "sync": rlcollect_sync,
    "async": rlcollect_async,
}


def _labels(workload: MultiWorkload) -> dict[str, str]:
    n, w, m = workload.num_envs, workload.num_workers, workload.envs_per_worker
    return {
        "limit": f"physical limit of one process ({n} envs + policy, timed apart)",
        "limit2": f"↳ x {w} processes (ideal on {w} cores)",
        "env": f"↳ {n} envs alone in one process, replaying the policy's actions",
        "policy": f"↳ policy forward alone, batch {n}",
        "single": f"rlcollect Collector, 1 process x {n} envs",
        "async-vec": f"AsyncVectorEnv ({n} env processes) + policy, into numpy arrays",
        "torchrl-sync": f"TorchRL MultiSyncCollector ({w} x SerialEnv of {m} GymEnv)",
        "torchrl-async": f"TorchRL MultiAsyncCollector ({w} x SerialEnv of {m} GymEnv)",
        "sync": f"**rlcollect MultiSyncCollector ({w} x {m} envs)**",
        "async": f"**rlcollect MultiAsyncCollector ({w} x {m} envs)**",
    }


# -- analysis and report ---------------------------------------------------------------------------
#: ratio rows: (other contender, label); each is read for rlcollect's sync and async collectors
OTHERS = {
    "torchrl": "TorchRL Multi{Sync,Async}Collector (same mode)",
    "single": "rlcollect Collector, 1 process",
    "async-vec": "AsyncVectorEnv loop",
    "limit": "physical limit of one process",
}


def quiet_fps(sample: Sample, cores: int) -> float:
    """Frames/s this repetition's CPU work would take on ``cores`` otherwise idle cores (an estimate).

    Time is at least the tree's CPU time spread over the cores, and at least the contender's own
    CPU time plus its busiest descendant's (a synchronous collector's parent works while its
    workers wait, and a worker's steps run one after another). Waits that use no CPU (pipes,
    sleeps, barriers between unevenly loaded workers within a batch) are not seen: an upper bound.
    """
    if sample.cpu_by_process is None:
        return sample.cpu_fps
    own, *children = sample.cpu_by_process
    return sample.frames / max(sample.cpu_seconds / cores, own + max(children, default=0.0))


CLOCKS = ("wall", "cpu", "quiet")
CLOCK_LABELS = {"wall": "wall", "cpu": "CPU", "quiet": "idle-core est."}


@dataclass(frozen=True)
class Analysis:
    """One workload's numbers, by clock: ``"wall"`` frames/s, ``"cpu"`` frames per CPU second of
    the whole tree, ``"quiet"`` the estimate of frames/s on idle cores (:func:`quiet_fps`)."""

    fps: dict[str, dict[str, list[float]]]  # clock -> contender (and "limit") -> per repetition
    ratios: dict[str, dict[str, dict[str, Ratio]]]  # clock -> "sync" / "async" -> other -> ratio
    targets: dict[str, dict[str, Target]]  # clock -> other -> target of MultiSync


def analyse(workload: MultiWorkload, results: dict[str, ContenderResult]) -> Analysis:
    """Frames/s, the physical limit, rlcollect's ratios to the others and the targets, per clock."""
    fps: dict[str, dict[str, list[float]]] = {}
    ratios: dict[str, dict[str, dict[str, Ratio]]] = {}
    targets: dict[str, dict[str, Target]] = {}
    value: dict[str, Callable[[Sample], float]] = {
        "wall": lambda s: s.fps,
        "cpu": lambda s: s.cpu_fps,
        "quiet": lambda s: quiet_fps(s, workload.num_workers),
    }
    for clock in CLOCKS:
        series = {name: [value[clock](s) for s in result.samples] for name, result in results.items()}
        series["limit"] = serial_fps(series["env"], series["policy"])
        fps[clock] = series
        ratios[clock] = {
            mine: {
                other: Ratio.of(series[mine], series[f"torchrl-{mine}" if other == "torchrl" else other])
                for other in OTHERS
            }
            for mine in ("sync", "async")
        }
        targets[clock] = {}
        if workload.torchrl_target is not None:
            targets[clock]["torchrl"] = Target(
                "rlcollect MultiSync / TorchRL MultiSync",
                workload.torchrl_target,
                ratios[clock]["sync"]["torchrl"],
            )
        if workload.single_target is not None and clock != "cpu":  # a speed-up: not per CPU second
            targets[clock]["single"] = Target(
                "rlcollect MultiSync / rlcollect single process",
                workload.single_target,
                ratios[clock]["sync"]["single"],
            )
    return Analysis(fps, ratios, targets)


def _mb(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def workload_markdown(
    workload: MultiWorkload,
    results: dict[str, ContenderResult],
    analysis: Analysis,
    load: tuple[float, float],
) -> str:
    """The two tables of one workload: frames/s and memory per contender; ratios and targets."""
    labels = _labels(workload)
    title = (
        f"### {workload.name}: {workload.env_id}, {workload.num_workers} workers x "
        f"{workload.envs_per_worker} envs, {workload.policy}, "
        f"{workload.frames_per_batch} frames per "
        f"synchronous batch ({workload.worker_frames} per asynchronous one), "
        f"{workload.steps} steps per env\n\n"
        f"Load average (1 min) when it started / ended: {load[0]:.2f} / {load[1]:.2f}."
    )
    limit = {clock: Summary.of(analysis.fps[clock]["limit"]) for clock in CLOCKS}
    w = workload.num_workers
    twice = {c: Summary(w * limit[c].median, w * limit[c].min, w * limit[c].max) for c in ("wall", "quiet")}
    blank = [""] * 7
    rows = [
        [labels["limit"], limit["wall"].format(), limit["cpu"].format(), limit["quiet"].format(), *blank],
        [labels["limit2"], twice["wall"].format(), "", twice["quiet"].format(), *blank],
    ]
    for name, result in results.items():
        quiet = Summary.of(analysis.fps["quiet"][name])
        cores = Summary.of([s.cpu_seconds / s.seconds for s in result.samples])
        waits = [
            s.runqueue_wait_seconds / s.seconds for s in result.samples if s.runqueue_wait_seconds is not None
        ]
        rows.append(
            [
                labels[name],
                result.fps.format(),
                result.cpu_fps.format(),
                quiet.format(),
                f"{cores.median:.2f}",
                f"{Summary.of(waits).median:.2f}" if waits else "",
                f"{result.frames_per_rep:,}",
                str(result.processes or ""),
                _mb(result.tree_rss_mb),
                _mb(result.tree_pss_mb),
                _mb(result.peak_rss_mb),
            ]
        )
    header = [
        "contender",
        "frames/s median [min–max]",
        "frames / CPU-s (whole tree)",
        f"frames/s on {w} idle cores (estimate)",
        "CPUs used (CPU-s / s)",
        "waiting for a CPU (s / s)",
        "frames / rep",
        "processes",
        "peak RSS MB (Σ VmRSS, sampled)",
        "peak PSS MB (Σ Pss, sampled)",
        "Σ VmHWM MB",
    ]
    speed = markdown_table(header, rows)
    ratio_rows = []
    for other, label in OTHERS.items():
        target = analysis.targets["wall"].get(other)
        met = ""
        if target is not None:
            met = " / ".join(
                f"{CLOCK_LABELS[clock]}: " + ("met" if t[other].met else "**missed**")
                for clock, t in analysis.targets.items()
                if other in t
            )
        ratio_rows.append(
            [
                f"rlcollect / {label}",
                *(
                    analysis.ratios[clock][mine][other].format()
                    for mine in ("sync", "async")
                    for clock in CLOCKS
                ),
                "" if target is None else f"MultiSync ≥ {target.minimum:.2f}",
                met,
            ]
        )
    header = [
        "ratio: median [min–max] of paired reps",
        *(
            f"{mode}, {clock}"
            for mode in ("MultiSync", "MultiAsync")
            for clock in ("wall", "CPU", "idle-core est.")
        ),
        "target",
        "met (wall / CPU / idle-core est.)",
    ]
    return f"{title}\n\n{speed}\n\n{markdown_table(header, ratio_rows)}\n"


def _method(repetitions: int, seconds: float, quick: bool) -> str:
    return (
        "each contender in its own (non-daemonic) process, torch 1 thread in every process; "
        f"{repetitions} "
        f"repetitions of about {seconds:g} s (wall clock) each, contenders interleaved, each "
        "repetition after "
        "a warm-up batch, and after the previous contender's process tree went idle (an asynchronous "
        "collector's workers finish a batch they started ahead); frames = env steps summed over envs; median "
        "[min–max] over the repetitions. Frames / CPU-s divides by the CPU time (user + system, from "
        "/proc/<pid>/stat) of the contender's whole process tree, its workers included: the work each frame "
        "costs, whichever process does it (a speed-up from more processes shows in frames/s, not here). The "
        "physical limit of one process combines the env-alone and policy-alone repetitions pairwise "
        "(1 / (1/env + 1/policy)). A ratio is the median over repetitions of the ratio of two repetitions "
        "that ran side by side, with its min and max. Targets: rlcollect MultiSync ≥ 10x TorchRL MultiSync "
        "on cartpole-2x8, ≥ 1.5x rlcollect's single-process Collector on pong-2x4 (frames/s: a speed-up). "
        "Memory of the contender's process tree (the contender and all its descendants, from /proc): peak "
        "RSS = the largest sum of VmRSS over the tree, sampled by the harness every 0.2 s while repetitions "
        "ran; peak PSS likewise with Pss (smaps_rollup), which charges shared pages "
        "(shared-memory batch "
        "slots, copy-on-write pages after fork) once in all, the tree's actual footprint; "
        "Σ VmHWM = the sum of "
        "every process's own peak since it started, an upper bound that counts shared pages once per process"
        + (
            ". This quick run forks the contenders from a parent that imported all of them, so their memory "
            "is not comparable."
            if quick
            else "."
        )
    )


def main(argv: list[str] | None = None) -> None:
    """Run the workloads, print the tables, write ``bench/results/multi_process[_quick].{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument(
        "--workload",
        action="append",
        choices=[w.name for w in WORKLOADS],
        help="run only this workload (repeatable); default: all",
    )
    parser.add_argument(
        "--contender",
        action="append",
        choices=list(CONTENDERS),
        help="run only this contender (repeatable; for debugging: no ratios then)",
    )
    parser.add_argument("--repetitions", type=int, help="repetitions per contender (default 7, quick 3)")
    parser.add_argument("--seconds", type=float, help="seconds per repetition (default 2, quick 0.5)")
    args = parser.parse_args(argv)
    repetitions = args.repetitions or (3 if args.quick else 7)
    seconds = args.seconds or (0.5 if args.quick else 2.0)
    workloads = [w for w in WORKLOADS if not args.workload or w.name in args.workload]
    contenders = {k: v for k, v in CONTENDERS.items() if not args.contender or k in args.contender}
    command = "python -m bench.multi_process" + (" --quick" if args.quick else "")

    info = machine_info()
    info["rlcollect_sources"] = source_digest(RLCOLLECT_DIR)
    title = "Multi-process collection: rlcollect vs one process, AsyncVectorEnv and TorchRL"
    sections = [header_markdown(title, info, command, _method(repetitions, seconds, args.quick))]
    print(sections[0])
    data: dict[str, Any] = {"machine": info, "repetitions": repetitions, "seconds": seconds, "workloads": {}}
    start_method: Literal["spawn", "fork"] = "spawn"
    if args.quick:  # fork contenders from a parent that imported everything: no start-up per contender
        import torchrl.collectors  # noqa: F401
        import torchrl.envs  # noqa: F401

        import rlcollect  # noqa: F401

        start_method = "fork"
    for workload in workloads:
        print(f"measuring {workload.name} ...", flush=True)
        digest = source_digest(RLCOLLECT_DIR)
        load_start = os.getloadavg()[0]
        results = run_interleaved(
            contenders,
            workload,
            repetitions=repetitions,
            target_seconds=seconds,
            start_method=start_method,
            daemon=False,
            process_tree=True,
        )
        if source_digest(RLCOLLECT_DIR) != digest:
            digest = f"{digest} (changed while measuring)"
        load = (load_start, os.getloadavg()[0])
        entry: dict[str, Any] = {
            "workload": asdict(workload),
            "rlcollect_sources": digest,
            "contenders": {name: result.to_json() for name, result in results.items()},
            "load_average_1min": {"start": load[0], "end": load[1]},
        }
        if set(contenders) == set(CONTENDERS):
            analysis = analyse(workload, results)
            sections.append(workload_markdown(workload, results, analysis, load))
            for name in results:
                entry["contenders"][name]["quiet_fps"] = asdict(Summary.of(analysis.fps["quiet"][name]))
            entry["physical_limit_one_process"] = {
                clock: asdict(Summary.of(fps["limit"])) for clock, fps in analysis.fps.items()
            }
            entry["ratios"] = {
                clock: {
                    mine: {other: asdict(ratio) for other, ratio in by_other.items()}
                    for mine, by_other in by_mine.items()
                }
                for clock, by_mine in analysis.ratios.items()
            }
            entry["targets"] = {
                clock: {key: {**asdict(t), "met": t.met} for key, t in by_key.items()}
                for clock, by_key in analysis.targets.items()
            }
        else:
            rows = [[n, r.fps.format(), r.cpu_fps.format(), _mb(r.tree_pss_mb)] for n, r in results.items()]
            sections.append(
                markdown_table(["contender", "frames/s", "frames / CPU-s", "PSS MB"], rows) + "\n"
            )
        print("\n" + sections[-1], flush=True)
        data["workloads"][workload.name] = entry
    digests = {name: row["rlcollect_sources"] for name, row in data["workloads"].items()}
    if len(set(digests.values())) > 1:
        measured = ", ".join(f"{name} {digest}" for name, digest in digests.items())
        warning = f"rlcollect's sources changed during this run; rows measured {measured}"
        print(f"WARNING: {warning}")
        sections.append(f"**Warning: {warning}.**\n")
        data["warning"] = warning
    if set(contenders) != set(CONTENDERS):
        print("(a subset of contenders: nothing written)")
        return
    stem = "multi_process_quick" if args.quick else "multi_process"
    write_results(RESULTS_DIR, stem, "\n".join(sections), data)


if __name__ == "__main__":
    main()
