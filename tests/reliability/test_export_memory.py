"""``rlcollect export --format minari`` streams: its peak memory stays flat as runs grow.

Two runs of 84x84x4 pixel frames (the size of an Atari run's), 96 MB and 384 MB of observations,
written without next observations as ``rlcollect collect --no-next-obs`` writes them, are exported
in fresh processes; each measures its peak resident memory (``VmHWM``) above what the interpreter
held with every module imported. Reading the whole run (as the export did) would cost the run's
size and more; streaming costs a few episodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rlcollect.data.run_folder import RunFolderWriter

pytest.importorskip("minari", reason="minari is the optional extra rlcollect[minari]")

ENVS, STEPS, EPISODE, SHAPE = 4, 64, 50, (84, 84, 4)
REPO = Path(__file__).resolve().parents[2]

EXPORT = """
import sys
import gymnasium as gym
import h5py, minari, torch  # imported before the baseline is read
from rlcollect.cli.export import export_minari

gym.register("rlcollect-test/Pixels-v0", entry_point="tests.envs_for_tests:PixelEnv")

def peak() -> int:
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))

base = peak()
summary = export_minari(sys.argv[1], sys.argv[2])
print(summary.episodes, summary.frames, base, peak())
"""


def write_run(out: Path, batches: int) -> int:
    """A run of pixel frames, episodes of :data:`EPISODE` steps, without next observations; its
    observation bytes."""
    out.mkdir()
    writer = RunFolderWriter(out, next_obs=False, observation_keys=[("observation",)])
    generator = torch.Generator().manual_seed(0)
    for b in range(batches):
        step = torch.arange(b * STEPS, (b + 1) * STEPS).expand(ENVS, STEPS)
        done = ((step + 1) % EPISODE == 0).unsqueeze(-1)
        obs = torch.randint(0, 256, (ENVS, STEPS + 1, *SHAPE), dtype=torch.uint8, generator=generator)
        writer.append(TensorDict({
            "observation": obs[:, :-1], "action": torch.zeros(ENVS, STEPS, dtype=torch.int64),
            "next": {"observation": obs[:, 1:], "reward": torch.ones(ENVS, STEPS, 1), "done": done,
                     "terminated": done, "truncated": torch.zeros_like(done)},
            "collector": {"traj_ids": torch.arange(ENVS).unsqueeze(-1) + ENVS * (step // EPISODE)},
        }, batch_size=[ENVS, STEPS]))
    writer.close()
    (out / "run.json").write_text(json.dumps({"env": "rlcollect-test/Pixels-v0"}))
    return batches * ENVS * STEPS * torch.Size(SHAPE).numel()


def export_peak(run: Path, dataset_id: str, datasets: Path) -> tuple[int, int]:
    """Episodes written, and the export's peak memory above the interpreter's, in bytes."""
    environment = {"MINARI_DATASETS_PATH": str(datasets), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", EXPORT, str(run), dataset_id], capture_output=True,
                          text=True, timeout=240, env=environment, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    episodes, _, base, peak = map(int, done.stdout.split())
    return episodes, (peak - base) * 1024


@pytest.mark.timeout(300)
def test_the_minari_export_streams_with_flat_memory(tmp_path: Path) -> None:
    peaks = {}
    for batches in (6, 24):
        run = tmp_path / f"run-{batches}"
        size = write_run(run, batches)
        episodes, peaks[size] = export_peak(run, f"test/pixels{batches}-v0", tmp_path / "datasets")
        assert episodes == ENVS * (batches * STEPS // EPISODE)
    print({f"{size / 2**20:.0f} MB": f"{peak / 2**20:.0f} MB" for size, peak in peaks.items()})
    small, large = sorted(peaks)
    assert peaks[large] < 512 * 2**20 and peaks[large] < peaks[small] + 64 * 2**20, peaks
