"""Where rlcollect's multi-process CPU time goes, per process and by source line, in µs per frame.

For one workload of :mod:`bench.multi_process` it runs, each alone and in turn (``--rounds`` times):

- ``single``: rlcollect's ``Collector`` with all ``N`` envs in one process;
- ``single-M``: the same with one worker's ``M`` envs (what each worker does, without the
  multi-process machinery);
- ``sync``: rlcollect's ``MultiSyncCollector`` (``num_workers`` x ``M`` envs),

and reads each process's CPU time from ``/proc/<pid>/task/*/schedstat`` (nanoseconds): µs of CPU
per frame of the parent and of the workers. CPU time, not wall time: on a shared machine it is
what the work costs, whoever waits for a CPU meanwhile.

Then it records ``sync`` and ``single-M`` under ``py-spy record --subprocesses --nonblocking``
and charges each sample to the innermost rlcollect source line on its stack (as
:mod:`bench.profile_rlcollect` does), per process role, scaled to the unprofiled CPU µs per frame.

    python -m bench.profile_multi --workload pong-2x4 --seconds 10

Needs py-spy. Sampling is statistical: lines under ~1 % move between runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import process_tree
from bench.profile_rlcollect import _where
from bench.report import markdown_table

__all__ = ["main"]

_LOOP = "_timed_loop"
KINDS = ("single", "single-M", "sync")


def _cpu_ns(pid: int) -> int:
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as schedstat:
                total += int(schedstat.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def _target(workload_name: str, kind: str, seconds: float) -> None:
    """Target process: build, warm up, collect for ``seconds``; print frames and CPU per process."""
    import torch

    from bench.multi_process import WORKLOADS, make_policy
    from rlcollect import Collector, MultiSyncCollector

    torch.set_num_threads(1)
    w = next(x for x in WORKLOADS if x.name == workload_name)
    policy = make_policy(w.env_id)
    collector: Any
    if kind == "sync":
        collector = MultiSyncCollector(
            w.env_id,
            policy,
            num_workers=w.num_workers,
            num_envs_per_worker=w.envs_per_worker,
            frames_per_batch=w.frames_per_batch,
            seed=0,
            return_same_td=True,
        )
    else:
        envs = w.num_envs if kind == "single" else w.envs_per_worker
        collector = Collector(
            w.env_id, policy, frames_per_batch=envs * w.steps, num_envs=envs, seed=0, return_same_td=True
        )
    batches = iter(collector)
    for _ in range(3):
        next(batches)
    pids = process_tree(os.getpid())
    workers = [p for p in (getattr(collector, "worker_pids", None) or []) if p is not None]
    before = {pid: _cpu_ns(pid) for pid in pids}
    frames, count, elapsed = _timed_loop(batches, seconds)
    cpu = {pid: (_cpu_ns(pid) - before[pid]) / 1e9 for pid in pids}
    collector.shutdown()
    print(
        json.dumps(
            {
                "frames": frames,
                "batches": count,
                "seconds": elapsed,
                "parent": cpu[os.getpid()],
                "workers": [cpu[p] for p in workers],
                "pids": {"parent": os.getpid(), "workers": workers},
                "others": sum(v for p, v in cpu.items() if p != os.getpid() and p not in workers),
            }
        )
    )


def _timed_loop(batches: Any, seconds: float) -> tuple[int, int, float]:
    """Collect for ``seconds`` (only the parent's samples in here count)."""
    frames = count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        frames += next(batches).numel()
        count += 1
    return frames, count, time.perf_counter() - start


def _run(workload: str, kind: str, seconds: float, prefix: list[str] | None = None) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "bench.profile_multi",
        "--target",
        kind,
        "--workload",
        workload,
        "--seconds",
        str(seconds),
    ]
    out = subprocess.run([*(prefix or []), *command], check=True, capture_output=True, text=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def _command_loop_lines() -> range:
    """Lines of ``worker_main``'s command loop (``while True:`` up to its ``finally:``)."""
    import rlcollect.workers.worker as worker

    lines = Path(worker.__file__).read_text().splitlines()
    start = next(i for i, line in enumerate(lines, 1) if line.startswith("def worker_main"))
    loop = next(i for i, line in enumerate(lines, 1) if i > start and line.strip() == "while True:")
    end = next(i for i, line in enumerate(lines, 1) if i > loop and line.strip() == "finally:")
    return range(loop, end)


def _in_command_loop(frames: list[str]) -> bool:
    """Whether a worker's stack is in ``worker_main``'s command loop (not its start-up or shutdown)."""
    loop = _command_loop_lines()
    for frame in frames:
        if frame.startswith("worker_main ") and "workers/worker.py:" in frame:
            return int(frame.rsplit(":", 1)[1].rstrip(")")) in loop
    return False


def _attribute(raw: Path, parent_pid: int) -> dict[str, collections.Counter[tuple[str, str]]]:
    """Samples per role ("parent", "workers") and (rlcollect line, what it ran)."""
    counts: dict[str, collections.Counter[tuple[str, str]]] = {
        "parent": collections.Counter(),
        "workers": collections.Counter(),
    }
    for record in raw.read_text().splitlines():
        stack, _, count = record.rpartition(" ")
        frames = stack.split(";")
        processes = [f for f in frames if f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("process ")]
        if not processes:
            continue
        pid = int(processes[-1].split(":", 1)[0].split()[1])
        if pid == parent_pid:
            if not any(f.startswith(f"{_LOOP} ") for f in frames):
                continue
            role = "parent"
        else:
            if not _in_command_loop(frames):
                continue  # start-up and shutdown
            role = "workers"
        counts[role][_where(frames)] += int(count)
    return counts


def _profile(workload: str, kind: str, seconds: float, rate: int, py_spy: str) -> tuple[dict[str, Any], Any]:
    with tempfile.TemporaryDirectory() as folder:
        raw = Path(folder) / "profile.txt"
        record = [
            py_spy,
            "record",
            "--subprocesses",
            "--nonblocking",
            "--rate",
            str(rate),
            "--format",
            "raw",
            "-o",
            str(raw),
            "--",
        ]
        result = _run(workload, kind, seconds, record)
        return result, _attribute(raw, result["pids"]["parent"])


def _by_kind(counts: collections.Counter[tuple[str, str]]) -> collections.Counter[str]:
    kinds: collections.Counter[str] = collections.Counter()
    for (_, running), n in counts.items():
        kinds[running if running == "itself" else running.rsplit("(", 1)[-1].rstrip(")")] += n
    return kinds


def main(argv: list[str] | None = None) -> None:
    """Measure CPU per frame per process, then profile, and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="pong-2x4", help="a workload of bench.multi_process")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of each run")
    parser.add_argument("--rounds", type=int, default=3, help="unprofiled rounds of the three runs")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second and process")
    parser.add_argument("--top", type=int, default=20, help="lines to show")
    parser.add_argument("--target", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.target:
        _target(args.workload, args.target, args.seconds)
        return
    from bench.multi_process import WORKLOADS

    w = next(x for x in WORKLOADS if x.name == args.workload)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    for _ in range(args.rounds):
        for kind in KINDS:
            runs[kind].append(_run(args.workload, kind, args.seconds))

    def per_frame(kind: str, what: str) -> float:
        values = []
        for r in runs[kind]:
            value = {"parent": r["parent"], "workers": sum(r["workers"]), "others": r["others"]}[what]
            values.append(value / r["frames"] * 1e6)
        return statistics.median(values)

    labels = {
        "single": f"Collector, 1 process x {w.num_envs} envs",
        "single-M": f"Collector, 1 process x {w.envs_per_worker} envs (one worker's share)",
        "sync": f"MultiSyncCollector, {w.num_workers} x {w.envs_per_worker} envs",
    }
    rows = []
    for kind in KINDS:
        parent, workers, others = (per_frame(kind, x) for x in ("parent", "workers", "others"))
        fps = statistics.median(r["frames"] / r["seconds"] for r in runs[kind])
        batch_frames = runs[kind][0]["frames"] / runs[kind][0]["batches"]
        rows.append(
            [
                labels[kind],
                f"{parent + workers + others:.1f}",
                f"{parent:.2f}",
                f"{workers:.1f}",
                f"{others:.2f}",
                f"{parent * batch_frames:,.0f}",
                f"{fps:,.0f}",
            ]
        )
    print(f"## {args.workload}: CPU µs per frame (median of {args.rounds} runs of {args.seconds:g} s each)\n")
    print(
        markdown_table(
            [
                "run",
                "total",
                "parent",
                "workers (sum)",
                "other processes",
                "parent µs / batch",
                "frames/s (wall, shared machine)",
            ],
            rows,
        ),
        "\n",
    )

    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    for kind in ("sync", "single-M"):
        result, counts = _profile(args.workload, kind, args.seconds, args.rate, py_spy)
        roles = ("parent", "workers") if kind == "sync" else ("parent",)
        for role in roles:
            total = sum(counts[role].values())
            if not total:
                continue
            cpu = (result["parent"] if role == "parent" else sum(result["workers"])) / result["frames"] * 1e6
            print(f"### {labels[kind]}: {role}, {cpu:.2f} CPU µs per frame under py-spy, {total} samples\n")
            rows = [
                [f"{n / total * cpu:.2f}", f"{100 * n / total:.1f}", k]
                for k, n in _by_kind(counts[role]).most_common()
            ]
            print(
                markdown_table(["µs / frame", "%", "running (rlcollect's own Python: 'itself')"], rows), "\n"
            )
            rows = [
                [f"{n / total * cpu:.2f}", f"{100 * n / total:.1f}", loc, running]
                for (loc, running), n in counts[role].most_common(args.top)
            ]
            print(markdown_table(["µs / frame", "%", "rlcollect line", "running"], rows), "\n")


if __name__ == "__main__":
    main()
