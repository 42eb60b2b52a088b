"""cartpole-2x8 on a local Ray: rlcollect's RayCollector vs its MultiSyncCollector vs TorchRL's RayCollector.

Workload ``cartpole-2x8`` (``/work/shared/BENCHMARKS.md``): CartPole-v1, 2 collectors (Ray actors or
worker processes) x 8 envs, the seeded MLP 4-64-64-2 argmax policy of :mod:`bench.single_process`,
synchronous batches of all 16 envs.

Contenders, each built in its own spawned process, measured interleaved (A B C A B C ...):

- ``ray``: rlcollect ``RayCollector(num_collectors=2, collector_kwargs={"num_envs": 8})``;
- ``multisync``: rlcollect ``MultiSyncCollector(num_workers=2, num_envs_per_worker=8)``, shared memory;
- ``torchrl-ray``: TorchRL 0.14's ``torchrl.collectors.distributed.RayCollector`` with 2 remote
  ``Collector`` s, each on a ``SerialEnv`` of 8 ``GymEnv`` (as TorchRL's docs set it up), ``sync=True``.

This script starts one local Ray (4 logical CPUs on the 2 cores: both Ray contenders' actors exist
at once, but only one contender collects at a time) and the Ray contenders connect to it.

Why not :func:`bench.harness.run_interleaved`: its process-tree mode measures a contender's
descendants, and Ray actors are not descendants of the process that uses them (Ray's raylet starts
them), so their memory would be missed. Here repetitions are sized by wall time and memory is
summed over the contender's process, its worker processes and its actors (their pids are known);
the rest (samples, summaries, ratios, report) is the shared machinery.

Run from the repository root::

    python -m bench.ray_cartpole            # writes bench/results/ray.md and ray.json
    python -m bench.ray_cartpole --quick    # smoke run, writes bench/results/ray_quick.*
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.harness import ContenderResult, Sample, machine_info, source_digest
from bench.report import Ratio, Target, header_markdown, markdown_table, write_results
from bench.single_process import RLCOLLECT_DIR, Workload, make_policy

RESULTS_DIR = Path(__file__).parent / "results"
MULTISYNC_TARGET = 0.7  # rlcollect RayCollector / rlcollect MultiSyncCollector
TORCHRL_TARGET = 5.0  # rlcollect RayCollector / TorchRL RayCollector
WORKERS, ENVS = 2, 8
_TIMEOUT_S = 600.0

# contender: (batch function, pids of its process tree, close)
Contender = tuple[Callable[[], int], Callable[[], list[int]], Callable[[], None]]


def workload(frames_per_batch: int) -> Workload:
    return Workload(f"cartpole-{WORKERS}x{ENVS}", "CartPole-v1", WORKERS * ENVS, frames_per_batch,
                    "MLP 4-64-64-2, argmax")


# -- contenders ------------------------------------------------------------------------------------
def _frames(batch: Any) -> int:
    assert batch is not None
    return int(batch.numel())


def rlcollect_ray(work: Workload, address: str) -> Contender:
    from rlcollect.distributed import RayCollector

    collector = RayCollector(
        work.env_id, make_policy(work), num_collectors=WORKERS, collector_kwargs={"num_envs": ENVS},
        frames_per_batch=work.frames_per_batch, seed=0,
        ray_init_config={"address": address, "log_to_driver": False},
    )
    batches = iter(collector)
    pids = lambda: [os.getpid(), *collector.actor_pids]  # noqa: E731
    return (lambda: _frames(next(batches))), pids, collector.shutdown


def rlcollect_multisync(work: Workload, address: str) -> Contender:
    from rlcollect import MultiSyncCollector

    collector = MultiSyncCollector(
        work.env_id, make_policy(work), num_workers=WORKERS, num_envs_per_worker=ENVS,
        frames_per_batch=work.frames_per_batch, seed=0, return_same_td=True,
    )
    batches = iter(collector)
    pids = lambda: [os.getpid(), *(p for p in collector.worker_pids if p is not None)]  # noqa: E731
    return (lambda: _frames(next(batches))), pids, collector.shutdown


def _torchrl_env(env_id: str) -> Any:
    from torchrl.envs import GymEnv, SerialEnv

    return SerialEnv(ENVS, partial(GymEnv, env_id, categorical_action_encoding=True))


def torchrl_ray(work: Workload, address: str) -> Contender:
    import ray
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import Collector
    from torchrl.collectors.distributed import RayCollector

    policy = TensorDictModule(make_policy(work), in_keys=["observation"], out_keys=["action"])
    collector = RayCollector(
        [partial(_torchrl_env, work.env_id)] * WORKERS, policy, collector_class=Collector,
        collector_kwargs={"auto_register_policy_transforms": False},
        frames_per_batch=work.frames_per_batch, total_frames=10**15,  # -1 stops at once in 0.14.1
        sync=True, num_collectors=WORKERS, remote_configs={"num_cpus": 1},
        ray_init_config={"address": address, "log_to_driver": False},
    )
    collector.update_policy_weights_(policy)  # TorchRL warns unless the weights are synced first
    batches = iter(collector)
    actors = collector.remote_collectors
    actor_pids = ray.get([actor.__ray_call__.remote(lambda self: os.getpid()) for actor in actors])
    return (lambda: next(batches).numel()), (lambda: [os.getpid(), *actor_pids]), collector.shutdown


CONTENDERS: dict[str, Callable[[Workload, str], Contender]] = {
    "ray": rlcollect_ray,
    "multisync": rlcollect_multisync,
    "torchrl-ray": torchrl_ray,
}
LABELS = {
    "ray": "**rlcollect RayCollector (2 actors x Collector of 8 envs)**",
    "multisync": "rlcollect MultiSyncCollector (2 workers x 8 envs, shared memory)",
    "torchrl-ray": "TorchRL RayCollector (2 actors x Collector on SerialEnv of 8 GymEnv)",
}


# -- measuring ---------------------------------------------------------------------------------------
def tree_peak_rss_mb(pids: list[int]) -> float:
    """Sum of the processes' peak resident sets (``VmHWM``), in MB; gone processes count 0."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def _serve(conn: Connection, name: str, work: Workload, address: str, seconds: float) -> None:
    """Contender process: build, warm up, then calibrate (wall clock) and time repetitions."""
    import torch

    torch.set_num_threads(1)
    close: Callable[[], None] = lambda: None  # noqa: E731
    try:
        batch, pids, close = CONTENDERS[name](work, address)
        batch()
        conn.send(("ready", None))
        num_batches = 1
        while (command := conn.recv()) != "stop":
            if command == "calibrate":
                count, start = 0, time.perf_counter()
                while count == 0 or time.perf_counter() - start < seconds / 3:
                    batch()
                    count += 1
                num_batches = max(1, round(seconds / ((time.perf_counter() - start) / count)))
                conn.send(("calibrated", num_batches))
            else:
                batch()  # warm-up batch before every repetition
                start, cpu = time.perf_counter(), time.process_time()
                frames = sum(batch() for _ in range(num_batches))
                sample = Sample(frames, time.perf_counter() - start, time.process_time() - cpu,
                                tree_peak_rss_mb(pids()))
                conn.send(("sample", sample))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        raise
    finally:
        close()
        conn.close()


def _receive(name: str, conn: Connection, expected: str) -> Any:
    if not conn.poll(_TIMEOUT_S):
        raise TimeoutError(f"contender {name!r} sent nothing within {_TIMEOUT_S:.0f} s")
    kind, payload = conn.recv()
    if kind != expected:
        raise RuntimeError(f"contender {name!r} sent {kind!r}:\n{payload}")
    return payload


def run(names: list[str], work: Workload, address: str, repetitions: int,
        seconds: float) -> tuple[dict[str, ContenderResult], dict[str, str]]:
    """Build the contenders side by side, then time them interleaved; return results and failures."""
    # the contenders' functions must live in an importable module, not in __main__: Ray pickles
    # functions by reference and its actors cannot import this script's __main__
    from bench import ray_cartpole

    context = mp.get_context("spawn")
    conns: dict[str, Connection] = {}
    processes = []
    failed: dict[str, str] = {}
    for name in names:
        parent, child = context.Pipe()
        process = context.Process(target=ray_cartpole._serve, args=(child, name, work, address, seconds))
        process.start()
        child.close()
        conns[name] = parent
        processes.append(process)
    try:
        for name in list(conns):
            try:
                _receive(name, conns[name], "ready")
            except (RuntimeError, TimeoutError) as error:
                failed[name] = str(error).strip().splitlines()[-1]
                print(f"{name} did not run: {failed[name]}")
                conns.pop(name).close()
        batches = {}
        for name, conn in conns.items():
            conn.send("calibrate")
            batches[name] = _receive(name, conn, "calibrated")
        samples: dict[str, list[Sample]] = {name: [] for name in conns}
        for rep in range(repetitions):
            for name, conn in conns.items():
                conn.send("measure")
                sample: Sample = _receive(name, conn, "sample")
                samples[name].append(sample)
                print(f"  rep {rep + 1}/{repetitions} {name:<12} {sample.fps:>10,.0f} frames/s", flush=True)
    finally:
        for conn in conns.values():
            conn.send("stop")
        for process in processes:
            process.join(60)
            if process.is_alive():
                process.terminate()
    results = {name: ContenderResult(name, tuple(samples[name]), batches[name]) for name in conns}
    return results, failed


# -- report ------------------------------------------------------------------------------------------
def report(work: Workload, results: dict[str, ContenderResult], failed: dict[str, str],
           info: dict[str, str], command: str, repetitions: int, seconds: float,
           load: tuple[float, float]) -> tuple[str, dict[str, Any]]:
    fps = {name: [s.fps for s in result.samples] for name, result in results.items()}
    ratios = {other: Ratio.of(fps["ray"], fps[other]) for other in fps if other != "ray"}
    targets = {"multisync": MULTISYNC_TARGET, "torchrl-ray": TORCHRL_TARGET}
    met = {other: Target(f"ray / {other}", targets[other], ratio) for other, ratio in ratios.items()}
    rows = [[LABELS[name], result.fps.format(), f"{result.frames_per_rep:,}", f"{result.peak_rss_mb:,.0f}"]
            for name, result in results.items()]
    rows += [[LABELS[name], f"did not run: {reason}", "", ""] for name, reason in failed.items()]
    speed = markdown_table(["contender", "frames/s median [min–max]", "frames / rep",
                            "peak RSS MB (process + workers/actors)"], rows)
    ratio_rows = [[f"rlcollect RayCollector / {LABELS[other].strip('*')}", ratio.format(),
                   f"≥ {targets[other]:.2f}", "met" if met[other].met else "**missed**"]
                  for other, ratio in ratios.items()]
    ratio_table = markdown_table(["ratio: median [min–max] of paired reps", "wall", "target", ""], ratio_rows)
    method = (
        f"each contender in its own spawned process (torch 1 thread there and in its workers / actors); "
        f"{repetitions} repetitions of about {seconds:g} s (sized by wall clock), contenders interleaved, "
        "each repetition after a warm-up batch; frames = env steps summed over envs; median [min–max]. "
        "One local Ray with 4 logical CPUs serves both Ray contenders (their actors idle between "
        "batches: sync mode). Only wall-clock frames/s: the work is in other processes. Peak RSS: sum of "
        "the peak resident sets of the contender's process and its workers or actors (Ray's own daemons "
        "not counted). A ratio is the median over repetitions of paired repetitions' ratios."
    )
    title = (f"### {work.name}: {work.env_id}, {WORKERS} x {ENVS} envs, {work.policy}, "
             f"{work.frames_per_batch} frames per batch\n\n"
             f"Load average (1 min) when it started / ended: {load[0]:.2f} / {load[1]:.2f}.")
    markdown = (header_markdown("Ray: rlcollect RayCollector vs MultiSyncCollector vs TorchRL RayCollector",
                                info, command, method)
                + f"- ray: {info['ray']}\n\n{title}\n\n{speed}\n\n{ratio_table}\n")
    data = {
        "machine": info, "command": command, "method": method, "workload": asdict(work),
        "load_average": load, "results": {k: r.to_json() for k, r in results.items()},
        "failed": failed,
        "ratios": {k: {**asdict(r), "target": targets[k], "met": met[k].met} for k, r in ratios.items()},
    }
    return markdown, data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--repetitions", type=int, help="repetitions per contender (default 3)")
    parser.add_argument("--seconds", type=float, help="seconds per repetition (default 4, quick 0.5)")
    parser.add_argument("--frames-per-batch", type=int, default=2048, help="frames per batch (default 2048)")
    parser.add_argument("--skip-torchrl", action="store_true", help="leave TorchRL's RayCollector out")
    args = parser.parse_args(argv)
    repetitions, seconds = args.repetitions or 3, args.seconds or (0.5 if args.quick else 4.0)
    work = workload(args.frames_per_batch)
    names = [n for n in CONTENDERS if not (args.skip_torchrl and n == "torchrl-ray")]
    command = "python -m bench.ray_cartpole" + (" --quick" if args.quick else "")

    import ray

    info = machine_info()
    info["rlcollect_sources"] = source_digest(RLCOLLECT_DIR)
    info["ray"] = ray.__version__
    ray.init(num_cpus=2 * WORKERS, include_dashboard=False, log_to_driver=False)
    try:
        address = ray.get_runtime_context().gcs_address
        load_start = os.getloadavg()[0]
        results, failed = run(names, work, address, repetitions, seconds)
        load = (load_start, os.getloadavg()[0])
    finally:
        ray.shutdown()
    markdown, data = report(work, results, failed, info, command, repetitions, seconds, load)
    print(markdown)
    write_results(RESULTS_DIR, "ray_quick" if args.quick else "ray", markdown, data)


if __name__ == "__main__":
    main()
