"""Scaling: how rlcollect's cost grows with envs per process, workers and observation size.

Three series (``/work/shared/BENCHMARKS.md``, "Scaling"), each one interleaved run of
:mod:`bench.harness` (contenders in their own processes, torch 1 thread, median [min–max]):

- ``envs``: envs per process 1, 8, 32, 128 on CartPole-v1 with the MLP of
  :mod:`bench.single_process`: rlcollect's ``Collector`` and the hand loop (one env stepped
  directly for 1 env, CleanRL's ``SyncVectorEnv`` loop otherwise).
- ``workers``: 1 vs 2 worker processes of rlcollect's ``MultiSyncCollector``, at 8 CartPole envs and
  at 4 Pong envs per worker (the rows of :mod:`bench.multi_process`): does the second worker give
  close to 2x? Read with the estimate for idle cores (:func:`bench.multi_process.quiet_fps`): on a
  shared machine the kernel gives a session's processes together a fixed share of the CPUs.
- ``obs``: observation size 16 B (4 float32) to 100 KB, in a synthetic env whose step costs almost
  nothing (so the cost of moving observations shows), 8 envs: rlcollect's ``Collector`` in one
  process and its ``MultiSyncCollector`` with 2 workers x 4 envs (observations through shared
  memory); the policy reads one number of the observation.

Run from the repository root::

    python -m bench.scaling            # writes bench/results/scaling.{md,json} and scaling_*.png
    python -m bench.scaling --quick    # smoke run: bench/results/scaling_quick.* (and its PNGs)
"""

from __future__ import annotations

import argparse
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
from bench.multi_process import RLCOLLECT_DIR, Batches, _frames, make_policy, quiet_fps
from bench.report import header_markdown, markdown_table, write_results

__all__ = ["SyntheticObsEnv", "main"]

RESULTS_DIR = Path(__file__).parent / "results"
ENVS_PER_PROCESS = (1, 8, 32, 128)
OBS_BYTES = (16, 1024, 10 * 1024, 100 * 1024)
CORES = 2  # the cores of the machine the idle-core estimate is for


# -- envs per process ------------------------------------------------------------------------------
def _cartpole(num_envs: int) -> Any:
    from bench.single_process import Workload

    frames = max(1024, 16 * num_envs)  # at least 16 steps per batch
    return Workload(f"cartpole-{num_envs}", "CartPole-v1", num_envs, frames - frames % num_envs, "MLP")


def rlcollect_envs(num_envs: int, _: Any) -> BatchFn:
    """rlcollect's ``Collector`` with ``num_envs`` CartPoles (the contender of bench.single_process)."""
    from bench.single_process import rlcollect_iterator

    return rlcollect_iterator(_cartpole(num_envs))


def hand_envs(num_envs: int, _: Any) -> BatchFn:
    """The hand loop with ``num_envs`` CartPoles (the contender of bench.single_process)."""
    from bench.single_process import hand_loop

    return hand_loop(_cartpole(num_envs))


# -- workers ----------------------------------------------------------------------------------------
def rlcollect_workers(env_id: str, num_workers: int, envs_per_worker: int, steps: int, _: Any) -> BatchFn:
    """rlcollect's ``MultiSyncCollector``, ``num_workers`` x ``envs_per_worker`` envs."""
    from rlcollect import MultiSyncCollector

    collector = MultiSyncCollector(
        env_id,
        make_policy(env_id),
        num_workers=num_workers,
        num_envs_per_worker=envs_per_worker,
        frames_per_batch=num_workers * envs_per_worker * steps,
        seed=0,
        return_same_td=True,
    )
    batches = iter(collector)
    return Batches(lambda: _frames(next(batches)), collector.shutdown)


# -- observation size --------------------------------------------------------------------------------
class SyntheticObsEnv(gym.Env[np.ndarray, int]):
    """An env whose step costs almost nothing: observations of ``obs_bytes`` bytes (float32).

    The observation is a preallocated array with the step count written in its first element;
    episodes last 100 steps; 2 actions.
    """

    def __init__(self, obs_bytes: int) -> None:
        size = max(1, obs_bytes // 4)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self.action_space = gym.spaces.Discrete(2)  # type: ignore[assignment]
        self._obs = np.zeros(size, dtype=np.float32)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._obs[0] = 0.0
        return self._obs, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        self._obs[0] = self._t
        return self._obs, 1.0, False, self._t >= 100, {}


class FirstFeature(nn.Module):
    """A policy that reads one number per observation: ``[N, D] -> [N]`` actions."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(1, 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.linear(obs[:, :1]).argmax(-1)


OBS_STEPS = 32  # steps per batch and env


def rlcollect_obs(obs_bytes: int, num_workers: int, _: Any) -> BatchFn:
    """8 synthetic envs: ``Collector`` in one process (``num_workers`` 0) or ``MultiSyncCollector``."""
    from rlcollect import Collector, MultiSyncCollector

    make_env = partial(SyntheticObsEnv, obs_bytes)
    collector: Any
    if num_workers == 0:
        collector = Collector(
            make_env, FirstFeature(), frames_per_batch=8 * OBS_STEPS, num_envs=8, seed=0, return_same_td=True
        )
    else:
        collector = MultiSyncCollector(
            make_env,
            FirstFeature(),
            num_workers=num_workers,
            num_envs_per_worker=8 // num_workers,
            frames_per_batch=8 * OBS_STEPS,
            seed=0,
            return_same_td=True,
        )
    batches = iter(collector)
    return Batches(lambda: _frames(next(batches)), collector.shutdown)


# -- the series ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One contender of a series: its line in the plot and its x."""

    line: str
    x: float
    builder: Builder[Any]


def _series() -> dict[str, tuple[str, list[Point], bool]]:
    """name -> (x axis label, points, process tree?)."""
    envs = [Point("rlcollect Collector", n, partial(rlcollect_envs, n)) for n in ENVS_PER_PROCESS]
    envs += [
        Point("hand loop (env.step / SyncVectorEnv)", n, partial(hand_envs, n)) for n in ENVS_PER_PROCESS
    ]
    workers = [
        Point("CartPole, 8 envs per worker", w, partial(rlcollect_workers, "CartPole-v1", w, 8, 128))
        for w in (1, 2)
    ] + [
        Point("Pong, 4 envs per worker", w, partial(rlcollect_workers, "ALE/Pong-v5", w, 4, 32))
        for w in (1, 2)
    ]
    obs = [
        Point("rlcollect Collector, 1 process x 8 envs", b, partial(rlcollect_obs, b, 0)) for b in OBS_BYTES
    ]
    obs += [
        Point("rlcollect MultiSyncCollector, 2 x 4 envs", b, partial(rlcollect_obs, b, 2)) for b in OBS_BYTES
    ]
    return {
        "envs": ("envs per process (CartPole-v1)", envs, False),
        "workers": ("worker processes (MultiSyncCollector)", workers, True),
        "obs": ("observation size (bytes)", obs, True),
    }


def _name(point: Point) -> str:
    return f"{point.line} @ {point.x:g}"


def _summaries(result: ContenderResult) -> dict[str, Summary]:
    return {
        "wall": result.fps,
        "cpu": result.cpu_fps,
        "quiet": Summary.of([quiet_fps(s, CORES) for s in result.samples]),
    }


def _plot(
    name: str, xlabel: str, points: list[Point], stats: dict[str, dict[str, Summary]], path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("wall", "frames/s (wall clock, shared machine)"),
        ("cpu", "frames per CPU-second (whole tree)"),
    ]
    if name != "envs":
        panels.append(("quiet", f"frames/s on {CORES} idle cores (estimate)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2))
    lines = list(dict.fromkeys(p.line for p in points))
    for ax, (clock, title) in zip(axes, panels, strict=True):
        for line in lines:
            mine = [p for p in points if p.line == line]
            xs = [p.x for p in mine]
            med = np.array([stats[_name(p)][clock].median for p in mine])
            low = np.array([stats[_name(p)][clock].min for p in mine])
            high = np.array([stats[_name(p)][clock].max for p in mine])
            ax.errorbar(xs, med, yerr=[med - low, high - med], marker="o", capsize=3, label=line)
        if name in ("envs", "obs"):
            ax.set_xscale("log", base=2 if name == "envs" else 10)
        if name == "workers":
            ax.set_xticks([1, 2])
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"rlcollect scaling: {xlabel} — median, bars min–max", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> None:
    """Run the series, print their tables, write the results and the plots."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--series", action="append", choices=["envs", "workers", "obs"], help="default: all")
    parser.add_argument("--repetitions", type=int, help="repetitions per contender (default 5, quick 2)")
    parser.add_argument("--seconds", type=float, help="seconds per repetition (default 1.5, quick 0.3)")
    args = parser.parse_args(argv)
    repetitions = args.repetitions or (2 if args.quick else 5)
    seconds = args.seconds or (0.3 if args.quick else 1.5)
    command = "python -m bench.scaling" + (" --quick" if args.quick else "")
    info = machine_info()
    info["rlcollect_sources"] = source_digest(RLCOLLECT_DIR)
    method = (
        f"each contender in its own spawned process, torch 1 thread per process; {repetitions} "
        f"repetitions of about {seconds:g} s, contenders of a series interleaved, each after a warm-up "
        "batch; frames = env steps summed over envs; median [min–max]. Multi-process series (workers, "
        "obs) run with the whole process tree measured (CPU time of all processes; see "
        "bench/multi_process.md). The idle-core estimate is frames / max(tree CPU / "
        f"{CORES}, own CPU + busiest worker's CPU) per repetition: what the CPU work would take on "
        f"{CORES} idle cores, an upper bound (waits that use no CPU are not seen)."
    )
    sections = [header_markdown("Scaling of rlcollect's collectors", info, command, method)]
    print(sections[0])
    data: dict[str, Any] = {"machine": info, "repetitions": repetitions, "seconds": seconds, "series": {}}
    suffix = "_quick" if args.quick else ""
    for name, (xlabel, points, tree) in _series().items():
        if args.series and name not in args.series:
            continue
        print(f"measuring series {name} ...", flush=True)
        load_start = os.getloadavg()[0]
        start_method: Literal["spawn", "fork"] = "spawn"
        results = run_interleaved(
            {_name(p): p.builder for p in points},
            None,
            repetitions=repetitions,
            target_seconds=seconds,
            start_method=start_method,
            daemon=not tree,
            process_tree=tree,
        )
        load = (load_start, os.getloadavg()[0])
        stats = {key: _summaries(result) for key, result in results.items()}
        header = [xlabel, "contender", "frames/s median [min–max]", "frames / CPU-s"]
        header += (
            [f"frames/s on {CORES} idle cores (estimate)", "peak PSS MB (tree)"] if tree else ["peak RSS MB"]
        )
        rows = []
        for p in points:
            r = results[_name(p)]
            s = stats[_name(p)]
            row = [f"{p.x:,g}", p.line, s["wall"].format(), s["cpu"].format()]
            if tree:
                row += [s["quiet"].format(), "" if r.tree_pss_mb is None else f"{r.tree_pss_mb:,.0f}"]
            else:
                row += [f"{r.peak_rss_mb:,.0f}"]
            rows.append(row)
        plot = RESULTS_DIR / f"scaling_{name}{suffix}.png"
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        _plot(name, xlabel, points, stats, plot)
        sections.append(
            f"### {name}: {xlabel}\n\nLoad average (1 min) when it started / ended: "
            f"{load[0]:.2f} / {load[1]:.2f}."
            f"\n\n![{name}]({plot.name})\n\n{markdown_table(header, rows)}\n"
        )
        print("\n" + sections[-1], flush=True)
        data["series"][name] = {
            "x": xlabel,
            "load_average_1min": {"start": load[0], "end": load[1]},
            "points": [
                {
                    "line": p.line,
                    "x": p.x,
                    **{k: asdict(v) for k, v in stats[_name(p)].items()},
                    "result": results[_name(p)].to_json(),
                }
                for p in points
            ],
        }
    write_results(RESULTS_DIR, f"scaling{suffix}", "\n".join(sections), data)


if __name__ == "__main__":
    main()
