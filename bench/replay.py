"""Replay-buffer sampling rate: rlcollect's samplers and storages, and TorchRL's, at 1M capacity.

The workload: a buffer of ``capacity`` CartPole-like frames (observation float32[4], action int64,
("next", observation / reward / terminated / truncated / done), ("collector", "traj_ids"),
policy_version), filled with 1000-frame batches ``[8 envs, 125 steps]`` whose episodes end with
probability 1/22 per step (about a random CartPole policy's). Each contender, in its own process
(:mod:`bench.harness`), fills its buffer, then calls ``sample(batch_size)`` in a loop; the rate is
samples (frames) per second.

Contenders: rlcollect's ``ReplayBuffer`` with the uniform, prioritized (also with an
``update_priority`` of the sampled frames per call, as a PER learner does) and slice samplers in
memory, and the uniform sampler on shared and memmap storage; TorchRL 0.14's ``ReplayBuffer`` on a
``LazyTensorStorage`` with ``RandomSampler``, ``SliceSampler`` and ``PrioritizedSampler`` (the last
needs TorchRL's C++ extension; where it is not built it is left out, and the report says so).

Run from the repository root::

    python -m bench.replay            # writes bench/results/replay.md and .json
    python -m bench.replay --quick    # small buffer, short repetitions: bench/results/replay_quick.*
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from bench.harness import BatchFn, Builder, ContenderResult, machine_info, run_interleaved, source_digest
from bench.report import header_markdown, markdown_table, write_results

__all__ = ["ReplayWorkload", "main"]

RESULTS_DIR = Path(__file__).parent / "results"
RLCOLLECT_DIR = Path(importlib.util.find_spec("rlcollect").origin).parent  # type: ignore[union-attr,arg-type]
NUM_ENVS, STEPS = 8, 125  # one extend: 1000 frames


@dataclass(frozen=True)
class ReplayWorkload:
    """Buffer size, sample size and slice length; ``memmap_dir`` is set by :func:`main`."""

    capacity: int = 1_000_000
    batch_size: int = 256
    slice_len: int = 8
    mean_episode: float = 22.0
    memmap_dir: str = ""


# -- the frames -----------------------------------------------------------------------------------
def cartpole_like_batches(workload: ReplayWorkload) -> list[TensorDict]:
    """Enough ``[8, 125]`` batches to fill the buffer once, seeded: the same frames in every contender."""
    generator = torch.Generator().manual_seed(0)
    batches, next_traj = [], torch.arange(NUM_ENVS)
    for _ in range(-(-workload.capacity // (NUM_ENVS * STEPS))):
        shape = (NUM_ENVS, STEPS)
        ended = torch.rand(shape, generator=generator) < 1 / workload.mean_episode  # [N, T]
        episode = torch.cumsum(ended, 1) - ended.long()  # episodes ended before each step
        traj = next_traj.view(-1, 1) + NUM_ENVS * episode  # unique ids: env i gets i, i + N, i + 2N, ...
        next_traj = next_traj + NUM_ENVS * ended.sum(1)
        done = ended.unsqueeze(-1)
        batches.append(
            TensorDict(
                {
                    "observation": torch.randn(*shape, 4, generator=generator),
                    "action": torch.randint(0, 2, shape, generator=generator),
                    "policy_version": torch.zeros(shape, dtype=torch.int64),
                    ("next", "observation"): torch.randn(*shape, 4, generator=generator),
                    ("next", "reward"): torch.ones(*shape, 1),
                    ("next", "terminated"): done,
                    ("next", "truncated"): torch.zeros(*shape, 1, dtype=torch.bool),
                    ("next", "done"): done.clone(),
                    ("collector", "traj_ids"): traj,
                },
                batch_size=shape,
            )
        )
    return batches


# -- rlcollect -----------------------------------------------------------------------------------
def _rlcollect(workload: ReplayWorkload, update_priority: bool = False, **kwargs: Any) -> BatchFn:
    from rlcollect.replay import ReplayBuffer

    rb = ReplayBuffer(workload.capacity, batch_size=workload.batch_size, seed=0, **kwargs)
    for batch in cartpole_like_batches(workload):
        rb.extend(batch)
    assert len(rb) == workload.capacity
    priorities = torch.rand(workload.batch_size, generator=torch.Generator().manual_seed(1))

    def sample_once() -> int:
        sample = rb.sample()
        if update_priority:
            rb.update_priority(sample["index"], priorities)
        return workload.batch_size

    return sample_once


def rlcollect_uniform(workload: ReplayWorkload) -> BatchFn:
    """Uniform sampler, memory storage."""
    return _rlcollect(workload)


def rlcollect_prioritized(workload: ReplayWorkload) -> BatchFn:
    """Prioritized sampler (sum tree), memory storage."""
    return _rlcollect(workload, sampler="prioritized")


def rlcollect_prioritized_update(workload: ReplayWorkload) -> BatchFn:
    """Prioritized sampler, then ``update_priority`` of the sampled frames."""
    return _rlcollect(workload, update_priority=True, sampler="prioritized")


def rlcollect_slice(workload: ReplayWorkload) -> BatchFn:
    """Slice sampler, memory storage."""
    return _rlcollect(workload, sampler="slice", slice_len=workload.slice_len)


def rlcollect_uniform_shared(workload: ReplayWorkload) -> BatchFn:
    """Uniform sampler, shared-memory storage (process lock around the stamp reads)."""
    return _rlcollect(workload, storage="shared")


def rlcollect_uniform_memmap(workload: ReplayWorkload) -> BatchFn:
    """Uniform sampler, memmap storage (file lock around the stamp reads)."""
    return _rlcollect(workload, storage="memmap", path=Path(workload.memmap_dir) / f"rb-{os.getpid()}")


# -- TorchRL -------------------------------------------------------------------------------------
def _torchrl(workload: ReplayWorkload, sampler: Any) -> BatchFn:
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(workload.capacity), sampler=sampler, batch_size=workload.batch_size
    )
    for batch in cartpole_like_batches(workload):
        rb.extend(batch.reshape(-1))
    assert len(rb) == workload.capacity

    def sample_once() -> int:
        rb.sample()
        return workload.batch_size

    return sample_once


def torchrl_uniform(workload: ReplayWorkload) -> BatchFn:
    """TorchRL ``RandomSampler``."""
    from torchrl.data.replay_buffers.samplers import RandomSampler

    return _torchrl(workload, RandomSampler())


def torchrl_slice(workload: ReplayWorkload) -> BatchFn:
    """TorchRL ``SliceSampler`` on the same keys."""
    from torchrl.data.replay_buffers.samplers import SliceSampler

    sampler = SliceSampler(
        slice_len=workload.slice_len, traj_key=("collector", "traj_ids"), end_key=("next", "done")
    )
    return _torchrl(workload, sampler)


def torchrl_prioritized(workload: ReplayWorkload) -> BatchFn:
    """TorchRL ``PrioritizedSampler`` (needs its C++ extension)."""
    from torchrl.data.replay_buffers.samplers import PrioritizedSampler

    return _torchrl(workload, PrioritizedSampler(workload.capacity, alpha=0.6, beta=0.4))


def torchrl_prioritized_available() -> bool:
    """Whether TorchRL's C++ sum tree is built here (its ``PrioritizedSampler`` needs it)."""
    try:
        from torchrl._torchrl import SumSegmentTreeFp32  # noqa: F401
    except ImportError:
        return False
    return True


LABELS = {
    "rlcollect-uniform": "rlcollect uniform, memory",
    "rlcollect-prioritized": "rlcollect prioritized, memory",
    "rlcollect-prioritized+update": "rlcollect prioritized + update_priority, memory",
    "rlcollect-slice": "rlcollect slice, memory",
    "rlcollect-uniform-shared": "rlcollect uniform, shared memory",
    "rlcollect-uniform-memmap": "rlcollect uniform, memmap",
    "torchrl-uniform": "TorchRL RandomSampler, LazyTensorStorage",
    "torchrl-prioritized": "TorchRL PrioritizedSampler, LazyTensorStorage",
    "torchrl-slice": "TorchRL SliceSampler, LazyTensorStorage",
}
#: rlcollect contender -> the TorchRL contender it is compared with
PAIRS = {
    "rlcollect-uniform": "torchrl-uniform",
    "rlcollect-prioritized": "torchrl-prioritized",
    "rlcollect-slice": "torchrl-slice",
}


def contenders() -> dict[str, Builder[ReplayWorkload]]:
    """Every contender that can run here."""
    found: dict[str, Builder[ReplayWorkload]] = {
        "rlcollect-uniform": rlcollect_uniform,
        "rlcollect-prioritized": rlcollect_prioritized,
        "rlcollect-prioritized+update": rlcollect_prioritized_update,
        "rlcollect-slice": rlcollect_slice,
        "rlcollect-uniform-shared": rlcollect_uniform_shared,
        "rlcollect-uniform-memmap": rlcollect_uniform_memmap,
    }
    if importlib.util.find_spec("torchrl") is not None:
        found["torchrl-uniform"] = torchrl_uniform
        if torchrl_prioritized_available():
            found["torchrl-prioritized"] = torchrl_prioritized
        found["torchrl-slice"] = torchrl_slice
    return found


# -- report --------------------------------------------------------------------------------------
def table(workload: ReplayWorkload, results: dict[str, ContenderResult]) -> str:
    """Samples/s per contender, µs per ``sample`` call, and rlcollect / TorchRL for each sampler."""
    rows = []
    for name, result in results.items():
        ratio = ""
        other = results.get(PAIRS.get(name, ""))
        if other is not None:
            ratio = f"{result.fps.median / other.fps.median:.2f}x"
        per_call = workload.batch_size / result.fps.median * 1e6
        rows.append([LABELS[name], result.fps.format(), result.cpu_fps.format(), f"{per_call:,.0f}", ratio])
    header = [
        "contender",
        "samples/s median [min–max]",
        "samples / CPU-s",
        "µs per sample() call",
        "vs TorchRL (samples/s)",
    ]
    return markdown_table(header, rows)


def _method(workload: ReplayWorkload, repetitions: int, seconds: float, skipped: list[str]) -> str:
    note = ""
    if skipped:
        names = ", ".join(LABELS[s] for s in skipped)
        note = f" Not measured here: {names} (TorchRL's C++ extension is not built)."
    return (
        f"each contender in its own spawned process, torch 1 thread; its buffer of {workload.capacity:,} "
        f"CartPole-like frames filled from the same seeded [8 envs, 125 steps] batches (episodes end with "
        f"probability 1/{workload.mean_episode:g} per step); then `sample()` of {workload.batch_size} frames "
        f"(slices: {workload.batch_size // workload.slice_len} x {workload.slice_len}) in a loop. "
        f"{repetitions} repetitions of about {seconds:g} s each, contenders interleaved, each after a "
        "warm-up call; samples/s = frames returned per second, median [min–max] over the repetitions; "
        "samples / CPU-s divides by the process's CPU time instead (other jobs on this shared machine take "
        "CPUs away at times). µs per call is from the median samples/s." + note
    )


def main(argv: list[str] | None = None) -> None:
    """Measure, print the table, write ``bench/results/replay[_quick].{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k-frame buffer, short repetitions")
    parser.add_argument("--repetitions", type=int, default=3, help="repetitions per contender (default 3)")
    parser.add_argument("--seconds", type=float, help="seconds per repetition (default 2, quick 0.2)")
    args = parser.parse_args(argv)
    seconds = args.seconds or (0.2 if args.quick else 2.0)
    workload = ReplayWorkload(capacity=10_000) if args.quick else ReplayWorkload()
    found = contenders()
    skipped = [name for name in LABELS if name not in found]
    info = machine_info()
    info["rlcollect_sources"] = source_digest(RLCOLLECT_DIR)
    command = "python -m bench.replay" + (" --quick" if args.quick else "")
    title = f"Replay buffer sampling at {workload.capacity:,} frames: rlcollect vs TorchRL"
    header = header_markdown(title, info, command, _method(workload, args.repetitions, seconds, skipped))
    print(header, flush=True)
    with tempfile.TemporaryDirectory(prefix="rlcollect-bench-replay-") as folder:
        workload = replace(workload, memmap_dir=folder)
        results = run_interleaved(found, workload, repetitions=args.repetitions, target_seconds=seconds)
    markdown = f"{header}\n{table(workload, results)}\n"
    print("\n" + table(workload, results), flush=True)
    data = {
        "machine": info,
        "workload": {**asdict(workload), "memmap_dir": None},
        "repetitions": args.repetitions,
        "seconds": seconds,
        "not_measured": skipped,
        "contenders": {name: result.to_json() for name, result in results.items()},
    }
    write_results(RESULTS_DIR, "replay_quick" if args.quick else "replay", markdown, data)


if __name__ == "__main__":
    main()
