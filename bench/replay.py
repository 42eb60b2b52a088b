"""Replay: sampling from rlcollect's ReplayBuffer vs TorchRL's, and workers writing into a shared buffer.

Workload ``sampling``: a buffer of 1,000,000 CartPole-like frames (observation float32[4], action,
("next", observation / reward / terminated / truncated / done), ("collector", "traj_ids"),
policy_version), filled from the same seeded ``[8 envs, 125 steps]`` batches (episodes end with
probability 1/22 per step), then ``sample()`` of 256 frames in a loop (slices: 32 x 8); a "frame"
in the tables is a sampled frame. Contenders: rlcollect's uniform, prioritized (also followed by
``update_priority`` of the sampled frames, as a PER learner does) and slice samplers in memory,
and uniform on shared and memmap storage; TorchRL 0.14's ``TensorDictReplayBuffer`` on a
``LazyTensorStorage`` with ``RandomSampler``, ``PrioritizedSampler`` (needs TorchRL's C++
extension: where it is not built, the row says it did not run) and ``SliceSampler``.

Workloads ``writes-cartpole-2x8`` and ``writes-pong-2x4``: rlcollect's ``MultiSyncCollector``
(2 workers) feeding a ``ReplayBuffer``: either its 2 workers extend a shared buffer themselves
(``replay_buffer=``; nothing but a small message reaches the parent), or the collector yields each
batch (``return_same_td=True``) and the parent extends an in-memory buffer. The "main process CPU
µs / frame" column is what collection costs the learner's process.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from bench.harness import Batches, Contender, Plan, Ratio, parse_args, run
from bench.workloads import make_policy, workload

WORKLOADS = ("sampling", "writes-cartpole-2x8", "writes-pong-2x4")
BATCH, SLICE, ENVS, STEPS = 256, 8, 8, 125
WRITE_CAPACITY = {"cartpole-2x8": 1_000_000, "pong-2x4": 10_000}  # a Pong frame and its next: 200 KB


def capacity(quick: bool) -> int:
    return 10_000 if quick else 1_000_000


def cartpole_like(num_frames: int) -> list[TensorDict]:
    """Seeded ``[8, 125]`` batches, enough for ``num_frames``: the same frames in every contender."""
    generator, batches, next_traj = torch.Generator().manual_seed(0), [], torch.arange(ENVS)
    for _ in range(-(-num_frames // (ENVS * STEPS))):
        ended = torch.rand(ENVS, STEPS, generator=generator) < 1 / 22
        traj = next_traj.view(-1, 1) + ENVS * (torch.cumsum(ended, 1) - ended.long())  # env i: i, i + N, ...
        next_traj = next_traj + ENVS * ended.sum(1)
        done = ended.unsqueeze(-1)
        batches.append(TensorDict({
            "observation": torch.randn(ENVS, STEPS, 4, generator=generator),
            "action": torch.randint(0, 2, (ENVS, STEPS), generator=generator),
            "policy_version": torch.zeros(ENVS, STEPS, dtype=torch.int64),
            ("next", "observation"): torch.randn(ENVS, STEPS, 4, generator=generator),
            ("next", "reward"): torch.ones(ENVS, STEPS, 1),
            ("next", "terminated"): done,
            ("next", "truncated"): torch.zeros(ENVS, STEPS, 1, dtype=torch.bool),
            ("next", "done"): done.clone(),
            ("collector", "traj_ids"): traj,
        }, batch_size=(ENVS, STEPS)))
    return batches


def rlcollect_sampler(quick: bool, sampler: str, storage: str = "memory", update: bool = False) -> Batches:
    from rlcollect import ReplayBuffer

    folder = tempfile.mkdtemp(prefix="rlcollect-bench-") if storage == "memmap" else None
    rb = ReplayBuffer(
        capacity(quick), storage=storage, path=None if folder is None else Path(folder) / "buffer",
        sampler=sampler, batch_size=BATCH, slice_len=SLICE if sampler == "slice" else None, seed=0,
    )
    for batch in cartpole_like(capacity(quick)):
        rb.extend(batch)
    priorities = torch.rand(BATCH, generator=torch.Generator().manual_seed(1))

    def sample() -> int:
        drawn = rb.sample()
        if update:
            rb.update_priority(drawn["index"], priorities)
        return BATCH

    return Batches(sample, lambda: folder is None or shutil.rmtree(folder, ignore_errors=True))


def torchrl_sampler(quick: bool, sampler: str) -> Any:
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers import samplers

    if sampler == "prioritized":
        try:
            from torchrl._torchrl import SumSegmentTreeFp32  # noqa: F401
        except ImportError:
            raise RuntimeError("TorchRL's C++ extension (torchrl._torchrl) does not load here") from None
    made = {
        "uniform": samplers.RandomSampler,
        "prioritized": lambda: samplers.PrioritizedSampler(capacity(quick), alpha=0.6, beta=0.4),
        "slice": lambda: samplers.SliceSampler(slice_len=SLICE, traj_key=("collector", "traj_ids"),
                                               end_key=("next", "done")),
    }[sampler]()
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity(quick)), sampler=made, batch_size=BATCH)
    for batch in cartpole_like(capacity(quick)):
        rb.extend(batch.reshape(-1))

    def sample() -> int:
        rb.sample()
        return BATCH

    return sample


def buffer_writes(workload_name: str, quick: bool, workers_write: bool) -> Batches:
    from rlcollect import MultiSyncCollector, ReplayBuffer

    w = workload(workload_name, quick)
    size = WRITE_CAPACITY[workload_name] // (10 if quick else 1)
    buffer = ReplayBuffer(size, storage="shared" if workers_write else "memory")
    collector = MultiSyncCollector(
        w.env_id, make_policy(w), num_workers=w.num_workers, num_envs_per_worker=w.envs_per_worker,
        frames_per_batch=w.frames_per_batch, seed=0, return_same_td=True,
        replay_buffer=buffer if workers_write else None,
    )
    batches = iter(collector)

    def batch() -> int:
        data = next(batches)  # None when the workers wrote it
        if not workers_write:
            buffer.extend(data)
        return collector.frames_per_batch

    return Batches(batch, collector.shutdown)


def plan(name: str, quick: bool) -> Plan:
    if name == "sampling":
        rows = [  # name, sampler, storage (TorchRL: LazyTensorStorage), label
            ("rlcollect-uniform", "uniform", "memory", "rlcollect uniform, memory"),
            ("rlcollect-prioritized", "prioritized", "memory", "rlcollect prioritized, memory"),
            ("rlcollect-prioritized+update", "prioritized", "memory",
             "rlcollect prioritized + update_priority, memory"),
            ("rlcollect-slice", "slice", "memory", "rlcollect slice, memory"),
            ("rlcollect-uniform-shared", "uniform", "shared", "rlcollect uniform, shared memory"),
            ("rlcollect-uniform-memmap", "uniform", "memmap", "rlcollect uniform, memmap"),
            ("torchrl-uniform", "uniform", "", "TorchRL RandomSampler, LazyTensorStorage"),
            ("torchrl-prioritized", "prioritized", "", "TorchRL PrioritizedSampler, LazyTensorStorage"),
            ("torchrl-slice", "slice", "", "TorchRL SliceSampler, LazyTensorStorage"),
        ]
        contenders = [
            Contender(name, label, rlcollect_sampler, {"quick": quick, "sampler": sampler, "storage": storage,
                                                       "update": name.endswith("+update")})
            if storage else Contender(name, label, torchrl_sampler, {"quick": quick, "sampler": sampler})
            for name, sampler, storage, label in rows
        ]
        ratios = [Ratio(f"rlcollect-{s}", f"torchrl-{s}", f"rlcollect / TorchRL, {s}")
                  for s in ("uniform", "prioritized", "slice")]
        heading = (f"sample() of {BATCH} frames (slices: {BATCH // SLICE} x {SLICE}) from "
                   f"{capacity(quick):,} CartPole-like frames")
        return Plan(heading, contenders, ratios)
    w = workload(name.removeprefix("writes-"), quick)
    kwargs = {"workload_name": w.name, "quick": quick}
    contenders = [
        Contender("workers-write", f"**{w.num_workers} workers extend a shared buffer**", buffer_writes,
                  {**kwargs, "workers_write": True}),
        Contender("parent-extends", "the parent extends a memory buffer with each yielded batch",
                  buffer_writes, {**kwargs, "workers_write": False}),
    ]
    size = WRITE_CAPACITY[w.name] // (10 if quick else 1)
    heading = (f"MultiSyncCollector on {w.name} ({w.env_id}, {w.num_workers} x {w.envs_per_worker} envs, "
               f"{w.frames_per_batch} frames per batch) into a buffer of {size:,} frames")
    return Plan(heading, contenders, [
        Ratio("workers-write", "parent-extends", "workers write / parent extends"),
    ])


def main(argv: list[str] | None = None) -> None:
    args = parse_args("replay", __doc__, WORKLOADS, repetitions=5, seconds=2.0, argv=argv)
    run("replay", "Replay buffers: sampling vs TorchRL, and workers writing a shared buffer", args, plan)


if __name__ == "__main__":
    main()
