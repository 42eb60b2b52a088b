"""A vector env of 16,384 envs collects within the stated memory bound (docs/pages/batched_sims.md).

In fresh processes, with every module imported before the baseline is read, a plain loop over the
env and ``Collector`` over the same env and policy collect 12 batches of ``[16384, 8]`` frames;
each measures its peak resident memory (``VmHWM``) above that baseline. The plain loop's peak is
what the env, the policy's temporaries at 16,384 envs and its own arrays (one batch) cost; the
collector's may exceed it by at most :data:`BATCHES` batches' bytes (measured: 3.6 to 5.5; the
batch buffers with their carried observation slot, the batch handed out and the one the caller
still holds, what the heap keeps of the per-batch temporaries of the checks and statistics).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENVS, STEPS, BATCHES = 16_384, 8, 8

MEASURE = """
import sys
import torch
import bench.batched_sims as sims  # imports torch, gymnasium, numpy
from rlcollect import Collector

def peak() -> int:
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))

torch.set_num_threads(1)
contender, kind, envs, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
base, nbytes = peak(), 0
if contender == "plain":
    batch = sims._torch_loop if kind == "torch" else sims._numpy_loop
    collect = batch(sims.make_env(kind, envs), sims.make_policy(), envs, steps)
    frames = sum(collect() for _ in range(12))
else:
    collector = Collector(sims.EnvMaker(kind, envs), sims.make_policy(), frames_per_batch=envs * steps,
                          seed=0)
    batches = iter(collector)
    frames = 0
    for _ in range(12):
        out = next(batches)
        frames += out.numel()
        nbytes = sum(value.numel() * value.element_size() for value in out.values(True, True))
    collector.shutdown()
print(frames, base, peak(), nbytes)
"""


def _peak_above_base(contender: str, kind: str) -> tuple[int, int]:
    """The contender's peak memory above its baseline, and the bytes of one batch (0: plain)."""
    done = subprocess.run([sys.executable, "-c", MEASURE, contender, kind, str(ENVS), str(STEPS)],
                          capture_output=True, text=True, timeout=200, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    frames, base, peak, nbytes = map(int, done.stdout.split())
    assert frames >= 12 * ENVS * STEPS * 0.9  # (a NEXT_STEP env's reset steps are not frames)
    return (peak - base) * 1024, nbytes


@pytest.mark.timeout(420)
@pytest.mark.parametrize("kind", ["gym", "torch"])
def test_sixteen_thousand_envs_collect_within_the_stated_memory_bound(kind: str) -> None:
    plain, _ = _peak_above_base("plain", kind)
    collector, batch = _peak_above_base("rlcollect", kind)
    assert batch > 0.9 * ENVS * STEPS * 50  # the observations, next observations, action, flags, ids
    extra = (collector - plain) / batch
    print(f"{kind}: batch {batch / 2**20:.1f} MB, plain {plain / 2**20:.0f} MB, "
          f"rlcollect {collector / 2**20:.0f} MB: {extra:.1f} batches more")
    assert extra <= BATCHES, (plain, collector, batch)
