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
   repetition runs one untimed warm-up batch (or ``batch.warmup_batches``), then the timed
   batches; the worker answers with frames, seconds and its peak RSS so far.
4. :class:`Summary` gives the median, min and max of the repetitions' frames/s.

Contenders that start processes of their own (multi-process collectors, ``AsyncVectorEnv``) are
measured with ``run_interleaved(..., daemon=False, process_tree=True)``: their process is not
daemonic (a daemonic process cannot start children), repetitions are sized by wall time (the
contender's own CPU time is a small part of the work), CPU time and memory are those of the
contender's whole process tree (itself and its descendants, read from ``/proc``), and a contender
whose :data:`BatchFn` has a ``close()`` method is closed before its process exits. A :data:`BatchFn`
with a ``warmup_batches`` attribute gets that many warm-up batches before each repetition instead of
one (an asynchronous collector holds batches its workers collected ahead: they are used up first).

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
import signal
import statistics
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
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
    "TreeMemory",
    "cpu_seconds_by_process",
    "machine_info",
    "peak_rss_mb",
    "process_tree",
    "run_interleaved",
    "runqueue_wait_seconds",
    "source_digest",
    "tree_cpu_seconds",
    "tree_memory",
    "tree_peak_rss_mb",
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
    #: process-tree runs only (``process_tree=True``): the largest sum over the tree of ``VmRSS``
    #: and of ``Pss`` seen while the repetition ran (sampled by the parent), and the tree's size
    tree_rss_mb: float | None = None
    tree_pss_mb: float | None = None
    processes: int | None = None
    #: process-tree runs only: CPU seconds of the contender's process, then of each descendant (by
    #: pid), over the repetition; and the seconds its threads spent runnable but waiting for a CPU
    cpu_by_process: tuple[float, ...] | None = None
    runqueue_wait_seconds: float | None = None

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
        """Peak RSS of the contender's process (and its waited-for children), in MB.

        In a process-tree run: the sum of every process's own peak (``VmHWM``) over the tree.
        """
        return max(s.peak_rss_mb for s in self.samples)

    @property
    def tree_rss_mb(self) -> float | None:
        """Process-tree runs: the largest sampled sum of ``VmRSS`` over the tree, in MB."""
        values = [s.tree_rss_mb for s in self.samples if s.tree_rss_mb is not None]
        return max(values) if values else None

    @property
    def tree_pss_mb(self) -> float | None:
        """Process-tree runs: the largest sampled sum of ``Pss`` over the tree, in MB."""
        values = [s.tree_pss_mb for s in self.samples if s.tree_pss_mb is not None]
        return max(values) if values else None

    @property
    def processes(self) -> int | None:
        """Process-tree runs: how many processes the contender's tree holds."""
        values = [s.processes for s in self.samples if s.processes is not None]
        return max(values) if values else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: summary, per-repetition samples and memory."""
        return {
            "fps": asdict(self.fps),
            "cpu_fps": asdict(self.cpu_fps),
            "frames_per_rep": self.frames_per_rep,
            "batches_per_rep": self.batches_per_rep,
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            **(
                {}
                if self.tree_rss_mb is None
                else {
                    "tree_rss_mb": round(self.tree_rss_mb, 1),
                    "tree_pss_mb": None if self.tree_pss_mb is None else round(self.tree_pss_mb, 1),
                    "processes": self.processes,
                }
            ),
            "samples": [
                {**{k: v for k, v in asdict(s).items() if v is not None}, "fps": s.fps, "cpu_fps": s.cpu_fps}
                for s in self.samples
            ],
        }


def peak_rss_mb() -> float:
    """Peak resident memory of this process plus the largest of its waited-for children, in MB.

    ``ru_maxrss`` is in kilobytes on Linux. A contender that spawns no processes has no children,
    so this is the peak RSS of its whole process tree.
    """
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 1024


# -- process trees (Linux /proc) -------------------------------------------------------------------
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its living descendants (children of any of their threads), parents first."""
    tree, index = [pid], 0
    while index < len(tree):
        try:
            tasks = os.listdir(f"/proc/{tree[index]}/task")
        except OSError:
            tasks = []
        for task in tasks:
            try:
                with open(f"/proc/{tree[index]}/task/{task}/children") as children:
                    tree.extend(int(child) for child in children.read().split())
            except OSError:
                pass
        index += 1
    return tree


def cpu_seconds_by_process(pids: Sequence[int]) -> dict[int, float]:
    """User + system CPU seconds of each process (all its threads); gone processes count 0.

    Read from ``/proc/<pid>/stat`` (clock-tick resolution, 10 ms): take differences over at least
    a second.
    """
    seconds = {}
    for pid in pids:
        ticks = 0
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()  # after "pid (comm)"
            ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat
        except (OSError, IndexError, ValueError):
            pass
        seconds[pid] = ticks / _CLOCK_TICKS
    return seconds


def tree_cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of the processes together (see :func:`cpu_seconds_by_process`)."""
    return sum(cpu_seconds_by_process(pids).values())


def runqueue_wait_seconds(pids: Sequence[int]) -> float:
    """Seconds the processes' (living) threads spent runnable, waiting for a CPU (``schedstat``)."""
    nanoseconds = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as schedstat:
                    nanoseconds += int(schedstat.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return nanoseconds / 1e9


def _status_kb(pid: int, keys: Sequence[str]) -> dict[str, int]:
    values = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key = line.split(":", 1)[0]
                if key in keys:
                    values[key] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return values


def tree_peak_rss_mb(pids: Sequence[int]) -> float:
    """Sum of the processes' own peak resident sets (``VmHWM``), in MB; gone processes count 0.

    An upper bound of the tree's peak: the processes' peaks need not coincide, and pages shared
    between processes (shared memory, copy-on-write after fork) count once per process.
    """
    return sum(_status_kb(pid, ("VmHWM",)).get("VmHWM", 0) for pid in pids) / 1024


@dataclass(frozen=True)
class TreeMemory:
    """Resident memory of a process tree now: ``VmRSS`` summed, and ``Pss`` summed (MB).

    ``Pss`` (proportional set size) charges a page shared by ``k`` processes ``1/k`` to each, so
    its sum counts shared memory and copy-on-write pages once: the tree's actual footprint.
    """

    rss_mb: float
    pss_mb: float
    processes: int


def tree_memory(pids: Sequence[int]) -> TreeMemory:
    """:class:`TreeMemory` of the processes (gone ones count 0)."""
    rss = pss = 0
    for pid in pids:
        rss += _status_kb(pid, ("VmRSS",)).get("VmRSS", 0)
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                        break
        except (OSError, ValueError, IndexError):
            pass
    return TreeMemory(rss / 1024, pss / 1024, len(pids))


def _time_batches(batch: BatchFn, num_batches: int) -> tuple[int, float, float]:
    """Run ``num_batches`` batches; return the frames collected, the seconds and CPU seconds taken."""
    start, cpu_start = time.perf_counter(), time.process_time()
    frames = sum(batch() for _ in range(num_batches))
    return frames, time.perf_counter() - start, time.process_time() - cpu_start


def _calibrate(batch: BatchFn, target_seconds: float, clock: Callable[[], float] = time.process_time) -> int:
    """How many batches make a repetition of about ``target_seconds`` (timed over a fifth of it).

    ``clock`` is the process's CPU time by default (what other jobs take does not shorten reps);
    wall time for contenders whose work happens in other processes.
    """
    count, start = 0, clock()
    while count == 0 or clock() - start < target_seconds / 5:
        batch()
        count += 1
    seconds_per_batch = (clock() - start) / count
    return max(1, round(target_seconds / seconds_per_batch))


def _tree_sample(batch: BatchFn, num_batches: int) -> Sample:
    """Time ``num_batches`` batches; CPU (per process), run-queue waits and peak RSS of the tree."""
    pid = os.getpid()
    pids = process_tree(pid)
    wait_start, cpu_start = runqueue_wait_seconds(pids), cpu_seconds_by_process(pids[1:])
    start, own_start = time.perf_counter(), time.process_time()
    frames = sum(batch() for _ in range(num_batches))
    seconds, own = time.perf_counter() - start, time.process_time() - own_start
    cpu_end = cpu_seconds_by_process(pids[1:])
    wait = runqueue_wait_seconds(pids) - wait_start
    children = tuple(cpu_end[p] - cpu_start[p] for p in sorted(pids[1:]))
    return Sample(
        frames, seconds, own + sum(children), tree_peak_rss_mb(process_tree(pid)),
        cpu_by_process=(own, *children), runqueue_wait_seconds=wait,
    )


def _close(batch: Any) -> None:
    close = getattr(batch, "close", None)
    if callable(close):
        close()


def _serve(
    conn: Connection,
    builder: Builder[Any],
    workload: Any,
    target_seconds: float,
    tree: bool = False,
) -> None:
    """Worker process: build the contender, warm it up, then time repetitions on request.

    With ``tree``, repetitions are sized by wall time, CPU seconds are the whole process tree's
    (the contender's own from ``time.process_time``, its descendants' from ``/proc``), and the
    peak RSS is :func:`tree_peak_rss_mb` of the tree.
    """
    import torch  # here, not at module level: the parent process never needs torch

    torch.set_num_threads(1)
    batch: Any = None
    try:
        batch = builder(workload)
        batch()  # warm-up: first-call costs (allocation, lazy init) are not measured
        conn.send(("ready", None))
        num_batches = 1
        warmup = int(getattr(batch, "warmup_batches", 1))
        while True:
            try:
                command = conn.recv()
            except EOFError:  # the parent is gone
                break
            if command == "stop":
                break
            if command == "calibrate":  # asked for once all contenders are built: the CPU is quiet
                clock = time.perf_counter if tree else time.process_time
                num_batches = _calibrate(batch, target_seconds, clock)
                conn.send(("calibrated", num_batches))
            else:
                for _ in range(warmup):  # warm-up batch(es) before every repetition
                    batch()
                if tree:
                    conn.send(("sample", _tree_sample(batch, num_batches)))
                else:
                    frames, seconds, cpu_seconds = _time_batches(batch, num_batches)
                    conn.send(("sample", Sample(frames, seconds, cpu_seconds, peak_rss_mb())))
    except BaseException:
        with contextlib.suppress(BrokenPipeError, OSError):
            conn.send(("error", traceback.format_exc()))
        raise
    finally:
        try:
            _close(batch)  # stops the contender's own processes before this one exits
        finally:
            conn.close()


@dataclass
class _Worker:
    """The parent's handle on one contender's process."""

    name: str
    process: mp.process.BaseProcess
    conn: Connection
    batches_per_rep: int = 0

    def receive(
        self, expected: str, timeout: float, on_wait: Callable[[], None] | None = None, every: float = 0.2
    ) -> Any:
        """The payload of the worker's next message, which must be ``expected``.

        ``on_wait`` is called about every ``every`` seconds while waiting (and once at the start).
        """
        deadline = time.monotonic() + timeout
        if on_wait is not None:
            on_wait()
            while not self.conn.poll(min(every, max(0.0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"contender {self.name!r} sent nothing within {timeout:.0f} s")
                on_wait()
        elif not self.conn.poll(timeout):
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

    def join(self, timeout: float = 10.0) -> None:
        """Wait for the worker to exit; terminate it if it does not within ``timeout`` seconds.

        Descendants that outlive a terminated worker (its own worker processes) are killed too.
        """
        self.process.join(timeout)
        if self.process.is_alive():
            pid = self.process.pid
            descendants = process_tree(pid)[1:] if pid is not None else []
            self.process.terminate()
            self.process.join(5)
            for child in descendants:
                with contextlib.suppress(OSError):
                    os.kill(child, signal.SIGKILL)
        self.conn.close()


def run_interleaved(
    contenders: dict[str, Builder[W]],
    workload: W,
    *,
    repetitions: int,
    target_seconds: float,
    start_method: Literal["spawn", "fork"] = "spawn",
    log: Callable[[str], None] = print,
    daemon: bool = True,
    process_tree: bool = False,
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
        daemon: start the contenders' processes daemonic (killed with the parent). Contenders
            that start processes of their own need ``False`` (a daemonic process cannot have
            children); each is then asked to stop (its ``BatchFn.close()`` runs) and joined,
            also when the run fails.
        process_tree: contenders whose work happens in processes of their own: they are built one
            after the other (not side by side), repetitions are sized by wall time, CPU time is
            the contender's whole process tree's, peak RSS is
            :func:`tree_peak_rss_mb` of the tree, and while a repetition runs the parent samples
            the tree's memory (:func:`tree_memory`, every 0.2 s) into ``Sample.tree_rss_mb`` and
            ``tree_pss_mb``.

    Returns:
        name -> :class:`ContenderResult`, in the order of ``contenders``.
    """
    context = mp.get_context("fork") if start_method == "fork" else mp.get_context("spawn")
    tree = process_tree
    workers: list[_Worker] = []
    try:
        for name, builder in contenders.items():  # built side by side: building is not timed
            parent_conn, child_conn = context.Pipe()
            process = context.Process(
                target=_serve, args=(child_conn, builder, workload, target_seconds, tree), daemon=daemon
            )
            process.start()
            child_conn.close()
            workers.append(_Worker(name, process, parent_conn))
            if process_tree:  # built one at a time: many processes starting at once time out
                workers[-1].receive("ready", _READY_TIMEOUT_S)
                _settle(process.pid)
        for worker in workers if not process_tree else []:
            worker.receive("ready", _READY_TIMEOUT_S)
        for worker in workers:  # one at a time, as the repetitions will run
            if tree:
                for other in workers:
                    _settle(other.process.pid)
            worker.conn.send("calibrate")
            worker.batches_per_rep = worker.receive("calibrated", _SAMPLE_TIMEOUT_S)
        if tree:
            _settle(workers[-1].process.pid)
        samples: dict[str, list[Sample]] = {worker.name: [] for worker in workers}
        for rep in range(repetitions):
            for worker in workers:
                worker.conn.send("measure")
                peak: list[TreeMemory] = []
                on_wait = None
                if tree:
                    pid = worker.process.pid
                    assert pid is not None

                    def on_wait(pid: int = pid, peak: list[TreeMemory] = peak) -> None:
                        peak.append(tree_memory(_process_tree(pid)))

                sample: Sample = worker.receive("sample", _SAMPLE_TIMEOUT_S, on_wait)
                if peak:
                    sample = replace(
                        sample,
                        tree_rss_mb=max(m.rss_mb for m in peak),
                        tree_pss_mb=max(m.pss_mb for m in peak),
                        processes=max(m.processes for m in peak),
                    )
                samples[worker.name].append(sample)
                if tree:  # an async contender's workers may still finish a prefetched batch
                    _settle(worker.process.pid)
                log(
                    f"  rep {rep + 1}/{repetitions} {worker.name:<18} {sample.fps:>10,.0f} frames/s "
                    f"{sample.cpu_fps:>10,.0f} frames/CPU-s"
                )
    finally:  # all told first, then joined: their exits overlap
        for worker in workers:
            worker.ask_to_stop()
        for worker in workers:
            worker.join(10.0 if daemon else 60.0)  # closing a contender's own workers takes a while
    return {w.name: ContenderResult(w.name, tuple(samples[w.name]), w.batches_per_rep) for w in workers}


_process_tree = process_tree  # run_interleaved's argument of that name hides the function


def _settle(pid: int | None, window: float = 0.1, limit: float = 10.0) -> None:
    """Wait (up to ``limit`` s) until ``pid``'s process tree uses at most one clock tick per ``window``.

    Between repetitions: a contender whose workers collect ahead (asynchronous collectors) would
    otherwise take CPU from the next contender's repetition.
    """
    if pid is None:
        return
    deadline = time.monotonic() + limit
    before = tree_cpu_seconds(_process_tree(pid))
    while time.monotonic() < deadline:
        time.sleep(window)
        now = tree_cpu_seconds(_process_tree(pid))
        if now - before <= 1.5 / _CLOCK_TICKS:
            return
        before = now


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
