"""The kill test: ``rlcollect collect`` stopped at random instants leaves a run folder that loads.

Each case runs the CLI (in a child forked by :mod:`tests.reliability.cli_forker`, so a case costs
the run and not torch's import), sends it SIGINT (to its process group, as a terminal's Ctrl-C
does) or SIGKILL (to the process alone, as an out-of-memory kill does) at a random instant of its
run, start-up included (or SIGTERM, to the process alone, as ``kill`` does), and checks:

- the folder loads with :func:`rlcollect.load_run` and with ``rlcollect inspect``'s loader, and
  its ``n`` batches equal, key for key and value for value, the first ``n`` of the same run (same
  seed) that was not interrupted;
- after SIGINT or SIGTERM: exit status 130 or 143, ``TensorDict.load_memmap`` reads the same
  ``n`` batches, and what the run printed and ``run.json`` say agree with the folder;
- no process of the run is left (its workers included) within ``EXIT_LIMIT`` seconds.

Four settings, one process or ``--workers 2``, with and without ``--no-next-obs``, each
``CASES_PER_SETTING`` times, a third each SIGINT, SIGTERM and SIGKILL. The instants come from a seed printed
with any failure (``RLCOLLECT_KILL_SEED`` sets it).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect import load_run
from rlcollect.cli.output import load_run as load_for_inspect
from rlcollect.data.run_folder import read_commit

REPO = Path(__file__).resolve().parents[2]
CASES_PER_SETTING = 27  # 108 kills in all
EXIT_LIMIT = 10.0  # seconds for a killed run's processes to be gone
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
SETTINGS = [(workers, next_obs) for workers in (1, 2) for next_obs in (True, False)]
RUN = ["collect", "--env", "CartPole-v1", "--num-envs", "4", "--frames", "8192",
       "--frames-per-batch", "64", "--seed", "3", "--no-progress"]  # 128 batches [4, 16]
BATCHES = 128


class Forker:
    """The driver's end of :mod:`tests.reliability.cli_forker`."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "tests.reliability.cli_forker"], cwd=REPO,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def start(self, argv: list[str], output: Path) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps([str(output), *argv]) + "\n")
        self.process.stdin.flush()
        word, pid = self.process.stdout.readline().split()
        assert word == "pid", word
        return int(pid)

    def status(self, pid: int) -> int:
        assert self.process.stdout is not None
        word, ended, code = self.process.stdout.readline().split()
        assert (word, int(ended)) == ("status", pid)
        return int(code)

    def close(self) -> None:
        self.process.kill()
        self.process.wait(10)


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    driver = Forker()
    yield driver
    driver.close()


def argv(out: Path, workers: int, next_obs: bool) -> list[str]:
    return [*RUN, "--out", str(out), "--workers", str(workers), *([] if next_obs else ["--no-next-obs"])]


def group_members(group: int) -> list[int]:
    """The running (not zombie) processes of process group ``group``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            members.append(int(stat.parent.name))
    return members


def assert_gone(group: int, context: str) -> None:
    deadline = time.monotonic() + EXIT_LIMIT
    while group_members(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_members(group), f"{context}: processes {group_members(group)} still run"


def assert_prefix(stored: TensorDictBase, reference: TensorDictBase, context: str) -> int:
    """``stored`` is the first batches of ``reference``, key for key; the number of batches."""
    n = stored.batch_size[0] if stored.batch_dims else 0
    assert n <= BATCHES, context
    if n == 0:
        return 0
    assert stored.batch_size == torch.Size([n, *reference.batch_size[1:]]), context
    assert set(stored.keys(True, True)) == set(reference.keys(True, True)), context
    for key in reference.keys(True, True):
        assert torch.equal(stored.get(key), reference.get(key)[:n]), f"{context}: {key}"
    return n


@pytest.fixture(scope="module")
def references(forker: Forker, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, bool], object]:
    """Each setting's run, not interrupted: its batches and its duration."""
    folder = tmp_path_factory.mktemp("references")
    runs: dict[tuple[int, bool], object] = {}
    warm_up = forker.start(argv(folder / "warm-up", 2, True), folder / "output.txt")
    assert forker.status(warm_up) == 0  # the first run in a process is slower: not a measure
    for workers, next_obs in SETTINGS:
        out = folder / f"w{workers}-{next_obs}"
        start = time.perf_counter()
        pid = forker.start(argv(out, workers, next_obs), folder / "output.txt")
        assert forker.status(pid) == 0, (folder / "output.txt").read_text()
        seconds = time.perf_counter() - start
        stored = load_run(out).to_tensordict()  # in memory
        assert stored.batch_size[0] == BATCHES
        runs[workers, next_obs] = (stored, seconds)
    return runs


@pytest.mark.timeout(300)
def test_runs_killed_at_random_instants_load_as_the_batches_before(
    forker: Forker, references: dict[tuple[int, bool], object], tmp_path: Path
) -> None:
    seed = int(os.environ.get("RLCOLLECT_KILL_SEED", time.time_ns() % 2**31))
    rng = random.Random(seed)
    cases = [(setting, how) for setting in SETTINGS for how in STOPS for _ in range(CASES_PER_SETTING // 3)]
    rng.shuffle(cases)
    loaded = []
    for number, ((workers, next_obs), how) in enumerate(cases):
        reference, seconds = references[workers, next_obs]  # type: ignore[misc]
        out, output = tmp_path / f"case{number}", tmp_path / f"case{number}.txt"
        instant = rng.uniform(0.0, 1.1 * seconds)
        context = (f"case {number} (RLCOLLECT_KILL_SEED={seed}): --workers {workers}, next_obs={next_obs}, "
                   f"{how.name} after {instant:.3f} s")
        pid = forker.start(argv(out, workers, next_obs), output)
        time.sleep(instant)
        try:
            if how == signal.SIGINT:
                os.killpg(pid, how)  # the whole job, as Ctrl-C in a terminal
            else:
                os.kill(pid, how)
        except ProcessLookupError:  # the run had ended
            pass
        status = forker.status(pid)
        printed = output.read_text()
        context += f", exit {status}: {printed[-300:]!r}"
        assert_gone(pid, context)
        if not out.exists():  # stopped before the folder was made (by the signal itself, before
            assert status in (-how, 128 + how), context  # the CLI handles it, as any process)
            continue
        if read_commit(out) is None:  # made, nothing committed: killed before the writer's first
            # commit (at most the write test's file and the folder's first files are there)
            assert status in (-how, 128 + how), context
            with pytest.raises(ValueError, match="holds no run"):
                load_run(out)
            continue
        assert status in (0, -how if how == signal.SIGKILL else 128 + how), context
        n = assert_prefix(load_run(out), reference, context)
        assert_prefix(load_for_inspect(out)[0], reference, context)
        loaded.append(n)
        if status == 0:
            assert n == BATCHES, context
        if how != signal.SIGKILL:
            info = json.loads((out / "run.json").read_text())
            assert info["batches_written"] == n and info["complete"] == (n == BATCHES), context
            if status != 0 and "holds the first" in printed:
                assert f"holds the first {n} batches" in printed, context
            if n and next_obs:
                assert_prefix(TensorDict.load_memmap(out), reference, context)
    partial = [n for n in loaded if 0 < n < BATCHES]
    print(f"kill test (seed {seed}): {len(cases)} kills, {len(loaded)} folders, "
          f"{len(partial)} stopped mid-run, batches kept {sorted(loaded)}")
    assert len(partial) >= len(cases) // 4  # the instants do fall inside the runs
