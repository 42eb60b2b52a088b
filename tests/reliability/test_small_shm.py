"""A small ``/dev/shm`` (Docker's default 64 MB, in a private mount namespace: ``unshare -m``, as
root): what does not fit is refused before it is taken, with the bytes needed and free, the
argument to change and the alternatives; nothing is left in ``/dev/shm``; what fits runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("small_shm_cases.py")

EXPECTED = {
    "big_batches": ("SharedMemoryError", ["1 batch slot(s) of 2 envs x 512 steps needs 195.7 MiB of shared "
                                          "memory",
                                          "/dev/shm has 64.0 MiB free", "change frames_per_batch",
                                          "--shm-size"]),
    "shared_buffer": ("SharedMemoryError", ["a shared replay buffer of capacity=200000 needs",
                                            "storage='memmap'"]),
    "big_policy": ("SharedMemoryError", ["a shared copy of the weights of 'policy' needs 95.4 MiB",
                                         "MultiProcessWeightSyncScheme"]),
    "batched_big_observations": ("SharedMemoryError", ["2 batch slot(s) of 2 envs x 1024 steps",
                                                       "change frames_per_batch"]),
    "nearly_full": ("SharedMemoryError", ["1 batch slot(s) of 2 envs x 32 steps needs 12.6 MiB",
                                          "/dev/shm has 4.0 MiB free"]),
    "fits": ("ok", []),
}


@pytest.mark.timeout(240)
def test_a_small_dev_shm_is_checked_before_it_is_filled() -> None:
    assert shutil.which("unshare"), "the test needs util-linux's unshare (and root: CI runs as root)"
    script = (f"mount -t tmpfs -o size=64m tmpfs /dev/shm && cd {REPO} && "
              f"{sys.executable} -m tests.reliability.small_shm_cases {' '.join(EXPECTED)} && "
              "echo \"after|$(ls -A /dev/shm | tr '\\n' ,)\"")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line.split("|")[0]: line.split("|")[1:] for line in done.stdout.splitlines() if "|" in line}
    for case, (kind, fragments) in EXPECTED.items():
        got_kind, message, left = lines[case]
        assert got_kind == kind, (case, got_kind, message)
        for fragment in fragments:
            assert fragment in message, (case, fragment, message)
        assert left == "", (case, "left in /dev/shm:", left)
    assert lines["after"] == [""]  # nothing outlives the process either


@pytest.mark.timeout(120)
def test_too_few_file_descriptors_for_the_workers_is_named() -> None:
    """A hard ``ulimit -n`` of 20: two workers need more; the error names the limit and the fix (a
    soft limit under the hard one is raised instead, as the second run shows)."""
    code = ("import gymnasium as gym; from rlcollect import MultiSyncCollector\n"
            "make = lambda: gym.make('CartPole-v1')\n"
            "if __name__ == '__main__':\n"
            "    with MultiSyncCollector([make, make], None, frames_per_batch=64, total_frames=64) as c:\n"
            "        print(c.next().batch_size)\n")
    low = subprocess.run(["sh", "-c", f"ulimit -n 20 && cd {REPO} && {sys.executable} -c \"$0\"", code],
                         capture_output=True, text=True, timeout=100)
    assert low.returncode != 0
    assert "OSError: 2 worker processes need about 9 file descriptors more than" in low.stderr, \
        low.stderr[-2000:]
    assert "(ulimit -n; the hard limit is 20)" in low.stderr and "change num_workers" in low.stderr
    soft = subprocess.run(["sh", "-c", f"ulimit -Sn 20 && cd {REPO} && {sys.executable} -c \"$0\"", code],
                          capture_output=True, text=True, timeout=100)
    assert soft.returncode == 0, soft.stderr[-2000:]
    assert "torch.Size([2, 32])" in soft.stdout
