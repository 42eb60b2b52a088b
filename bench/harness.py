"""Shared benchmark machinery: contenders in their own processes, interleaved, summarised.

How a measurement goes (see ``/work/shared/BENCHMARKS.md``):

1. Each contender of a workload is built in a fresh process (``multiprocessing`` spawn), so its
   peak RSS is its own and no contender inherits another's imports, threads or caches. Every
   process runs torch with one thread.
2. A contender is a :data:`BatchFn`: a function that collects one batch and returns how many
   frames (env steps summed over envs) it collected. In its process it runs one warm-up batch.
   Once all contenders are built, each in turn runs calibration batches (a fifth of
   ``target_seconds``) that fix how many batches a repetition holds (about ``target_seconds``);
   slow contenders thus get fewer frames.
3. The parent asks the contenders for one repetition each in turn (A B C A B C ...). Each
   repetition runs one untimed warm-up batch, then the timed batches; the worker answers with
   frames, seconds and its peak RSS so far.
4. :class:`Summary` gives the median, min and max of the repetitions' frames/s.

Example:
    >>> Summary.of([3.0, 1.0, 2.0])
    Summary(median=2.0, min=1.0, max=3.0)
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import multiprocessing as mp
import os
import platform
import resource
import statistics
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal, TypeVar

__all__ = [
    "BatchFn",
    "Builder",
    "ContenderResult",
    "Sample",
    "Summary",
    "machine_info",
    "peak_rss_mb",
    "run_interleaved",
    "source_digest",
]

#: Collects one batch and returns the number of frames it collected.
BatchFn = Callable[[], int]
W = TypeVar("W")
#: Builds a contender for a workload, in the contender's own process (must be picklable).
Builder = Callable[[W], BatchFn]

_READY_TIMEOUT_S = 300.0  # building a contender: imports, envs, a warm-up batch
_SAMPLE_TIMEOUT_S = 300.0  # calibration, or a repetition: a warm-up batch and about target_seconds


@dataclass(frozen=True)
class Sample:
    """One timed repetition of one contender.

    ``cpu_seconds`` is the process's CPU time over the repetition: on a shared machine, where
    other jobs take the CPU away now and then, frames per CPU second are what a quiet machine's
    frames per second would be (for these single-threaded contenders).
    """

    frames: int
    seconds: float
    cpu_seconds: float
    peak_rss_mb: float

    @property
    def fps(self) -> float:
        """Frames per second of this repetition (wall clock)."""
        return self.frames / self.seconds

    @property
    def cpu_fps(self) -> float:
        """Frames per CPU second of this repetition."""
        return self.frames / self.cpu_seconds


@dataclass(frozen=True)
class Summary:
    """Median, min and max of a few numbers (the repetitions of a measurement)."""

    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        """Summarise ``values`` (at least one)."""
        return cls(statistics.median(values), min(values), max(values))

    def format(self, digits: int = 0) -> str:
        """``median [min–max]`` with ``digits`` decimals and thousands separators."""
        return f"{self.median:,.{digits}f} [{self.min:,.{digits}f}–{self.max:,.{digits}f}]"


@dataclass(frozen=True)
class ContenderResult:
    """All repetitions of one contender on one workload."""

    name: str
    samples: tuple[Sample, ...]
    batches_per_rep: int

    @property
    def fps(self) -> Summary:
        """Frames/s (wall clock) over the repetitions."""
        return Summary.of([s.fps for s in self.samples])

    @property
    def cpu_fps(self) -> Summary:
        """Frames per CPU second over the repetitions."""
        return Summary.of([s.cpu_fps for s in self.samples])

    @property
    def frames_per_rep(self) -> int:
        """Frames in one timed repetition."""
        return self.samples[0].frames

    @property
    def peak_rss_mb(self) -> float:
        """Peak RSS of the contender's process (and its waited-for children), in MB."""
        return max(s.peak_rss_mb for s in self.samples)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: summary, per-repetition samples and memory."""
        return {
            "fps": asdict(self.fps),
            "cpu_fps": asdict(self.cpu_fps),
            "frames_per_rep": self.frames_per_rep,
            "batches_per_rep": self.batches_per_rep,
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "samples": [{**asdict(s), "fps": s.fps, "cpu_fps": s.cpu_fps} for s in self.samples],
        }


def peak_rss_mb() -> float:
    """Peak resident memory of this process plus the largest of its waited-for children, in MB.

    ``ru_maxrss`` is in kilobytes on Linux. A contender that spawns no processes has no children,
    so this is the peak RSS of its whole process tree.
    """
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 1024


def _time_batches(batch: BatchFn, num_batches: int) -> tuple[int, float, float]:
    """Run ``num_batches`` batches; return the frames collected, the seconds and CPU seconds taken."""
    start, cpu_start = time.perf_counter(), time.process_time()
    frames = sum(batch() for _ in range(num_batches))
    return frames, time.perf_counter() - start, time.process_time() - cpu_start


def _calibrate(batch: BatchFn, target_seconds: float) -> int:
    """How many batches make a repetition of about ``target_seconds`` (timed over a fifth of it)."""
    count, start = 0, time.process_time()  # CPU time: what other jobs take does not shorten reps
    while count == 0 or time.process_time() - start < target_seconds / 5:
        batch()
        count += 1
    seconds_per_batch = (time.process_time() - start) / count
    return max(1, round(target_seconds / seconds_per_batch))


def _serve(conn: Connection, builder: Builder[Any], workload: Any, target_seconds: float) -> None:
    """Worker process: build the contender, warm it up, then time repetitions on request."""
    import torch  # here, not at module level: the parent process never needs torch

    torch.set_num_threads(1)
    try:
        batch = builder(workload)
        batch()  # warm-up: first-call costs (allocation, lazy init) are not measured
        conn.send(("ready", None))
        num_batches = 1
        while (command := conn.recv()) != "stop":
            if command == "calibrate":  # asked for once all contenders are built: the CPU is quiet
                num_batches = _calibrate(batch, target_seconds)
                conn.send(("calibrated", num_batches))
            else:
                batch()  # warm-up batch before every repetition
                frames, seconds, cpu_seconds = _time_batches(batch, num_batches)
                conn.send(("sample", Sample(frames, seconds, cpu_seconds, peak_rss_mb())))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        raise
    finally:
        conn.close()


@dataclass
class _Worker:
    """The parent's handle on one contender's process."""

    name: str
    process: mp.process.BaseProcess
    conn: Connection
    batches_per_rep: int = 0

    def receive(self, expected: str, timeout: float) -> Any:
        """The payload of the worker's next message, which must be ``expected``."""
        if not self.conn.poll(timeout):
            raise TimeoutError(f"contender {self.name!r} sent nothing within {timeout:.0f} s")
        try:
            kind, payload = self.conn.recv()
        except EOFError:
            self.process.join(5)
            raise RuntimeError(
                f"contender {self.name!r} exited (code {self.process.exitcode}) without a result"
            ) from None
        if kind == "error":
            raise RuntimeError(f"contender {self.name!r} failed:\n{payload}")
        if kind != expected:
            raise RuntimeError(f"contender {self.name!r} sent {kind!r}, expected {expected!r}")
        return payload

    def ask_to_stop(self) -> None:
        """Tell the worker to exit (it may be gone already)."""
        with contextlib.suppress(BrokenPipeError, OSError):
            self.conn.send("stop")

    def join(self) -> None:
        """Wait for the worker to exit; terminate it if it does not within a few seconds."""
        self.process.join(10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
        self.conn.close()


def run_interleaved(
    contenders: dict[str, Builder[W]],
    workload: W,
    *,
    repetitions: int,
    target_seconds: float,
    start_method: Literal["spawn", "fork"] = "spawn",
    log: Callable[[str], None] = print,
) -> dict[str, ContenderResult]:
    """Measure every contender on ``workload``, repetitions interleaved (A B C A B C ...).

    Args:
        contenders: name -> builder; each builder runs in a fresh spawned process and must be a
            module-level function (it is pickled by reference), as must ``workload`` be picklable.
        workload: passed to each builder.
        repetitions: timed repetitions per contender (the median of them is reported).
        target_seconds: about how long one repetition lasts.
        start_method: ``"spawn"`` (fresh interpreters: isolated, peak RSS comparable) or ``"fork"``
            (starts in milliseconds, for smoke runs: the workers share what the parent imported,
            so their peak RSS includes it).
        log: progress messages.

    Returns:
        name -> :class:`ContenderResult`, in the order of ``contenders``.
    """
    context = mp.get_context("fork") if start_method == "fork" else mp.get_context("spawn")
    workers: list[_Worker] = []
    try:
        for name, builder in contenders.items():  # built side by side: building is not timed
            parent_conn, child_conn = context.Pipe()
            process = context.Process(
                target=_serve, args=(child_conn, builder, workload, target_seconds), daemon=True
            )
            process.start()
            child_conn.close()
            workers.append(_Worker(name, process, parent_conn))
        for worker in workers:
            worker.receive("ready", _READY_TIMEOUT_S)
        for worker in workers:  # one at a time, as the repetitions will run
            worker.conn.send("calibrate")
            worker.batches_per_rep = worker.receive("calibrated", _SAMPLE_TIMEOUT_S)
        samples: dict[str, list[Sample]] = {worker.name: [] for worker in workers}
        for rep in range(repetitions):
            for worker in workers:
                worker.conn.send("measure")
                sample: Sample = worker.receive("sample", _SAMPLE_TIMEOUT_S)
                samples[worker.name].append(sample)
                log(
                    f"  rep {rep + 1}/{repetitions} {worker.name:<18} {sample.fps:>10,.0f} frames/s "
                    f"{sample.cpu_fps:>10,.0f} frames/CPU-s"
                )
    finally:  # all told first, then joined: their exits overlap
        for worker in workers:
            worker.ask_to_stop()
        for worker in workers:
            worker.join()
    return {w.name: ContenderResult(w.name, tuple(samples[w.name]), w.batches_per_rep) for w in workers}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def source_digest(package_dir: Path) -> str:
    """Short SHA-256 over a package's ``.py`` files (paths and contents): which code was measured."""
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py")):
        digest.update(str(path.relative_to(package_dir)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def machine_info() -> dict[str, str]:
    """Date, CPU count and model, and the versions that matter for these numbers."""
    info = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
    }
    for package in ("torch", "numpy", "gymnasium", "tensordict", "torchrl", "rlcollect"):
        info[package] = _version(package)
    return info
