"""Where rlcollect's time per step goes, by source line, in microseconds per step.

Runs the ``rlcollect`` contender of :mod:`bench.single_process` (``Collector`` iterated with
``return_same_td=True``) alone, twice: first unprofiled, for the true time per step; then under
``py-spy record --nonblocking``. Each sample is charged to the innermost rlcollect source line on
its stack, so the time of what that line calls (``env.step``, the torch forward, numpy) counts
for the line. The shares are then scaled to the unprofiled time per step (a step = all envs once).

    python -m bench.profile_rlcollect --workload cartpole-8 --seconds 10

Needs py-spy (``pip install py-spy``). Sampling is statistical: lines under ~1 % move between runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import BatchFn
from bench.report import markdown_table

__all__ = ["main"]

_LOOP = "_timed_loop"  # the function whose samples count (set-up and teardown do not)
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*):(?P<line>\d+)\)$")


def _target(workload_name: str, seconds: float) -> None:
    """Target process: build and warm up rlcollect, iterate it for ``seconds``, print the timing."""
    import torch

    from bench.single_process import WORKLOADS, rlcollect_iterator

    torch.set_num_threads(1)
    workload = next(w for w in WORKLOADS if w.name == workload_name)
    batch = rlcollect_iterator(workload)
    batch()
    frames, elapsed = _timed_loop(batch, seconds)
    print(json.dumps({"steps": frames // workload.num_envs, "seconds": elapsed}))


def _timed_loop(batch: BatchFn, seconds: float) -> tuple[int, float]:
    """Collect batches for ``seconds``; the frames and the exact time (only these samples count)."""
    frames, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        frames += batch()
    return frames, time.perf_counter() - start


def _run_target(workload: str, seconds: float, py_spy: list[str] | None = None) -> float:
    """Seconds per step of the target, optionally under py-spy."""
    command = [
        sys.executable,
        "-m",
        "bench.profile_rlcollect",
        "--target",
        workload,
        "--seconds",
        str(seconds),
    ]
    out = subprocess.run([*(py_spy or []), *command], check=True, capture_output=True, text=True).stdout
    result = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    return float(result["seconds"]) / int(result["steps"])


def _where(frames: list[str]) -> tuple[str, str]:
    """(innermost rlcollect line, what it was running) for one sampled stack."""
    parsed = [
        m.groupdict() if (m := _FRAME.match(f)) else {"function": f, "file": "?", "line": "0"} for f in frames
    ]
    inside = [i for i, f in enumerate(parsed) if f["file"].startswith("rlcollect/")]
    if not inside:
        return "(outside rlcollect)", parsed[-1]["function"]
    frame = parsed[inside[-1]]
    location = f"{frame['file']}:{frame['line']} {frame['function']}"
    if inside[-1] == len(parsed) - 1:
        return location, "itself"
    callee = parsed[inside[-1] + 1]
    package = callee["file"].split("/")[0]
    return location, f"{callee['function']} ({package})"


def attribute(raw_profile: Path) -> tuple[collections.Counter[tuple[str, str]], int]:
    """Samples per (rlcollect line, what it ran) in py-spy's raw (collapsed) output, and the total."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    total = 0
    for record in raw_profile.read_text().splitlines():
        stack, _, count = record.rpartition(" ")
        frames = stack.split(";")
        if not any(f.startswith(f"{_LOOP} ") for f in frames):
            continue
        counts[_where(frames)] += int(count)
        total += int(count)
    return counts, total


def main(argv: list[str] | None = None) -> None:
    """Profile one workload and print the lines that take the time, in µs per step."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="cartpole-8", help="a workload of bench.single_process")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of each of the two runs")
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25, help="lines to show")
    parser.add_argument("--target", help=argparse.SUPPRESS)  # internal: be the profiled process
    args = parser.parse_args(argv)
    if args.target:
        _target(args.target, args.seconds)
        return
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        raise SystemExit("py-spy is not installed: pip install py-spy")

    step_us = _run_target(args.workload, args.seconds) * 1e6
    with tempfile.TemporaryDirectory() as folder:
        raw = Path(folder) / "profile.txt"
        record = [py_spy, "record", "--nonblocking", "--rate", str(args.rate), "--format", "raw"]
        profiled_us = _run_target(args.workload, args.seconds, [*record, "-o", str(raw), "--"]) * 1e6
        counts, total = attribute(raw)
    print(
        f"{args.workload}: {step_us:.1f} µs per step unprofiled ({profiled_us:.1f} under py-spy), "
        f"{total} samples; shares scaled to the unprofiled time\n"
    )
    by_kind: collections.Counter[str] = collections.Counter()
    for (_, running), n in counts.items():
        by_kind[running if running == "itself" else running.rsplit("(", 1)[-1].rstrip(")")] += n
    rows = [
        [f"{n / total * step_us:.2f}", f"{100 * n / total:.1f}", kind] for kind, n in by_kind.most_common()
    ]
    print(markdown_table(["µs / step", "%", "running (rlcollect's own Python: 'itself')"], rows), "\n")
    rows = [
        [f"{n / total * step_us:.2f}", f"{100 * n / total:.1f}", location, running]
        for (location, running), n in counts.most_common(args.top)
    ]
    print(markdown_table(["µs / step", "%", "rlcollect line", "running"], rows))


if __name__ == "__main__":
    main()
