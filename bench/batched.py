"""Batched inference: rlcollect's AsyncBatchedCollector vs MultiSync, one process and TorchRL; start-up.

Workloads (bench/workloads.py):

- pong-8: 8 preprocessed Pong envs (``AtariPreprocessing`` 84 x 84 gray, 4 stacked frames), the
  Nature CNN. Contenders, each in its own process (bench/README.md): rlcollect ``Collector`` (8 envs
  in one process), ``MultiSyncCollector`` (2 workers x 4 envs), ``AsyncBatchedCollector`` (2 env
  workers x 4 envs, one policy server in the main process; an asynchronous batch is one worker's,
  ``frames_per_batch / 2``: the same steps per env, and each repetition starts after 3 warm-up
  batches), the same with ``device="cuda"`` where a GPU is seen, and TorchRL 0.14's
  ``AsyncBatchedCollector`` (8 ``GymWrapper`` envs, 2 worker processes x 4, see ``torchrl_async``).
- slow-8: 4 ``SlowEnv`` whose steps sleep 0.2, 0.5, 1 and 2 ms, one per worker, an MLP:
  ``MultiSyncCollector`` (each batch waits for the slowest env) vs ``AsyncBatchedCollector``.

Then (and alone with ``--startup``) start-up: ``MultiSyncCollector`` on pong-8's env and CNN, 2 x 4
and 4 x 2 envs, with each start method, 64 frames per batch, in a fresh process per measurement:
seconds from the collector's construction to the end of its first batch, and from the process's
start (interpreter, imports, policy) to the same point; median of ``--startup-runs`` (3; 1 with
``--quick``).

Flags besides the harness's: ``--startup`` (only the start-up table), ``--no-startup`` (only the
frames/s tables), ``--startup-runs N``, ``--contender NAME`` (only these contenders, repeatable).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from bench.harness import (
    RESULTS,
    ROOT,
    Batches,
    Contender,
    Plan,
    Ratio,
    header,
    markdown_table,
    parse_args,
    run,
)
from bench.workloads import (
    iterate,
    make_nature_cnn,
    make_pong_preprocessed,
    make_slow_policy,
    slow_env_factories,
    torchrl_nature_cnn,
    torchrl_pong_preprocessed,
    workload,
)

FAMILY = "batched"
WORKLOADS = ("pong-8", "slow-8")
CONTENDERS = ("async", "async-cuda", "sync", "single", "torchrl-async")
PONG_WORKERS = 2  # pong-8's multi-process contenders: 2 workers x 4 envs
START_METHODS = ("spawn", "auto", "forkserver", "fork")  # spawn: the default before; auto: now
STARTUP_LAYOUTS = ((2, 4), (4, 2))  # workers x envs per worker
STARTUP_FRAMES = 64  # per batch, over all envs
#: TorchRL's AsyncBatchedCollector as configured here: the fastest of a few tries on 2 cores
#: (bench/README.md): the policy served from a thread of this process ("driver"), 2 worker processes
#: of 4 envs exchanging through shared memory (``env_exchange="auto"``), forward passes of 4 to 8 envs.
TORCHRL_ASYNC_KWARGS: dict[str, Any] = {
    "env_backend": "multiprocessing", "envs_per_worker": 4, "transport": "driver",
    "max_batch_size": 8, "min_batch_size": 4, "server_timeout": 0.002,
}


# -- contenders (each runs in its own process) ------------------------------------------------------
def _sources(workload_name: str) -> tuple[Any, int, int]:
    """The env source(s) of the multi-process contenders, their worker count and envs per worker."""
    if workload_name == "pong-8":
        return make_pong_preprocessed, PONG_WORKERS, workload(workload_name).num_envs // PONG_WORKERS
    factories = slow_env_factories()
    return factories, len(factories), 1


def _policy(workload_name: str) -> torch.nn.Module:
    return make_nature_cnn() if workload_name == "pong-8" else make_slow_policy()


def rlcollect_single(workload_name: str, quick: bool) -> Batches:
    from rlcollect import Collector

    w = workload(workload_name, quick)
    return iterate(Collector(make_pong_preprocessed, _policy(workload_name), num_envs=w.num_envs,
                             frames_per_batch=w.frames_per_batch, seed=0, return_same_td=True))


def rlcollect_sync(workload_name: str, quick: bool) -> Batches:
    from rlcollect import MultiSyncCollector

    w = workload(workload_name, quick)
    sources, workers, envs_per_worker = _sources(workload_name)
    return iterate(MultiSyncCollector(
        sources, _policy(workload_name), num_workers=workers, num_envs_per_worker=envs_per_worker,
        frames_per_batch=w.frames_per_batch, seed=0, return_same_td=True,
    ))


def rlcollect_async(workload_name: str, quick: bool, device: str | None = None) -> Batches:
    from rlcollect import AsyncBatchedCollector

    w = workload(workload_name, quick)
    sources, workers, envs_per_worker = _sources(workload_name)
    collector = AsyncBatchedCollector(
        sources, _policy(workload_name), num_envs=w.num_envs, envs_per_worker=envs_per_worker,
        frames_per_batch=w.frames_per_batch // workers, seed=0, return_same_td=True, device=device,
    )
    return iterate(collector, warmup_batches=workers + 1)


def torchrl_async(workload_name: str, quick: bool) -> Batches:
    """TorchRL 0.14's ``AsyncBatchedCollector`` with ``TORCHRL_ASYNC_KWARGS``; its batches are flat
    ``[frames_per_batch]`` transitions of any envs. Up to a batch waits in its result queue: each
    repetition starts after 2 warm-up batches."""
    from torchrl.collectors import AsyncBatchedCollector

    w = workload(workload_name, quick)
    collector = AsyncBatchedCollector(
        create_env_fn=[torchrl_pong_preprocessed] * w.num_envs, policy=torchrl_nature_cnn(),
        frames_per_batch=w.frames_per_batch, **TORCHRL_ASYNC_KWARGS,
    )
    collector.set_seed(0)
    return iterate(collector, warmup_batches=2)


def plan(name: str, quick: bool, only: list[str] | None = None) -> Plan:
    w, kwargs = workload(name, quick), {"workload_name": name, "quick": quick}
    _, workers, m = _sources(name)
    async_fpb = w.frames_per_batch // workers
    contenders = [
        Contender("async", f"**rlcollect AsyncBatchedCollector ({workers} x {m} envs, policy server)**",
                  rlcollect_async, kwargs),
        Contender("sync", f"rlcollect MultiSyncCollector ({workers} x {m} envs)", rlcollect_sync, kwargs),
    ]
    ratios = [Ratio("async", "sync", "rlcollect AsyncBatched / rlcollect MultiSync", 1.0, cpu_target=False)]
    gpu = ""
    if name == "pong-8":
        if torch.cuda.is_available():
            contenders.insert(1, Contender(
                "async-cuda", f"**rlcollect AsyncBatchedCollector ({workers} x {m} envs), device=\"cuda\"**",
                rlcollect_async, {**kwargs, "device": "cuda"}))
            ratios.append(Ratio("async-cuda", "async", "rlcollect AsyncBatched cuda / cpu"))
        else:
            gpu = "; GPU row skipped (torch.cuda.is_available() is False)"
            print('pong-8: GPU row (AsyncBatchedCollector device="cuda") skipped: no CUDA device', flush=True)
        contenders += [
            Contender("single", f"rlcollect Collector, 1 process x {w.num_envs} envs", rlcollect_single,
                      kwargs),
            Contender("torchrl-async", f"TorchRL AsyncBatchedCollector ({w.num_envs} GymWrapper, "
                      f"{workers} processes x {m})", torchrl_async, kwargs),
        ]
        ratios += [
            Ratio("async", "torchrl-async", "rlcollect AsyncBatched / TorchRL AsyncBatched", 5.0),
            Ratio("sync", "single", "rlcollect MultiSync / rlcollect Collector (1 process)"),
            Ratio("async", "single", "rlcollect AsyncBatched / rlcollect Collector (1 process)"),
        ]
    if only:
        contenders = [c for c in contenders if c.name in only]
    heading = (f"{w.env_id}, {w.num_envs} envs, {w.policy}; {w.frames_per_batch} frames per synchronous "
               f"batch ({async_fpb} per asynchronous one: one worker's {m} envs){gpu}")
    return Plan(heading, contenders, ratios)


# -- start-up ----------------------------------------------------------------------------------------
def startup_child(spec: dict[str, Any]) -> None:
    """In a fresh process: build the policy, then time ``MultiSyncCollector``'s construction and first
    batch; print one JSON line (the parent times the process from its start to that line)."""
    from rlcollect import MultiSyncCollector

    torch.set_num_threads(1)
    policy = make_nature_cnn()
    start = time.perf_counter()
    collector = MultiSyncCollector(
        make_pong_preprocessed, policy, num_workers=spec["workers"], num_envs_per_worker=spec["envs"],
        frames_per_batch=STARTUP_FRAMES, seed=0, return_same_td=True, start_method=spec["start_method"],
    )
    batch = next(iter(collector))
    seconds = time.perf_counter() - start
    assert batch is not None
    stats_seconds = getattr(collector.stats(), "startup_seconds", None)
    print(json.dumps({"seconds": seconds, "startup_seconds": stats_seconds, "frames": int(batch.numel())}),
          flush=True)
    collector.shutdown()


def startup_once(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement in a fresh process: its line, plus ``process_seconds`` (from ``Popen``)."""
    command = [sys.executable, "-m", "bench.batched", "--startup-child", json.dumps(spec)]
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert process.stdout is not None
    line = process.stdout.readline()
    process_seconds = time.monotonic() - start
    _, stderr = process.communicate(timeout=120)
    if not line:
        tail = stderr.strip().splitlines()[-1:] or [f"exit code {process.returncode}"]
        raise RuntimeError(tail[0][:200])
    return {**json.loads(line), "process_seconds": process_seconds}


def measure_startup(runs: int) -> tuple[str, dict[str, Any]]:
    """The start-up table (markdown) and its raw measurements, one configuration after the other."""
    rows: list[list[str]] = []
    data: dict[str, Any] = {}
    load = os.getloadavg()[0]
    for workers, envs in STARTUP_LAYOUTS:
        for method in START_METHODS:
            name = f"{workers}x{envs}-{method}"
            spec = {"workers": workers, "envs": envs, "start_method": method}
            try:
                samples = [startup_once(spec) for _ in range(runs)]
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                print(f"  {name} did not run: {error}", flush=True)
                rows.append([f"{workers} x {envs} envs, {method}", f"did not run: {error}", "", ""])
                data[name] = {"failed": str(error)}
                continue
            data[name] = {"samples": samples}
            stats = [s["startup_seconds"] for s in samples if s["startup_seconds"] is not None]
            row = [
                f"{workers} x {envs} envs, {method}", _summary([s["seconds"] for s in samples]),
                _summary([s["process_seconds"] for s in samples]),
                _summary(stats) if stats else "n/a (no `stats().startup_seconds`)",
            ]
            rows.append(row)
            print(f"  {' | '.join(row)}", flush=True)
    header_row = [
        "MultiSyncCollector, pong-8 env + Nature CNN", "construction -> first batch, s",
        "process start -> first batch, s", "`stats().startup_seconds`",
    ]
    load_end = os.getloadavg()[0]
    table = (
        f"## start-up: MultiSyncCollector, {STARTUP_FRAMES} frames per batch, by start method\n\n"
        f"A fresh process per measurement, one at a time; median [min–max] of {runs} measurement(s). "
        f"Load average (1 min) at start / end: {load:.2f} / {load_end:.2f}\n\n"
        f"{markdown_table(header_row, rows)}\n"
    )
    return table, {"load_average": [load, load_end], "runs": runs, **data}


def _summary(values: list[float]) -> str:
    median = statistics.median(values)
    return f"{median:.2f} [{min(values):.2f}–{max(values):.2f}]" if len(values) > 1 else f"{median:.2f}"


def write_startup(args: argparse.Namespace, runs: int, alone: bool) -> None:
    """Measure start-up; append its table to ``batched.md`` (and its data to ``.json``) after the
    frames/s tables, or write ``batched_startup.md`` / ``.json`` when measured alone."""
    print(f"measuring start-up ({runs} run(s) per configuration) ...", flush=True)
    table, data = measure_startup(runs)
    print("\n" + table, flush=True)
    quick = "_quick" if args.quick else ""
    stem = f"{FAMILY}_startup{quick}" if alone else f"{FAMILY}{quick}"
    md, raw = RESULTS / f"{stem}.md", RESULTS / f"{stem}.json"
    RESULTS.mkdir(exist_ok=True)
    if alone:
        lines = header("Start-up of rlcollect's MultiSyncCollector by start method", args).splitlines()
        md.write_text("\n".join(line for line in lines if not line.startswith("- method")) + "\n\n" + table)
        raw.write_text(json.dumps({"command": args.command, "startup": data}, indent=1) + "\n")
    else:
        md.write_text(md.read_text() + "\n" + table)
        results = json.loads(raw.read_text())
        raw.write_text(json.dumps({**results, "startup": data}, indent=1) + "\n")
    print(f"wrote bench/results/{stem}.md and {stem}.json")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--startup-child"]:
        startup_child(json.loads(argv[1]))
        return
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--startup", action="store_true")
    own.add_argument("--no-startup", action="store_true")
    own.add_argument("--startup-runs", type=int)
    own.add_argument("--contender", action="append", choices=CONTENDERS)
    extra, rest = own.parse_known_args(argv)
    args = parse_args(FAMILY, __doc__, WORKLOADS, repetitions=5, seconds=2.0, argv=rest)
    args.command = shlex.join(["python", "-m", f"bench.{FAMILY}", *argv])
    runs = extra.startup_runs or (1 if args.quick else 3)
    if not extra.startup:
        title = "Batched inference: rlcollect AsyncBatchedCollector vs MultiSync, one process and TorchRL"
        run(FAMILY, title, args, lambda name, quick: plan(name, quick, extra.contender))
    if (extra.startup or not extra.no_startup) and not args.profile:
        write_startup(args, runs, alone=extra.startup)


if __name__ == "__main__":
    main()
