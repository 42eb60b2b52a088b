"""The machine's limit, and each collector as a fraction of it.

A collector can go no faster than stepping the envs and running the policy allow. For a workload
(its envs, its policy at the batch size the collectors use), two extra rows are measured in the
same interleaved run as the collectors, each in a fresh process with one torch thread:

- **the envs alone**: the workload's envs stepped in a loop, replaying the actions the policy
  chose for them in a first, untimed batch (no policy, no storage): ``1 / env cost`` frames/s;
- **the policy alone**: its forward pass on a batch of the workload's observations (as many as
  it has envs), converted from numpy as a collector does: ``1 / policy cost`` frames/s; and again
  on a worker's envs (half of them): the cost where each of two workers runs the policy on its own
  envs (a small batch costs more per frame).

The limit of one core is ``1 / (env cost + policy cost)`` frames/s; of the machine, that times its
cores (``len(os.sched_getaffinity(0))``). That computed limit assumes cores that do not slow each
other; a third row measures what they give: **plain loops at once**, one process per worker, each
stepping a worker's envs and running the policy on them, free-running (no collector, nothing
stored). Each collector's row shows its frames/s as a fraction of one core's limit, of the
machine's, of the machine's limit with the policy priced at the collector's own batch size (a
worker's envs for the worker collectors, what a policy server serves at once being at most all of
them) and of the plain loops. Workloads: ``pong-8`` (preprocessed Pong, the Nature CNN, 8 envs:
2 workers x 4 for the multi-process collectors), ``pong-16`` (the same, 16 envs: 2 workers x 8, so
that a worker's policy pass is the 8 observations the 2-core limit is priced at) and
``cartpole-2x8`` (CartPole, the MLP, 16 envs: 2 workers x 8). ``AsyncBatchedCollector`` also runs
with one env worker of every env, stepped all at once and in 2 groups (``env_groups=2``: the
worker steps one half while the server acts for the other).

    python -m bench.limit [--quick] [--workload pong-8] [--repetitions N] [--seconds S]
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from bench.harness import (
    RESULTS,
    Batches,
    Contender,
    header,
    markdown_table,
    parse_args,
    rates,
    run_interleaved,
)
from bench.workloads import iterate, make_env, make_nature_cnn, make_policy, make_pong_preprocessed, workload

FAMILY = "limit"
WORKLOADS = ("pong-8", "pong-16", "cartpole-2x8")
WORKERS = 2


def env_factory(name: str) -> Any:
    """The workload's env factory (picklable): preprocessed Pong, or CartPole."""
    return make_pong_preprocessed if name.startswith("pong-") else _CartPole()


class _CartPole:
    """``make_env("CartPole-v1")``, picklable."""

    def __call__(self) -> Any:
        return make_env("CartPole-v1")


def workload_policy(name: str) -> torch.nn.Module:
    """The workload's seeded policy: the Nature CNN for Pong, the MLP for CartPole."""
    return make_nature_cnn() if name.startswith("pong-") else make_policy(workload(name))


def envs_alone(workload_name: str, quick: bool) -> Batches:
    """The workload's envs stepped in a loop with the actions the policy chose in a first, untimed
    batch, replayed: the env's cost, for the actions the collectors' envs see."""
    w = workload(workload_name, quick)
    envs = [env_factory(workload_name)() for _ in range(w.num_envs)]
    obs = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    policy, actions = workload_policy(workload_name), []
    with torch.inference_mode():
        for _ in range(w.steps):
            chosen = policy(torch.from_numpy(np.stack(obs))).numpy()
            actions.append(chosen)
            for i, env in enumerate(envs):
                obs[i], _, terminated, truncated, _ = env.step(chosen[i])
                if terminated or truncated:
                    obs[i] = env.reset()[0]
    actions = [list(column) for column in np.stack(actions).swapaxes(0, 1)]  # per env, per step

    def batch() -> int:
        for t in range(w.steps):
            for env, planned in zip(envs, actions, strict=True):
                _, _, terminated, truncated, _ = env.step(planned[t])
                if terminated or truncated:
                    env.reset()
        return w.steps * w.num_envs

    return Batches(batch, lambda: [env.close() for env in envs])


def policy_alone(workload_name: str, quick: bool, batch: int | None = None) -> Batches:
    """The policy's forward pass on ``batch`` of the workload's observations (default: all its
    envs'): the policy's cost at that batch size."""
    w = workload(workload_name, quick)
    envs = [env_factory(workload_name)() for _ in range(batch or w.num_envs)]
    obs = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    for env in envs:
        env.close()
    policy = workload_policy(workload_name)

    def forward_passes() -> int:
        with torch.inference_mode():
            for _ in range(w.steps):
                policy(torch.from_numpy(obs))
        return w.steps * len(obs)

    return Batches(forward_passes)


def _plain_loop(conn: Connection, running: Any, workload_name: str, num_envs: int, seed: int) -> None:
    """One process of :func:`plain_loops`: ``num_envs`` envs and the policy in a plain loop (the
    policy on their stacked observations, each env stepped, reset where an episode ended), run
    while ``running`` is set after each ``go``; it answers the frames it stepped."""
    torch.set_num_threads(1)
    envs = [env_factory(workload_name)() for _ in range(num_envs)]
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    policy = workload_policy(workload_name)
    while conn.recv() == "go":
        frames = 0
        with torch.inference_mode():
            while running.value:
                actions = policy(torch.from_numpy(np.stack(obs))).numpy()
                for i, env in enumerate(envs):
                    obs[i], _, terminated, truncated, _ = env.step(actions[i])
                    if terminated or truncated:
                        obs[i] = env.reset()[0]
                frames += num_envs
        conn.send(frames)
    for env in envs:
        env.close()


def plain_loops(workload_name: str, quick: bool, window: float = 0.25) -> Batches:
    """The work alone on every core: one process per worker, each stepping a worker's envs and
    running the policy on them in a plain loop, all at once and free-running (no batch barrier,
    no storage, no communication) for ``window`` seconds a batch. What the machine gives to
    exactly the collectors' work where cores slow each other (shared caches, memory bandwidth, a
    VM's vCPUs): the measured limit beside the computed one."""
    w = workload(workload_name, quick)
    per_worker = w.num_envs // WORKERS
    context = multiprocessing.get_context("spawn")
    running = context.RawValue("b", 0)
    pipes, processes = [], []
    for worker in range(WORKERS):
        parent, child = context.Pipe()
        process = context.Process(target=_plain_loop, daemon=True,
                                  args=(child, running, workload_name, per_worker, worker * per_worker))
        process.start()
        pipes.append(parent)
        processes.append(process)

    def batch() -> int:
        running.value = 1
        for pipe in pipes:
            pipe.send("go")
        time.sleep(window)
        running.value = 0
        return sum(pipe.recv() for pipe in pipes)

    def close() -> None:
        for pipe in pipes:
            pipe.send("stop")
        for process in processes:
            process.join(10)

    return Batches(batch, close)


def collector(workload_name: str, quick: bool, kind: str) -> Batches:
    """One of rlcollect's collectors on the workload, iterated as users do."""
    import rlcollect

    w = workload(workload_name, quick)
    source, policy = env_factory(workload_name), workload_policy(workload_name)
    per_worker = w.num_envs // WORKERS
    common: dict[str, Any] = {"seed": 0, "return_same_td": True}
    if kind == "single":
        return iterate(rlcollect.Collector(source, policy, num_envs=w.num_envs,
                                           frames_per_batch=w.frames_per_batch, **common))
    if kind == "batched":
        return iterate(rlcollect.AsyncBatchedCollector(
            source, policy, num_envs=w.num_envs, envs_per_worker=per_worker,
            frames_per_batch=w.frames_per_batch // WORKERS, **common), warmup_batches=WORKERS + 1)
    if kind in ("batched-one", "batched-groups"):  # one env worker: the server has a core of its own
        groups = 2 if kind == "batched-groups" else 1  # its envs stepped all at once, or in 2 groups
        return iterate(rlcollect.AsyncBatchedCollector(
            source, policy, num_envs=w.num_envs, envs_per_worker=w.num_envs, env_groups=groups,
            frames_per_batch=w.frames_per_batch // WORKERS, **common), warmup_batches=2)
    multi = rlcollect.MultiSyncCollector if kind == "sync" else rlcollect.MultiAsyncCollector
    fpb = w.frames_per_batch if kind == "sync" else w.frames_per_batch // WORKERS
    built = multi(source, policy, num_workers=WORKERS, num_envs_per_worker=per_worker, frames_per_batch=fpb,
                  **common)
    return iterate(built, warmup_batches=1 if kind == "sync" else WORKERS + 1)


def contenders(name: str, quick: bool) -> list[Contender]:
    w, kwargs = workload(name, quick), {"workload_name": name, "quick": quick}
    m = w.num_envs // WORKERS
    return [
        Contender("envs", f"the {w.num_envs} envs alone (the policy's actions, replayed)", envs_alone,
                  kwargs),
        Contender("policy", f"the policy alone (batches of {w.num_envs} observations)", policy_alone,
                  kwargs),
        Contender("policy-worker", f"the policy alone (batches of {m} observations, a worker's)",
                  policy_alone, {**kwargs, "batch": m}),
        Contender("plain", f"{WORKERS} plain loops at once ({WORKERS} x {m} envs, no collector)", plain_loops,
                  kwargs),
        Contender("sync", f"MultiSyncCollector ({WORKERS} x {m} envs)", collector,
                  {**kwargs, "kind": "sync"}),
        Contender("async", f"MultiAsyncCollector ({WORKERS} x {m} envs)", collector,
                  {**kwargs, "kind": "async"}),
        Contender("batched", f"AsyncBatchedCollector ({WORKERS} x {m} envs, one policy server)", collector,
                  {**kwargs, "kind": "batched"}),
        Contender("batched-one", f"AsyncBatchedCollector (1 x {w.num_envs} envs, one policy server)",
                  collector, {**kwargs, "kind": "batched-one"}),
        Contender("batched-groups", f"AsyncBatchedCollector (1 x {w.num_envs} envs in 2 groups, one policy "
                  "server)", collector, {**kwargs, "kind": "batched-groups"}),
        Contender("single", f"Collector ({w.num_envs} envs in one process)", collector,
                  {**kwargs, "kind": "single"}),
    ]


def limit_table(
    plan: list[Contender], samples: dict[str, list[dict[str, Any]]], cores: int
) -> tuple[str, dict[str, Any]]:
    """The costs, the limits and every collector's fraction of them (medians over repetitions)."""
    fps = {name: statistics.median(rates(s)) for name, s in samples.items()}
    env_us, policy_us = 1e6 / fps["envs"], 1e6 / fps["policy"]
    worker_us = 1e6 / fps["policy-worker"]
    one_core, one_core_worker = 1e6 / (env_us + policy_us), 1e6 / (env_us + worker_us)
    plain = fps.get("plain", float("nan"))
    rows = []
    for c in plan:
        if c.name in ("envs", "policy", "policy-worker", "plain") or c.name not in fps:
            continue
        own = one_core if c.name in ("single", "batched-one") else one_core_worker  # its own batch size
        rows.append([c.label, f"{fps[c.name]:,.0f}", f"{fps[c.name] / one_core:.2f}",
                     f"{fps[c.name] / (cores * one_core):.2f}", f"{fps[c.name] / (cores * own):.2f}",
                     f"{fps[c.name] / plain:.2f}"])
    head = ["collector", "frames/s", "of 1 core's limit", f"of the {cores}-core limit",
            f"of the {cores}-core limit, the policy at the collector's batch size",
            f"of {WORKERS} plain loops at once"]
    text = (f"env {env_us:,.1f} µs + policy {policy_us:,.1f} µs per frame (a worker's batch: "
            f"{worker_us:,.1f} µs): the limit is {one_core:,.0f} frames/s on one core, "
            f"**{cores * one_core:,.0f} on {cores}** ({cores * one_core_worker:,.0f} at a worker's batch "
            f"size). {WORKERS} plain loops at once (a worker's envs and the policy each, no collector): "
            f"**{plain:,.0f} frames/s**, {plain / (cores * one_core_worker):.2f} of the computed limit at "
            "a worker's batch size\n\n"
            + markdown_table(head, rows))
    return text, {"env_us": env_us, "policy_us": policy_us, "policy_worker_us": worker_us,
                  "limit_1": one_core, "limit_1_worker": one_core_worker, "cores": cores,
                  "plain": plain, "fps": fps}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(FAMILY, __doc__, WORKLOADS, repetitions=2, seconds=4.0, argv=argv)
    cores = len(os.sched_getaffinity(0))
    sections, data = [header("The machine's limit: each collector as a fraction of it", args)], {}
    for name in args.workload:
        plan = contenders(name, args.quick)
        load = os.getloadavg()[0]
        samples, failed = run_interleaved(plan, args.repetitions, args.seconds)
        table, figures = limit_table(plan, samples, cores)
        missing = f"; did not run: {json.dumps(failed)}" if failed else ""
        sections.append(f"## {name}\n\nLoad average (1 min) at start / end: {load:.2f} / "
                        f"{os.getloadavg()[0]:.2f}{missing}\n\n{table}\n")
        print("\n" + sections[-1], flush=True)
        data[name] = {**figures, "failed": failed, "samples": samples}
    stem = FAMILY + ("_quick" if args.quick else "")
    (RESULTS / f"{stem}.md").write_text("\n".join(sections))
    raw = {"command": args.command, "workloads": data}
    (RESULTS / f"{stem}.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(f"wrote bench/results/{stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
