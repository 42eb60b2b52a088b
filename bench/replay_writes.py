"""Writing into a replay buffer from 2 workers directly vs yielding to the parent, which extends.

Both contenders are ``MultiSyncCollector`` (2 workers x M envs, the same env and policy) feeding a
``ReplayBuffer``: in "workers write" the buffer is shared and each worker extends it with its own
rows (nothing crosses to the parent but a small message); in "parent extends" the collector
yields each batch (no copy: ``return_same_td``) and the parent calls ``extend``. Repetitions are
interleaved (A B A B ...), each after a warm-up batch; frames/s is the median over repetitions.
Besides frames/s, the parent's CPU time per frame: what collection costs the learner's process.

Run: ``python -m bench.replay_writes [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch

from rlcollect import MultiSyncCollector, ReplayBuffer

RESULTS = Path(__file__).parent / "results"


class CartPolePolicy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).argmax(-1)


class PongPolicy(torch.nn.Module):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs[..., 0].float().mean((-1, -2)) > 100).long()  # cheap: the writes are measured


WORKLOADS = {  # name: (env id, policy, envs per worker, frames per batch, buffer capacity)
    "cartpole-2x8": ("CartPole-v1", CartPolePolicy, 8, 2048, 1_000_000),
    "pong-2x4": ("ALE/Pong-v5", PongPolicy, 4, 256, 20_000),
}


def contender(workload: str, workers_write: bool) -> tuple[Callable[[], int], Callable[[], None]]:
    """(collect one batch -> frames, shutdown) for one contender."""
    env, policy, envs, frames, capacity = WORKLOADS[workload]
    buffer = ReplayBuffer(capacity, storage="shared" if workers_write else "memory")
    collector = MultiSyncCollector(
        env, policy(), num_workers=2, num_envs_per_worker=envs, frames_per_batch=frames, seed=0,
        return_same_td=True, replay_buffer=buffer if workers_write else None,
    )

    def one_batch() -> int:
        batch = collector.next()
        if not workers_write:
            assert batch is not None
            buffer.extend(batch)
        return collector.frames_per_batch

    return one_batch, collector.shutdown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 repetitions of few batches")
    args = parser.parse_args()
    torch.set_num_threads(1)
    repetitions, batches = (2, 3) if args.quick else (5, 10)
    results: dict[str, dict[str, list[float]]] = {}
    for workload in WORKLOADS:
        runs = {name: contender(workload, name == "workers write")
                for name in ("workers write", "parent extends")}
        for one_batch, _ in runs.values():
            one_batch()  # warm-up
        samples: dict[str, list[float]] = {name: [] for name in runs}
        parent_cpu: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(repetitions):
            for name, (one_batch, _) in runs.items():
                one_batch()  # warm-up batch before each repetition
                start, cpu, frames = time.perf_counter(), time.process_time(), 0
                for _ in range(batches):
                    frames += one_batch()
                samples[name].append(frames / (time.perf_counter() - start))
                parent_cpu[name].append(1e6 * (time.process_time() - cpu) / frames)
        for _, shutdown in runs.values():
            shutdown()
        results[workload] = samples
        results[workload + " parent CPU us/frame"] = parent_cpu
    lines = [
        "# Replay writes: 2 workers extending a shared buffer vs the parent extending",
        "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; command: `python -m bench.replay_writes`",
        f"- {repetitions} interleaved repetitions of {batches} batches; frames/s median [min–max]",
        "",
        "| workload | workers write: frames/s | parent extends: frames/s | ratio "
        "| parent CPU µs/frame: workers write | parent extends |",
        "| :--- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for workload in WORKLOADS:
        a, b = results[workload]["workers write"], results[workload]["parent extends"]
        cpu = results[workload + " parent CPU us/frame"]
        ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
        lines.append(
            f"| {workload} | {statistics.median(a):,.0f} [{min(a):,.0f}–{max(a):,.0f}] "
            f"| {statistics.median(b):,.0f} [{min(b):,.0f}–{max(b):,.0f}] | {ratio:.2f}x "
            f"| {statistics.median(cpu['workers write']):.1f} "
            f"| {statistics.median(cpu['parent extends']):.1f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    suffix = "_quick" if args.quick else ""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"replay_writes{suffix}.md").write_text(text)
    (RESULTS / f"replay_writes{suffix}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
