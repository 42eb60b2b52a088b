"""What the data checks cost: one collector, its check level switched between runs of batches.

``bench.single_process`` runs ``check="full"`` and ``check="off"`` as two contenders, each in its own
process, like every other pair; two processes running the same code there differ by a few percent
(pong-8, where the checks are a few microseconds per 1,000-microsecond frame, came out at 0.96x), more
than the 2 % the checks may cost. Here one ``Collector`` per workload, in one process with one torch
thread, collects runs of batches (about 0.1 s each) with its check level switched between them:
``full``, ``off`` and ``off`` again, in a shuffled order per round. Same envs, same buffers, same
memory, and the same frames: each arm of a round starts from the same seed (``set_seed``), so
it steps the same episodes with the same resets (the policy is deterministic); a round's ratios
leave only what the level changes. The objects alive after the first batch are frozen out of the
garbage collector (``gc.freeze``): a full collection of torch's and tensordict's objects would land
in one arm's run. The ``off``/``off`` ratio is the control: what the method reads when nothing
changes; the standard error of the mean log ratio says how far the figure can be trusted.

Reported per workload: the cost, ``1 - median(full / off speed)`` over the rounds, with the
quartiles of the ratio, and the control's median; CPU time of this process (``time.process_time``).

Run: ``python -m bench.checks`` (about 40 s per workload; ``--quick`` for a smoke run). It switches
the level through the collector's rollout engine (``Rollout.set_check``), which users do not touch.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import statistics
import time
from typing import Any

import torch

from bench.harness import RESULTS, header, markdown_table
from bench.workloads import make_policy, make_pong_preprocessed, workload

WORKLOADS = ("cartpole-1", "cartpole-8", "pendulum-8", "pong-8")
TARGET = 0.02  # the checks may cost at most 2 % of collection time


def measure(name: str, seconds: float, quick: bool) -> dict[str, Any]:
    """Rounds of (full, off, off) runs on one collector for about ``seconds``; the raw times."""
    from rlcollect import Collector

    w = workload(name, quick)
    env = make_pong_preprocessed if name == "pong-8" else w.env_id
    collector = Collector(env, make_policy(w), frames_per_batch=w.frames_per_batch, num_envs=w.num_envs,
                          seed=0, return_same_td=True)
    rollout = collector._rollout  # the engine: its check level, switched between runs (see above)
    batches = iter(collector)
    next(batches)
    gc.collect()
    gc.freeze()  # the objects alive now (torch's, tensordict's) are never scanned again: a full
    start = time.process_time()  # collection of them would land in one arm's run
    next(batches)
    per_run = max(1, round(0.1 / max(time.process_time() - start, 1e-6)))  # batches in about 0.1 s
    arms = ("full", "off", "control")
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    rng = random.Random(0)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or len(times["full"]) < 3:
        seed = 1000 + len(times["full"])
        for arm in rng.sample(arms, len(arms)):
            rollout.set_check("full" if arm == "full" else "off")
            collector.set_seed(seed)  # the arms of a round collect the same frames: same resets, same
            next(batches)  # episodes (the first batch after a switch is not timed)
            start = time.process_time()
            for _ in range(per_run):
                next(batches)
            times[arm].append(time.process_time() - start)
    collector.shutdown()
    frames = per_run * w.frames_per_batch
    return {"frames_per_run": frames, "times": times}


def summary(raw: dict[str, Any]) -> dict[str, float]:
    """Cost and control from the rounds' paired speed ratios (speed ``x`` / speed ``off``)."""
    times = raw["times"]
    ratios = [off / full for full, off in zip(times["full"], times["off"], strict=True)]
    control = [off / again for again, off in zip(times["control"], times["off"], strict=True)]
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    logs = [math.log(r) for r in ratios]
    return {
        "mean_cost": 1 - math.exp(statistics.mean(logs)),
        "standard_error": statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.nan,
        "rounds": len(ratios),
        "full_fps": raw["frames_per_run"] / statistics.median(times["full"]),
        "off_fps": raw["frames_per_run"] / statistics.median(times["off"]),
        "ratio": statistics.median(ratios), "q1": q1, "q3": q3,
        "control": statistics.median(control),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.checks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: small batches, 2 s per workload")
    parser.add_argument("--workload", action="append", choices=WORKLOADS, help="only this (repeatable)")
    parser.add_argument("--seconds", type=float, help="seconds per workload (default 40)")
    args = parser.parse_args(argv)
    args.workload = args.workload or list(WORKLOADS)
    args.seconds = args.seconds or (2.0 if args.quick else 40.0)
    args.command = "python -m bench.checks" + (" --quick" if args.quick else "") + (
        f" --seconds {args.seconds:g}" if args.seconds != (2.0 if args.quick else 40.0) else "")
    torch.set_num_threads(1)
    title = "Data checks: one collector, check='full' vs check='off' switched between runs"
    head = header(title, args, method="(bench/checks.py's docstring): cost = 1 - median over rounds of "
                  "(full / off speed), quartiles of that ratio in brackets; control = the same for off / off")
    rows, data = [], {}
    for name in args.workload:
        load = os.getloadavg()[0]
        raw = measure(name, args.seconds, args.quick)
        s = summary(raw)
        data[name] = {**raw, "summary": s, "load_average": [load, os.getloadavg()[0]]}
        cost = 1 - s["ratio"]
        rows.append([
            name, str(s["rounds"]), f"{s['full_fps']:,.0f}", f"{s['off_fps']:,.0f}",
            f"{s['ratio']:.3f} [{s['q1']:.3f}–{s['q3']:.3f}]", f"{100 * cost:.1f} %",
            f"{100 * s['mean_cost']:.1f} ± {100 * s['standard_error']:.1f} %",
            f"{s['control']:.3f}", "met" if cost <= TARGET else "**missed**",
        ])
        print(name, rows[-1], flush=True)
    table = markdown_table(
        ["workload", "rounds", "frames/s full", "frames/s off", "full / off [quartiles]", "cost",
         "cost from the mean log ratio ± standard error", "control off / off", "cost ≤ 2 %"], rows)
    text = f"{head}\n{table}\n"
    print("\n" + text)
    stem = "checks" + ("_quick" if args.quick else "")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.md").write_text(text)
    raw = {"command": args.command, "workloads": data}
    (RESULTS / f"{stem}.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(f"wrote bench/results/{stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
