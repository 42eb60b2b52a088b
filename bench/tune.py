"""Is ``rlcollect.tune``'s pick the fastest configuration? Its pick against a grid of every
configuration it weighs, each measured the same way.

For each workload, ``rlcollect.tune`` runs with its default budget (``--seconds``, 60 s); then every
configuration of the same candidate set (every kind, 2 to 2 x cores workers, 1 to ``MAX_ENVS``
envs in powers of two, batches sized as tune sizes them) is run as tune runs its trials
(``rlcollect.tuning.tuner.run_trial``: build, first batches, then about ``TRIAL_SECONDS`` timed),
``--repetitions`` times, interleaved; a configuration's figure is the median of its repetitions.
The row says how the pick's grid figure compares with the grid's best (the issue's bar: within 5 %).
Workloads: CartPole (the MLP, argmax), Pendulum (the MLP, scaled tanh) and Pong (AtariPreprocessing,
4 stacked frames, the Nature CNN).

    python -m bench.tune [--quick] [--workload cartpole] [--repetitions N] [--seconds S]
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any

from bench.harness import RESULTS, header, markdown_table, parse_args
from bench.workloads import make_nature_cnn, make_policy, make_pong_preprocessed, workload
from rlcollect.tuning import tune
from rlcollect.tuning.candidates import candidates
from rlcollect.tuning.kinds import KINDS
from rlcollect.tuning.tuner import run_trial

FAMILY = "tune"
WORKLOADS = ("cartpole", "pendulum", "pong")
MAX_ENVS = {"cartpole": 32, "pendulum": 32, "pong": 16}
TRIAL_SECONDS = 2.5


def _source(name: str) -> tuple[Any, Any]:
    """The env source and the policy of a workload."""
    if name == "pong":
        return make_pong_preprocessed, make_nature_cnn()
    w = workload("cartpole-8" if name == "cartpole" else "pendulum-8")
    return w.env_id, make_policy(w)


def compare(name: str, seconds: float, repetitions: int, quick: bool) -> dict[str, Any]:
    """Tune, then the grid; the pick's and the best's figures."""
    env, policy = _source(name)
    max_envs = 4 if quick else MAX_ENVS[name]
    started = time.perf_counter()
    result = tune(env, policy, seconds=seconds, max_envs=max_envs, progress=False)
    tuned = time.perf_counter() - started
    grid = list(candidates(result.costs, KINDS, None, max_envs, None))
    figures: dict[str, list[float]] = {c.label: [] for c in grid}
    for _ in range(repetitions):
        for candidate in grid:
            trial = run_trial(candidate, 0.0, env, policy, None, 1.0 if quick else TRIAL_SECONDS)
            figures[candidate.label].append(trial.fps)
            print(f"  {name}: {candidate.label}: {trial.fps:,.0f} frames/s"
                  + (f" ({trial.error})" if trial.error else ""), flush=True)
    medians = {label: statistics.median(values) for label, values in figures.items()}
    best = max(medians, key=lambda label: medians[label])
    pick = result.pick.candidate.label
    return {"pick": pick, "pick_fps": medians[pick], "tune_fps": result.pick.fps, "best": best,
            "best_fps": medians[best], "ratio": medians[pick] / medians[best], "limit": result.limit,
            "tune_seconds": tuned, "grid": medians, "report": result.report()}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(FAMILY, __doc__, WORKLOADS, repetitions=1, seconds=60.0, argv=argv)
    seconds = 10.0 if args.quick else args.seconds
    method = (f"rlcollect.tune with a {seconds:g} s budget, then every configuration it weighs run as its "
              f"trials run, {args.repetitions} repetition(s) of about {TRIAL_SECONDS:g} s timed each, in "
              "this process (collectors' workers in their own); a configuration's figure is the median.")
    text, rows, data = [header("rlcollect tune against the grid of its configurations", args, method)], [], {}
    for name in args.workload:
        load = os.getloadavg()[0]
        data[name] = figures = compare(name, seconds, args.repetitions, args.quick)
        figures["load"] = [load, os.getloadavg()[0]]
        rows.append([name, figures["pick"], f"{figures['pick_fps']:,.0f}", figures["best"],
                     f"{figures['best_fps']:,.0f}", f"{figures['ratio']:.2f}",
                     f"{figures['tune_seconds']:.0f} s", f"{load:.2f} / {os.getloadavg()[0]:.2f}"])
        print(figures["report"], flush=True)
    head = ["workload", "tune's pick", "its grid frames/s", "the grid's best", "frames/s", "pick / best",
            "tune took", "load start / end"]
    text.append(markdown_table(head, rows))
    for name, figures in data.items():
        grid = sorted(figures["grid"].items(), key=lambda item: -item[1])
        text.append(f"\n## {name}: the grid\n\n" + markdown_table(
            ["configuration", "frames/s", "of the limit"],
            [[label, f"{fps:,.0f}", f"{fps / figures['limit']:.2f}"] for label, fps in grid]))
    stem = FAMILY + ("_quick" if args.quick else "")
    (RESULTS / f"{stem}.md").write_text("\n".join(text) + "\n")
    (RESULTS / f"{stem}.json").write_text(json.dumps({"command": args.command, "workloads": data}, indent=1))
    print(f"wrote bench/results/{stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
