"""A script without ``if __name__ == "__main__":`` run with the spawn or forkserver start method:
its workers import the script, which builds a collector again; the run stops at once with a short
error naming the guard (it used to retry for 9 to 17 s and print 121 to 147 lines). The scripts run
as ``python script.py`` would, forked from a preloaded interpreter (:mod:`tests.preloaded`); their
workers start as the start method says."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from tests.preloaded import Preloaded

SCRIPT = """
import torch
from rlcollect import {kind}

torch.set_num_threads(1)
collector = {kind}("CartPole-v1", None, frames_per_batch=64, total_frames=128, num_workers=2,
                   start_method={method!r})
for batch in collector:
    print(batch.shape)
collector.shutdown()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("kind", "method"), [("MultiSyncCollector", "spawn"),
                                              ("MultiAsyncCollector", "forkserver")])
def test_a_script_without_the_main_guard_stops_at_once_naming_it(tmp_path: Path, kind: str, method: str,
                                                                  preloaded: Preloaded) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(SCRIPT.format(kind=kind, method=method)))
    began = time.monotonic()
    done = preloaded.run([str(script)], cwd=tmp_path, timeout=100)
    seconds = time.monotonic() - began
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 1, done.stderr
    assert seconds < 30 and len(lines) <= 40, (seconds, done.stderr)
    assert lines[-7] == ("RuntimeError: rlcollect worker 0 could not start: the worker process ran your "
                         "script's top level again, which builds a collector."), done.stderr
    assert '    if __name__ == "__main__":' in lines
    assert "max_worker_restarts" not in done.stderr and "bootstrapping" not in done.stderr  # no retries


@pytest.mark.timeout(120)
def test_the_same_script_under_the_guard_collects(tmp_path: Path, preloaded: Preloaded) -> None:
    body = textwrap.indent(textwrap.dedent(SCRIPT.format(kind="MultiSyncCollector", method="spawn")), "    ")
    script = tmp_path / "guarded.py"
    script.write_text(f"def main() -> None:\n{body}\n\nif __name__ == \"__main__\":\n    main()\n")
    done = preloaded.run([str(script)], cwd=tmp_path, timeout=100)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["torch.Size([2, 32])"] * 2
