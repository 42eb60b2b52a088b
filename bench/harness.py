"""The benchmark harness: contenders in fresh processes, interleaved, summarised, written up.

The protocol is in ``bench/README.md``. Each contender is built in a fresh interpreter
(``python -m bench.harness --serve MODULE:BUILDER KWARGS``) with one torch thread, which answers
the parent's commands on stdin / stdout, one JSON line each: after building it and running one
warm-up batch, ``calibrate S`` (how many batches make about ``S`` seconds) and ``measure`` (warm-up
batch(es), then the timed batches: frames, wall seconds, CPU seconds and memory of its process
tree). The parent asks for one repetition of each contender in turn (A B C A B C ...).

Example:
    >>> Summary.of([3.0, 1.0, 2.0]).format(1)
    '2.0 [1.0–3.0]'
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "Batches", "Contender", "Plan", "Ratio", "Summary", "cpu_seconds", "markdown_table", "memory_mb",
    "parse_args", "process_tree", "run", "run_interleaved",
]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TICKS = os.sysconf("SC_CLK_TCK")
TIMEOUT_S = 600.0  # building a contender, or one repetition
Sample = dict[str, Any]  # one repetition: frames, seconds, cpu, own_cpu, processes, rss_mb, hwm_mb


class Batches:
    """A contender in its process: calling it collects one batch and returns its frames.

    ``close`` runs before the process exits; ``warmup_batches`` run before every repetition (an
    asynchronous collector holds batches its workers collected ahead: they are used up first);
    ``pids`` names processes outside the process tree whose CPU and memory count (Ray actors).
    """

    def __init__(
        self,
        next_batch: Callable[[], int],
        close: Callable[[], Any] | None = None,
        warmup_batches: int = 1,
        pids: Callable[[], list[int]] | None = None,
    ) -> None:
        self.next_batch, self.close = next_batch, close or (lambda: None)
        self.warmup_batches, self.pids = warmup_batches, pids or list

    def __call__(self) -> int:
        return self.next_batch()


@dataclass(frozen=True)
class Contender:
    """A row: ``builder(**kwargs)``, run in the contender's process, returns its :class:`Batches`
    (or a plain function ``() -> frames``); a module-level function, ``kwargs`` JSON-able."""

    name: str
    label: str
    builder: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def command(self) -> list[str]:
        """The command line of the contender's process."""
        module = self.builder.__module__
        if module == "__main__":  # the script run with python -m: import it by its name
            module = sys.modules["__main__"].__spec__.name  # type: ignore[union-attr]
        ref = f"{module}:{self.builder.__name__}"
        return [sys.executable, "-m", "bench.harness", "--serve", ref, json.dumps(self.kwargs)]


@dataclass(frozen=True)
class Ratio:
    """A ratio to report: ``numerator`` / ``denominator`` (contender names), paired repetition by
    repetition; ``target`` is read on wall clock, and on CPU time unless ``cpu_target`` is false
    (a speed-up from more processes shows in wall-clock frames/s only)."""

    numerator: str
    denominator: str
    label: str
    target: float | None = None
    cpu_target: bool = True


@dataclass(frozen=True)
class Plan:
    """One workload of a family: its heading, contenders (the first is profiled) and ratios."""

    heading: str
    contenders: list[Contender]
    ratios: list[Ratio]


@dataclass(frozen=True)
class Summary:
    """Median, min and max of the repetitions."""

    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        return cls(statistics.median(values), min(values), max(values))

    def format(self, digits: int = 0) -> str:
        return f"{self.median:,.{digits}f} [{self.min:,.{digits}f}–{self.max:,.{digits}f}]"


# -- process trees (Linux /proc) -------------------------------------------------------------------
def process_tree(pid: int) -> list[int]:
    """``pid`` and its living descendants, parents first."""
    tree, index = [pid], 0
    while index < len(tree):
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{tree[index]}/task"):
                with contextlib.suppress(OSError), open(f"/proc/{tree[index]}/task/{task}/children") as f:
                    tree.extend(int(child) for child in f.read().split())
        index += 1
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)"
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
    except (OSError, IndexError, ValueError):
        return 0.0


def memory_mb(pids: Sequence[int], key: str = "VmRSS") -> float:
    """``key`` of ``/proc/<pid>/status`` (``VmRSS``: resident now, ``VmHWM``: the process's own peak)
    summed over the processes, in MB (gone processes count 0)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError, StopIteration), \
                open(f"/proc/{pid}/status") as f:
            total += next(int(line.split()[1]) for line in f if line.startswith(f"{key}:"))
    return total / 1024


# -- the contender's process -----------------------------------------------------------------------
def _serve(ref: str, kwargs: dict[str, Any], for_seconds: float | None = None) -> None:
    """Build the contender, warm it up, then answer the parent (or, for ``--profile``, just collect
    for ``for_seconds``)."""
    answer = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol's channel; anything else printed,
    os.dup2(2, 1)  # here or in processes started from here, goes to stderr
    import torch

    torch.set_num_threads(1)
    module, name = ref.split(":")
    batch = getattr(importlib.import_module(module), name)(**kwargs)
    batch = batch if isinstance(batch, Batches) else Batches(batch)
    try:
        batch()  # warm-up: first-call costs (allocation, lazy init) are not measured
        start = time.perf_counter()
        while for_seconds is not None and time.perf_counter() - start < for_seconds:
            batch()
        if for_seconds is not None:
            return
        answer.write(json.dumps({"pids": batch.pids()}) + "\n")
        num_batches = 1
        for line in sys.stdin:
            command, *args = line.split()
            if command == "calibrate":  # batches in a repetition of about args[0] s, timed over a fifth
                count, start = 0, time.perf_counter()
                while count == 0 or time.perf_counter() - start < float(args[0]) / 5:
                    batch()
                    count += 1
                num_batches = max(1, round(float(args[0]) * count / (time.perf_counter() - start)))
                answer.write(json.dumps({"batches": num_batches}) + "\n")
            else:
                answer.write(json.dumps(_measure(batch, num_batches)) + "\n")
    finally:
        batch.close()


def _measure(batch: Batches, num_batches: int) -> Sample:
    """Warm-up batch(es), then ``num_batches`` timed ones: frames, seconds, CPU and memory of the tree
    (CPU of the contender's own process from ``time.process_time``, of the others from ``/proc``)."""
    for _ in range(batch.warmup_batches):
        batch()
    before = {pid: cpu_seconds(pid) for pid in [*process_tree(os.getpid())[1:], *batch.pids()]}
    start, own = time.perf_counter(), time.process_time()
    frames = sum(batch() for _ in range(num_batches))
    seconds, own = time.perf_counter() - start, time.process_time() - own
    pids = [*process_tree(os.getpid()), *batch.pids()]
    others = sum(cpu_seconds(pid) - before.get(pid, 0.0) for pid in pids[1:])
    return {
        "frames": frames, "seconds": seconds, "cpu": own + others, "own_cpu": own, "processes": len(pids),
        "rss_mb": memory_mb(pids), "hwm_mb": memory_mb(pids, "VmHWM"),
    }


# -- the parent ------------------------------------------------------------------------------------
class _Process:
    """The parent's handle on one contender's process."""

    def __init__(self, contender: Contender, env: dict[str, str] | None) -> None:
        self.contender, self.peak_rss = contender, 0.0
        started = time.monotonic()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (its stderr; closed in stop())
        self.process = subprocess.Popen(
            contender.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},  # 1 thread in every process
        )
        self.extra: list[int] = []
        try:
            self.extra = self.receive()["pids"]
            self.first_batch_s = time.monotonic() - started  # interpreter, imports, build, first batch
            self.settle()
        except BaseException:
            self.stop()
            raise

    def pids(self) -> list[int]:
        return [*process_tree(self.process.pid), *self.extra]

    def receive(self, sample_memory: bool = False) -> dict[str, Any]:
        """The next answer; while waiting, every 0.2 s, the tree's resident memory (``sample_memory``)."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + TIMEOUT_S
        while not select.select([self.process.stdout], [], [], 0.2)[0]:
            if sample_memory:
                self.peak_rss = max(self.peak_rss, memory_mb(self.pids()))
            if time.monotonic() > deadline:
                raise TimeoutError(f"contender {self.contender.name!r}: no answer in {TIMEOUT_S:.0f} s")
        line = self.process.stdout.readline()
        if not line:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
            self.log.seek(0)
            tail = self.log.read().decode(errors="replace")[-4000:]
            raise RuntimeError(f"contender {self.contender.name!r} exited ({self.process.poll()}):\n{tail}")
        return dict(json.loads(line))

    def ask(self, command: str, sample_memory: bool = False) -> dict[str, Any]:
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it died: receive() reports why
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        answer = self.receive(sample_memory)
        self.settle()
        return answer

    def settle(self, limit: float = 10.0) -> None:
        """Wait (up to ``limit`` s) until the tree uses at most a clock tick of CPU per 0.1 s (after each
        answer): an asynchronous collector's workers finish the batch they started ahead before
        the next contender runs."""
        deadline, before = time.monotonic() + limit, -1.0
        while time.monotonic() < deadline:
            now = sum(cpu_seconds(pid) for pid in self.pids())
            if before >= 0 and now - before <= 1.5 / TICKS:
                return
            before = now
            time.sleep(0.1)

    def stop(self) -> None:
        """End of stdin asks the contender to close and exit; its tree is killed if it has not in 60 s."""
        pids = self.pids()
        with contextlib.suppress(OSError):
            self.process.stdin.close()  # type: ignore[union-attr]
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.process.wait()
        self.log.close()


def run_interleaved(
    contenders: Sequence[Contender], repetitions: int, seconds: float, env: dict[str, str] | None = None
) -> tuple[dict[str, list[Sample]], dict[str, str]]:
    """Measure the contenders, repetitions interleaved; the samples by name, and the contenders that
    could not be built (name -> the error's last line). ``env``: extra environment variables."""
    running: dict[str, _Process] = {}
    failed: dict[str, str] = {}
    try:
        for contender in contenders:  # built one at a time: many processes starting at once time out
            try:
                running[contender.name] = _Process(contender, env)
            except (RuntimeError, TimeoutError) as error:
                failed[contender.name] = str(error).strip().splitlines()[-1][:200]
                print(f"  {contender.name} did not run: {failed[contender.name]}", flush=True)
        for process in running.values():  # one at a time, on a quiet machine, as repetitions will run
            process.ask(f"calibrate {seconds}")
        samples: dict[str, list[Sample]] = {name: [] for name in running}
        for rep in range(repetitions):
            for name, process in running.items():
                process.peak_rss = 0.0
                sample = process.ask("measure", sample_memory=True)
                sample["rss_mb"] = max(sample["rss_mb"], process.peak_rss)
                sample["first_batch_s"] = process.first_batch_s
                samples[name].append(sample)
                wall, cpu = sample["frames"] / sample["seconds"], sample["frames"] / sample["cpu"]
                print(f"  rep {rep + 1}/{repetitions} {name:<28} {wall:>12,.0f} frames/s "
                      f"{cpu:>12,.0f} frames/CPU-s", flush=True)
    finally:
        for process in running.values():
            process.stop()
    return samples, failed


# -- statistics and reports ------------------------------------------------------------------------
def rates(samples: Sequence[Sample], clock: str = "seconds") -> list[float]:
    """Frames per second (``clock="seconds"``) or per CPU second of the tree (``"cpu"``), per repetition."""
    return [s["frames"] / s[clock] for s in samples]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table; the first column left-aligned, the others right-aligned."""
    lines = [header, [":---"] + ["---:"] * (len(header) - 1), *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def contender_table(
    contenders: Sequence[Contender], samples: dict[str, list[Sample]], failed: dict[str, str]
) -> str:
    """Frames/s, CPU, frames per repetition, processes and memory of each contender."""
    rows = []
    for c in contenders:
        if c.name in failed:
            rows.append([c.label, f"did not run: {failed[c.name]}", *[""] * 8])
            continue
        s = samples[c.name]
        rows.append([
            c.label, Summary.of(rates(s)).format(), Summary.of(rates(s, "cpu")).format(),
            f"{statistics.median(1e6 * x['own_cpu'] / x['frames'] for x in s):,.2f}",
            f"{statistics.median(x['cpu'] / x['seconds'] for x in s):.2f}", f"{s[0]['frames']:,}",
            str(max(x["processes"] for x in s)), f"{max(x['rss_mb'] for x in s):,.0f}",
            f"{max(x['hwm_mb'] for x in s):,.0f}", f"{s[0].get('first_batch_s', float('nan')):.1f}",
        ])
    header = [
        "contender", "frames/s median [min–max]", "frames / CPU-s (tree)", "main process CPU µs / frame",
        "CPUs busy", "frames / rep", "processes", "peak RSS MB (Σ tree)", "Σ VmHWM MB",
        "s to first batch (new process: imports, build, start-up)",
    ]
    return markdown_table(header, rows)


def ratio_table(ratios: Sequence[Ratio], samples: dict[str, list[Sample]]) -> str:
    """Each ratio's median [min–max] over paired repetitions, on wall clock and on CPU time."""
    rows = []
    for r in ratios:
        if r.numerator not in samples or r.denominator not in samples:
            continue
        paired = {
            clock: Summary.of([a / b for a, b in zip(rates(samples[r.numerator], key),
                                                     rates(samples[r.denominator], key), strict=True)])
            for clock, key in (("wall", "seconds"), ("CPU", "cpu"))
        }
        met = "" if r.target is None else ", ".join(
            f"{clock}: " + ("met" if summary.median >= r.target else "**missed**")
            for clock, summary in paired.items() if clock == "wall" or r.cpu_target
        )
        target = "" if r.target is None else f"≥ {r.target:g}"
        rows.append([r.label, paired["wall"].format(2), paired["CPU"].format(2), target, met])
    header = ["ratio: median [min–max] of paired repetitions", "wall clock", "CPU time", "target", "met"]
    return markdown_table(header, rows)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _commit() -> str:
    """The commit measured, ``+ changes`` when rlcollect/ differs from it."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else "unknown"

    changed = git("status", "--porcelain", "rlcollect")
    return git("rev-parse", "--short", "HEAD") + (" + changes" if changed else "")


def header(title: str, args: argparse.Namespace, method: str | None = None) -> str:
    """Title, date, machine, versions, command and method (``method``: a script's own, instead of
    the contenders-in-processes one)."""
    packages = ("torch", "numpy", "gymnasium", "tensordict", "torchrl", "ray", "ale-py", "rlcollect")
    method = method or (
        "(bench/README.md): each contender in its own fresh process, 1 torch thread per process; "
        f"{args.repetitions} repetition(s) of about {args.seconds:g} s each, contenders interleaved, each "
        "after a warm-up batch; median [min–max] over repetitions; a ratio is the median of the "
        "per-repetition ratios; CPU time and memory are the contender's whole process tree's."
    )
    return (
        f"# {title}\n\n"
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; rlcollect commit {_commit()}\n"
        f"- machine: {len(os.sched_getaffinity(0))} CPUs (`nproc`), {_cpu_model()}\n"
        f"- versions: python {platform.python_version()}, "
        + ", ".join(f"{p} {_version(p)}" for p in packages)
        + f"\n- command: `{args.command}`\n"
        f"- method {method}\n"
    )


def parse_args(
    family: str, doc: str | None, workloads: Sequence[str], repetitions: int, seconds: float,
    argv: list[str] | None = None,
) -> argparse.Namespace:
    """The flags every script takes; ``--quick`` means 1 repetition of 0.2 s on small batches."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{family}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: small batches, 1 repetition, 0.2 s")
    parser.add_argument("--workload", action="append", choices=list(workloads), help="only this (repeatable)")
    parser.add_argument("--repetitions", type=int, help=f"repetitions per contender (default {repetitions})")
    parser.add_argument("--seconds", type=float, help=f"seconds per repetition (default {seconds:g})")
    parser.add_argument("--profile", action="store_true", help="instead of measuring: py-spy flame graph of "
                        "the first (rlcollect) contender of each workload over 5 x --seconds")
    args = parser.parse_args(argv)
    args.workload = args.workload or list(workloads)
    args.repetitions = args.repetitions or (1 if args.quick else repetitions)
    args.seconds = args.seconds or (0.2 if args.quick else seconds)
    args.command = shlex.join(["python", "-m", f"bench.{family}", *(sys.argv[1:] if argv is None else argv)])
    return args


def profile(
    family: str, args: argparse.Namespace, plan: Callable[[str, bool], Plan], env: dict[str, str]
) -> None:
    """Record each workload's first contender under ``py-spy record --subprocesses`` (flame graphs)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    RESULTS.mkdir(exist_ok=True)
    for name in args.workload:
        contender = plan(name, args.quick).contenders[0]
        out = RESULTS / f"profile_{family}_{name}.svg"
        record = [py_spy, "record", "--subprocesses", "--nonblocking", "--rate", "200", "-o", str(out), "--"]
        command = [*record, *contender.command(), "--for-seconds", str(5 * args.seconds)]
        subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, check=True)
        print(f"wrote {out.relative_to(ROOT)} ({contender.label.strip('*')})")


def run(
    family: str, title: str, args: argparse.Namespace, plan: Callable[[str, bool], Plan],
    env: dict[str, str] | None = None,
) -> None:
    """Measure each workload of ``args``, print its tables and write ``bench/results/<family>.md``
    (``<family>_quick.md`` for ``--quick``) and the raw samples beside it (``.json``)."""
    if args.profile:
        profile(family, args, plan, env or {})
        return
    sections, data = [header(title, args)], {}
    print(sections[0], flush=True)
    for name in args.workload:
        workload = plan(name, args.quick)
        print(f"measuring {name} ...", flush=True)
        load = os.getloadavg()[0]
        samples, failed = run_interleaved(workload.contenders, args.repetitions, args.seconds, env)
        load_end = os.getloadavg()[0]
        sections.append(
            f"## {name}: {workload.heading}\n\n"
            f"Load average (1 min) at start / end: {load:.2f} / {load_end:.2f}\n\n"
            f"{contender_table(workload.contenders, samples, failed)}\n\n"
            f"{ratio_table(workload.ratios, samples)}\n"
        )
        print("\n" + sections[-1], flush=True)
        data[name] = {"load_average": [load, load_end], "failed": failed, "samples": samples}
    stem = family + ("_quick" if args.quick else "")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.md").write_text("\n".join(sections))
    raw = {"command": args.command, "workloads": data}
    (RESULTS / f"{stem}.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(f"wrote bench/results/{stem}.md and {stem}.json")


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "--serve":
        raise SystemExit("usage: python -m bench.harness --serve MODULE:BUILDER KWARGS [--for-seconds S]")
    from bench.harness import _serve as serve  # not this __main__ copy: builders use bench.harness's Batches

    serve(sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[5]) if len(sys.argv) > 5 else None)
