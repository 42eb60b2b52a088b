"""Weight updates: rlcollect's weight-sync schemes vs TorchRL 0.14's schemes of the same name.

For each scheme, models of 1M, 10M and 100M float32 parameters (plus a 1k-parameter model, the
memory baseline) and 2 or 8 workers, one env (``CartPole-v1``) per worker and 16 steps per
worker per batch:

- ``SharedMemWeightSyncScheme``, ``MultiProcessWeightSyncScheme``, ``NoWeightSyncScheme``:
  ``MultiSyncCollector(..., weight_sync_schemes={"policy": Scheme()})`` of each library;
- ``RayWeightSyncScheme``: rlcollect's ``RayCollector(num_collectors=W, collector_kwargs=
  {"num_envs": 1})`` vs TorchRL's ``torchrl.collectors.distributed.RayCollector`` (``W`` remote
  ``Collector`` s, ``sync=True``), each contender on a local Ray of its own.

The policy (:class:`BigPolicy`): ``P`` parameters in 4 tensors, added with weight 0 to the logits
of a linear head on the observation, which alone decides the action (argmax). Update ``k`` sets
the big tensors to ``k`` and the head's bias so that the action is ``k % 2``, so every frame tells
whether it was chosen with the new weights.

Each contender (library x scheme x size x workers) runs in a fresh process (``python -m
bench.weights --serve SPEC``), 1 torch thread per process, and answers the parent's commands
(``warmup``, ``rep``, ``memory``). After a warm-up batch and one warm-up update (timed apart: a
first update can pay for lazy set-up), each repetition is: one batch without update (the
baseline), then ``update_policy_weights_(weights)`` (timed: the update), then batches until one
has every frame with the new action (and, in rlcollect, the new ``policy_version``): the time to
delivery, from before the call. The two libraries' repetitions are interleaved (A B A B ...)
where both fit in memory at once, else one contender runs after the other. Memory: the sum of
``Pss_Anon + Pss_Shmem`` (``/proc/<pid>/smaps_rollup``) over the contender's process tree (with
Ray, its own Ray daemons and actors) after the warm-up update and after the last one, minus the
same for the 1k model, in copies of the model (``P * 4`` bytes). Mapped files (libraries) are left
out: their pages are shared with every other process on the machine, and are no weights.

See bench/README.md, "Weight updates".
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bench.harness import (
    RESULTS,
    ROOT,
    Contender,
    Summary,
    _commit,
    _cpu_model,
    _Process,
    _version,
    markdown_table,
    process_tree,
)

SCHEMES = ("SharedMemWeightSyncScheme", "MultiProcessWeightSyncScheme", "NoWeightSyncScheme",
           "RayWeightSyncScheme")
LIBRARIES = ("rlcollect", "torchrl")
TINY = 1000  # parameters of the memory baseline
STEPS = 16  # per worker and batch
MAX_BATCHES = 10  # batches after an update before it counts as not delivered
CHUNKS = 4  # tensors the big parameter vector is split into
MEMORY_LIMIT_MB = 12 * 1024  # a run's memory: contenders predicted above it are not run
RAY_WORKERS = 2  # Ray rows: at most 2 workers (see ray_skip)


# -- the policy ------------------------------------------------------------------------------------
class BigPolicy(nn.Module):
    """``P`` parameters (in :data:`CHUNKS` tensors) that ride along with weight 0, and a linear head
    on the 4-dim observation that decides the action: ``[N, 4] -> [N]`` (argmax of 2 logits)."""

    def __init__(self, num_params: int) -> None:
        super().__init__()
        sizes = [num_params // CHUNKS + (i < num_params % CHUNKS) for i in range(CHUNKS)]
        self.big = nn.ParameterList(nn.Parameter(torch.zeros(n)) for n in sizes)
        self.head = nn.Linear(4, 2)
        with torch.no_grad():
            self.head.weight.zero_()
            self.head.bias.copy_(_bias(0))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        ride_along = sum(p[0] for p in self.big)  # "used", at no cost
        return (self.head(obs) + 0 * ride_along).argmax(-1)


def _bias(version: int) -> torch.Tensor:
    """The head's bias of weights version ``version``: the action is ``version % 2``."""
    return torch.tensor([0.0, 1.0]) if version % 2 else torch.tensor([1.0, 0.0])


def torchrl_policy(num_params: int) -> Any:
    """:class:`BigPolicy` as TorchRL wants it (also a module-level factory for its workers)."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(BigPolicy(num_params), in_keys=["observation"], out_keys=["action"])


def new_weights(policy: nn.Module, version: int) -> Any:
    """A fresh TensorDict of ``policy``'s weights for update ``version`` (big tensors = version)."""
    from tensordict import TensorDict

    weights = TensorDict.from_module(policy).data.apply(torch.empty_like)
    for key, value in weights.items(True, True):
        if key[-2:] == ("head", "bias"):
            value.copy_(_bias(version))
        elif key[-2:] == ("head", "weight"):
            value.zero_()
        else:
            value.fill_(float(version))
    return weights


# -- the contender's process -----------------------------------------------------------------------
@dataclass
class Built:
    collector: Any
    policy: nn.Module
    close: Any
    pids: list[int]


def build(library: str, scheme: str, num_params: int, workers: int) -> Built:
    """The collector of ``library`` with ``scheme``, ``workers`` workers of 1 env, the policy."""
    frames = STEPS * workers
    ray_up = scheme == "RayWeightSyncScheme"
    if ray_up:  # a local Ray of the contender's own: its daemons and actors are in its process tree
        import ray

        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 object_store_memory=max(10**9, 6 * 4 * num_params))

    def close(collector: Any) -> None:
        collector.shutdown()
        if ray_up:
            import ray

            ray.shutdown()

    if library == "rlcollect":
        import rlcollect
        import rlcollect.weights

        policy: nn.Module = BigPolicy(num_params)
        schemes = {"policy": getattr(rlcollect.weights, scheme)()}
        if ray_up:
            collector = rlcollect.RayCollector(
                "CartPole-v1", policy, num_collectors=workers, collector_kwargs={"num_envs": 1},
                frames_per_batch=frames, seed=0, weight_sync_schemes=schemes)
        else:
            collector = rlcollect.MultiSyncCollector(
                "CartPole-v1", policy, num_workers=workers, num_envs_per_worker=1, frames_per_batch=frames,
                seed=0, weight_sync_schemes=schemes)
        return Built(collector, policy, partial(close, collector), [])

    import torchrl.weight_update

    from bench.workloads import torchrl_env

    policy = torchrl_policy(num_params)
    schemes = {"policy": getattr(torchrl.weight_update, scheme)()}
    env = partial(torchrl_env, "CartPole-v1")
    if ray_up:
        import ray
        from torchrl.collectors import Collector
        from torchrl.collectors.distributed import RayCollector

        collector = RayCollector(
            [env] * workers, policy, collector_class=Collector,
            collector_kwargs={"auto_register_policy_transforms": False}, frames_per_batch=frames,
            total_frames=10**15, sync=True, num_collectors=workers, remote_configs={"num_cpus": 1},
            weight_sync_schemes=schemes)
        pids = ray.get([a.__ray_call__.remote(lambda self: os.getpid()) for a in collector.remote_collectors])
        return Built(collector, policy, partial(close, collector), list(pids))
    from torchrl.collectors import MultiSyncCollector

    # TorchRL sends its workers the policy on the meta device and lets the scheme fill in the
    # weights; NoWeightSyncScheme fills in nothing and the workers crash on their first step. Built
    # in each worker by policy_factory, the policy has weights of its own.
    factory = partial(torchrl_policy, num_params) if scheme == "NoWeightSyncScheme" else None
    collector = MultiSyncCollector(
        [env] * workers, policy, policy_factory=factory, frames_per_batch=frames, total_frames=10**15,
        num_threads=1, auto_register_policy_transforms=False, weight_sync_schemes=schemes)
    collector.set_seed(0)
    return Built(collector, policy, partial(close, collector), [])


def memory(pids: list[int]) -> dict[str, float]:
    """MB over ``pids``: ``Pss_Anon + Pss_Shmem`` (``weights``), and ``Pss`` (all, files too)."""
    totals = {"Pss": 0, "Pss_Anon": 0, "Pss_Shmem": 0}
    for pid in dict.fromkeys(pids):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in totals:
                    totals[key] += int(value.split()[0])
    return {"weights_mb": (totals["Pss_Anon"] + totals["Pss_Shmem"]) / 1024, "pss_mb": totals["Pss"] / 1024,
            "processes": len(set(pids))}


class Runner:
    """One contender: its collector, the weights version the workers should have, the checks."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec, self.moving = spec, spec["scheme"] != "NoWeightSyncScheme"
        self.built = build(spec["library"], spec["scheme"], spec["params"], spec["workers"])
        self.batches = iter(self.built.collector)
        self.version = 0  # of the weights sent last
        self.check(next(self.batches), 0)  # warm-up batch

    def expected(self) -> int:
        return self.version if self.moving else 0

    @staticmethod
    def check(batch: Any, version: int) -> bool:
        """Every frame of ``batch`` chosen with weights ``version`` (action, and stamp if any)."""
        ok = bool((batch["action"] == version % 2).all())
        stamps = batch.get("policy_version", None)  # rlcollect stamps each frame, TorchRL does not
        return ok and (stamps is None or bool((stamps == version).all()))

    def update(self) -> dict[str, Any]:
        """One update, then batches until one has every frame with the new weights."""
        self.version += 1
        weights = new_weights(self.built.policy, self.version)
        gc.collect()
        start = time.perf_counter()
        self.built.collector.update_policy_weights_(weights)
        update_s = time.perf_counter() - start
        del weights
        batches, delivered = 0, False
        while batches < (MAX_BATCHES if self.moving else 1):
            batch = next(self.batches)
            batches += 1
            if self.check(batch, self.expected()):
                delivered = True
                break
        seconds = time.perf_counter() - start
        return {"update_s": update_s, "delivery_s": seconds, "batches": batches, "delivered": delivered}

    def rep(self) -> dict[str, Any]:
        start = time.perf_counter()
        batch = next(self.batches)
        baseline_s = time.perf_counter() - start
        before_ok = self.check(batch, self.expected())
        del batch
        return {"baseline_s": baseline_s, "before_ok": before_ok, **self.update()}

    def memory(self) -> dict[str, float]:
        gc.collect()
        return memory([*process_tree(os.getpid()), *self.built.pids])


def serve(spec: dict[str, Any]) -> None:
    """Build the contender, then answer ``warmup``, ``rep`` and ``memory``, one JSON line each."""
    answer = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol's channel; anything else printed
    os.dup2(2, 1)  # goes to stderr
    torch.set_num_threads(1)
    runner = Runner(spec)
    try:
        answer.write(json.dumps({"pids": runner.built.pids}) + "\n")
        for line in sys.stdin:
            command = line.strip()
            result: dict[str, Any] = getattr(runner, {"warmup": "update"}.get(command, command))()
            answer.write(json.dumps(result) + "\n")
    finally:
        runner.built.close()


# -- the parent ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WeightContender(Contender):
    """A contender of this benchmark: its process is ``python -m bench.weights --serve SPEC``."""

    def command(self) -> list[str]:
        return [sys.executable, "-m", "bench.weights", "--serve", json.dumps(self.kwargs)]


def _contender(library: str, scheme: str, params: int, workers: int) -> WeightContender:
    spec = {"library": library, "scheme": scheme, "params": params, "workers": workers}
    return WeightContender(library, library, serve, spec)


def ray_skip(params: int, workers: int) -> str | None:
    """Why a Ray cell is not measured (``None``: it is)."""
    if workers > RAY_WORKERS:
        return (f"Ray rows are limited to {RAY_WORKERS} workers: each Ray contender starts a Ray of its own, "
                "and 8 actors would take about a minute more per contender to start on 2 cores (estimated "
                "from the 8-worker processes' start-up), which does not fit the run's 25 minutes")
    return None


def plan(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """The cells ``(scheme, params, workers)`` in the order they run: each scheme's 1k baseline
    before its sizes; the largest model with the most workers (but for the default scheme,
    shared memory), then Ray's largest model, last: a time budget cuts those first."""
    big, most = max(args.params), max(args.workers)
    sizes = [TINY, *args.params]

    def late(scheme: str, params: int, w: int) -> int:
        if params != big or params <= 10**7 or scheme == SCHEMES[0]:  # the default scheme in full
            return 0
        return 2 if scheme == "RayWeightSyncScheme" else int(w == most and w > min(args.workers))

    cells = [(scheme, params, w) for w in args.workers for scheme in args.scheme for params in sizes]
    return sorted(cells, key=lambda cell: late(*cell))  # stable: the order above within each group


def _weights_mb(cell: dict[str, Any], lib: str) -> float | None:
    data = cell[lib] if cell else {}
    values = [data[k]["weights_mb"] for k in ("memory_1", "memory_n") if k in data]
    return max(values) if values else None


def predict_mb(
    cells: dict[tuple[str, int, int], Any], scheme: str, params: int, w: int, lib: str
) -> float | None:
    """The memory ``lib``'s contender would take, from its largest smaller model measured (in copies
    of the model, plus 2 for copies in flight), or ``None`` for models up to 10M (small enough)."""
    if params <= 10**7:
        return None
    smaller = sorted(p for (s, p, x) in cells if s == scheme and x == w and TINY < p < params)
    base = cells.get((scheme, TINY, w))
    for p in reversed(smaller):
        measured = _weights_mb(cells[scheme, p, w], lib)
        base_mb = _weights_mb(base, lib) if base else None
        if measured is not None and base_mb is not None:
            copies = max(0.0, (measured - base_mb) / (p * 4 / 2**20))
            return base_mb + (copies + 2) * params * 4 / 2**20
    return float("inf")  # nothing to predict from: run it alone


def measure_cell(
    scheme: str, params: int, workers: int, updates: int, predicted: dict[str, float | None]
) -> dict[str, Any]:
    """Both libraries' contenders of one cell: start-up, warm-up update, ``updates`` repetitions
    (interleaved when both fit in memory at once), memory after the warm-up and after the last.

    ``predicted``: each library's predicted memory (MB; ``None``: small): a contender predicted
    above :data:`MEMORY_LIMIT_MB` is not run; two whose sum is above it run one after the other.
    """
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result: dict[str, Any] = {lib: {"reps": [], "error": None, "predicted_mb": predicted.get(lib)}
                              for lib in LIBRARIES}
    libs = []
    for lib in LIBRARIES:
        mb = predicted.get(lib)
        if mb is not None and mb > MEMORY_LIMIT_MB:
            result[lib]["error"] = (f"skipped: would take about {mb / 1024:.0f} GB (predicted from the "
                                    f"smaller model's copies), over the run's {MEMORY_LIMIT_MB // 1024} GB")
        else:
            libs.append(lib)
    total = sum(predicted.get(lib) or 0.0 for lib in libs)
    concurrent = total <= MEMORY_LIMIT_MB
    groups = [libs] if concurrent else [[lib] for lib in libs]
    for group in groups:
        running: dict[str, _Process] = {}
        try:
            for lib in group:
                started = time.monotonic()
                try:
                    running[lib] = _Process(_contender(lib, scheme, params, workers), env)
                    result[lib]["startup_s"] = time.monotonic() - started
                    result[lib]["warmup"] = running[lib].ask("warmup")
                    result[lib]["memory_1"] = running[lib].ask("memory")
                except (RuntimeError, TimeoutError) as error:
                    result[lib]["error"] = _last_line(error)
                    running.pop(lib, None)
            for _ in range(updates):
                for lib in list(running):
                    try:
                        result[lib]["reps"].append(running[lib].ask("rep"))
                    except (RuntimeError, TimeoutError) as error:
                        result[lib]["error"] = _last_line(error)
                        running.pop(lib).stop()
            for lib, process in running.items():
                result[lib]["memory_n"] = process.ask("memory")
        finally:
            for process in running.values():  # end of stdin: all of them shut down at once
                with contextlib.suppress(OSError):
                    process.process.stdin.close()  # type: ignore[union-attr]
            for process in running.values():
                process.stop()
    for lib in LIBRARIES:
        if result[lib]["error"]:
            print(f"    {lib}: {result[lib]['error']}", flush=True)
    result["concurrent"] = concurrent and len(libs) > 1
    return result


def _last_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(error).__name__)[:200]


# -- reports ---------------------------------------------------------------------------------------
def _size(params: int) -> str:
    for unit, scale in (("M", 10**6), ("k", 10**3)):
        if params >= scale:
            return f"{params / scale:g}{unit}"
    return str(params)


def _median(reps: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in reps)


def _copies(cell: dict[str, Any], base: dict[str, Any] | None, lib: str, params: int) -> tuple[str, str]:
    """``copies after 1 / N updates`` and ``MB after 1`` of ``lib`` in ``cell``, over the baseline."""
    if base is None or "memory_1" not in base[lib] or "memory_1" not in cell[lib]:
        return "n/a", "n/a"
    model_mb = params * 4 / 2**20
    deltas = [cell[lib][k]["weights_mb"] - base[lib][k]["weights_mb"]
              for k in ("memory_1", "memory_n") if k in cell[lib] and k in base[lib]]
    return " / ".join(f"{d / model_mb:.1f}" for d in deltas), f"{deltas[0]:,.0f}"


def _check(data: dict[str, Any], moving: bool) -> str:
    updates = ([data["warmup"]] if "warmup" in data else []) + data["reps"]
    if not updates:
        return "n/a"
    if not moving:
        ok = all(u["delivered"] for u in updates) and all(r["before_ok"] for r in data["reps"])
        return "✓ actions unchanged" if ok else "**✗ actions changed**"
    if not all(u["delivered"] for u in updates):
        return f"**✗ not delivered within {MAX_BATCHES} batches**"
    if not all(r["before_ok"] for r in data["reps"]):
        return "**✗ a batch reverted to older weights**"
    batches = sorted({r["batches"] for r in updates})
    return f"✓ in {'/'.join(map(str, batches))} batch{'es' if batches != [1] else ''}"


def scheme_table(
    scheme: str, cells: dict[tuple[str, int, int], Any], skipped: dict[tuple[str, int, int], str],
    sizes: list[int], workers: list[int],
) -> str:
    """The scheme's table: a row per size and worker count, both libraries side by side."""
    moving = scheme != "NoWeightSyncScheme"
    rows = []
    for w in sorted(workers):
        base = cells.get((scheme, TINY, w))
        for params in [TINY, *sorted(sizes)]:
            row = [f"{_size(params)}{' (baseline)' if params == TINY else ''}", str(w)]
            key = (scheme, params, w)
            if key in skipped:
                rows.append([*row, f"not measured: {skipped[key]}", *[""] * 13])
                continue
            cell = cells[key]
            reps = {lib: cell[lib]["reps"] for lib in LIBRARIES}
            both = all(reps.values())
            for lib in LIBRARIES:
                row.append(Summary.of([r["update_s"] for r in reps[lib]]).format(4) if reps[lib]
                           else f"did not run: {cell[lib]['error']}")
            pairs = zip(reps["rlcollect"], reps["torchrl"], strict=False)
            paired = [t["update_s"] / r["update_s"] for r, t in pairs]
            row.append(f"{statistics.median(paired):.2f}" if both else "")
            for lib in LIBRARIES:
                if not reps[lib]:
                    row.append("")
                elif moving:
                    row.append(f"{_median(reps[lib], 'delivery_s'):.4f} "
                               f"({statistics.median(r['batches'] for r in reps[lib]):g})")
                else:
                    row.append("none (by design)")
            row.append(" / ".join(f"{_median(reps[lib], 'baseline_s'):.4f}" if reps[lib] else "–"
                                  for lib in LIBRARIES))
            row.append(" / ".join(f"{cell[lib]['warmup']['update_s']:.3f}" if "warmup" in cell[lib] else "–"
                                  for lib in LIBRARIES))
            for lib in LIBRARIES:
                copies, mb = _copies(cell, base, lib, params) if params != TINY else ("—", "—")
                row += [copies, mb] if reps[lib] else ["", ""]
            checks = [f"{lib}: {_check(cell[lib], moving)}" for lib in LIBRARIES if reps[lib]]
            row.append(" · ".join(checks) + ("" if cell["concurrent"] else " · (one after the other)"))
            rows.append(row)
    header = [
        "params", "workers", "rlcollect update s", "TorchRL update s", "TorchRL / rlcollect update",
        "rlcollect delivery s (batches)", "TorchRL delivery s (batches)",
        "batch s without update (rlcollect / TorchRL)", "first update s (rlcollect / TorchRL)",
        "rlcollect copies after 1 / N", "rlcollect MB", "TorchRL copies after 1 / N", "TorchRL MB",
        "check: workers act with the new weights",
    ]
    return markdown_table(header, rows)


def _tree_state() -> str:
    """The rlcollect commit measured, with a digest of ``rlcollect/``'s uncommitted changes."""
    import hashlib
    import subprocess

    diff = subprocess.run(["git", "diff", "HEAD", "--", "rlcollect"], cwd=ROOT, capture_output=True).stdout
    untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "rlcollect"], cwd=ROOT,
                               capture_output=True, text=True).stdout.split()
    digest = hashlib.sha256(diff)
    for name in sorted(untracked):
        with contextlib.suppress(OSError):
            digest.update((ROOT / name).read_bytes())
    return _commit() + (f" (changes digest {digest.hexdigest()[:12]})" if diff or untracked else "")


def header(args: argparse.Namespace, load: float) -> str:
    packages = ("torch", "numpy", "gymnasium", "tensordict", "torchrl", "ray", "rlcollect")
    return (
        "# Weight updates: rlcollect's weight-sync schemes vs TorchRL 0.14's\n\n"
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; rlcollect commit {args.tree_state}\n"
        f"- machine: {len(os.sched_getaffinity(0))} CPUs (`nproc`), {_cpu_model()}\n"
        f"- versions: python {sys.version.split()[0]}, "
        + ", ".join(f"{p} {_version(p)}" for p in packages)
        + f"\n- command: `{args.command}`\n"
        f"- load average (1 min) at start: {load:.2f}\n"
        "- method (bench/README.md, \"Weight updates\"): `CartPole-v1`, 1 env per worker, "
        f"{STEPS} steps per worker per batch; each contender in its own fresh process, 1 torch thread per "
        f"process; 1 warm-up update, then {args.updates} timed updates, rlcollect's and TorchRL's "
        "interleaved when both fit in memory at once; median [min–max] or median over the timed updates.\n"
        "- **update s**: the `update_policy_weights_(weights)` call; **delivery s**: from before the call to "
        "the end of the first batch whose frames all carry the new weights (batches it took), beside "
        "**batch s without update**; **first update s**: the warm-up update's call (lazy set-up); "
        "**copies after 1 / N**: `Pss_Anon + Pss_Shmem` over the contender's process tree after 1 and "
        f"after {args.updates + 1} updates, minus the same with the 1k-parameter model, divided by the "
        "model's bytes (4 per parameter); **MB**: that difference after 1 update. The user's own policy "
        "(in the contender's main process) is one of the copies.\n"
    )


NOTES = """
Notes:
- TorchRL `NoWeightSyncScheme` with `policy=` alone crashes its workers at their first step
  (TorchRL sends a weight-sync-scheme policy to its workers on the meta device and lets the scheme
  fill the weights in, which `NoWeightSyncScheme` never does): its rows pass
  `policy_factory=partial(torchrl_policy, P)` too, so each worker builds the policy with its own
  weights.
- TorchRL's `RayWeightSyncScheme` does not use Ray's object store: its first update sets up a
  `torch.distributed` (gloo) group between this process and the actors (the "first update s"), and
  each update then sends the tensors to every actor and waits until they applied them.
- Each Ray contender runs a local Ray of its own (`ray.init(num_cpus=workers)`): its daemons
  (GCS, raylet and its object store) and actors are in its process tree and counted; the 1k
  baseline subtracts the daemons' own memory.
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.weights", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 1M and 10M, 2 workers, 3 updates")
    parser.add_argument("--scheme", action="append", choices=SCHEMES, help="only this scheme (repeatable)")
    parser.add_argument("--params", action="append", type=int, help="only these model sizes (repeatable)")
    parser.add_argument("--workers", action="append", type=int, help="only these worker counts (repeatable)")
    parser.add_argument("--updates", type=int, help="timed updates per contender (default 5, quick 3)")
    parser.add_argument("--budget-min", type=float, default=25.0,
                        help="minutes the run may take: a cell that would end past them is not run "
                        "(default 25)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.scheme = args.scheme or list(SCHEMES)
    sizes = [10**6, 10**7] if args.quick else [10**6, 10**7, 10**8]
    args.params = sorted(set(args.params or sizes) - {TINY})
    args.workers = sorted(set(args.workers or ([2] if args.quick else [2, 8])))
    args.updates = args.updates or (3 if args.quick else 5)
    args.command = shlex.join(["python", "-m", "bench.weights", *(sys.argv[1:] if argv is None else argv)])
    return args


def estimate_s(durations: dict[tuple[str, int, int], float], scheme: str, params: int, w: int) -> float:
    """Seconds a cell will take: twice its scheme's 10M cell for 100M, else the slowest cell measured
    with as many workers and of the same kind (Ray or not); 0 with nothing to go by."""
    if params > 10**7 and (scheme, 10**7, w) in durations:
        return 2 * durations[scheme, 10**7, w]
    ray_kind = scheme == "RayWeightSyncScheme"
    same = [d for (s, p, x), d in durations.items() if x == w and (s == "RayWeightSyncScheme") == ray_kind]
    return max(same, default=0.0)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.serve:
        serve(json.loads(args.serve))
        return
    started, load = time.monotonic(), os.getloadavg()[0]
    args.tree_state = _tree_state()
    first = header(args, load)
    print(first, flush=True)
    cells: dict[tuple[str, int, int], Any] = {}
    skipped: dict[tuple[str, int, int], str] = {}
    durations: dict[tuple[str, int, int], float] = {}
    loads: dict[str, list[float]] = {}
    for scheme, params, w in plan(args):
        key, name = (scheme, params, w), f"{scheme} {_size(params)} x {w} workers"
        loads.setdefault(scheme, [os.getloadavg()[0]])
        reason = ray_skip(params, w) if scheme == "RayWeightSyncScheme" else None
        estimate = estimate_s(durations, scheme, params, w)
        elapsed = time.monotonic() - started
        if reason is None and elapsed + estimate > 60 * args.budget_min:
            reason = (f"the run's time budget: {elapsed / 60:.1f} min gone, this cell would take about "
                      f"{estimate / 60:.1f} min more, over --budget-min {args.budget_min:g}")
        if reason is None and params != TINY and (scheme, TINY, w) not in cells:
            reason = "its 1k baseline was not measured"
        if reason is not None:
            skipped[key] = reason
            print(f"{name}: not measured ({reason})", flush=True)
            continue
        predicted = {lib: predict_mb(cells, scheme, params, w, lib) for lib in LIBRARIES}
        t = time.monotonic()
        cells[key] = cell = measure_cell(scheme, params, w, args.updates, predicted)
        durations[key] = cell["seconds"] = time.monotonic() - t
        loads[scheme][1:] = [os.getloadavg()[0]]
        summary = ", ".join(
            f"{lib} update {_median(cell[lib]['reps'], 'update_s'):.4f} s" if cell[lib]["reps"]
            else f"{lib} did not run" for lib in LIBRARIES)
        gone = (time.monotonic() - started) / 60
        print(f"{name}: {summary} ({cell['seconds']:.0f} s, {gone:.1f} min gone)", flush=True)
    sections, data = [first], {}
    for scheme in args.scheme:
        load_start, load_end = (loads.get(scheme, [float("nan")]) * 2)[:2]
        sections.append(
            f"## {scheme}\n\nLoad average (1 min) before its first cell / after its last: "
            f"{load_start:.2f} / {load_end:.2f}\n\n"
            f"{scheme_table(scheme, cells, skipped, args.params, args.workers)}\n"
        )
        print("\n" + sections[-1], flush=True)
        data[scheme] = {
            "load_average": [load_start, load_end],
            "cells": {f"{p}x{w}": cell for (s, p, w), cell in cells.items() if s == scheme},
            "not_measured": {f"{p}x{w}": r for (s, p, w), r in skipped.items() if s == scheme},
        }
    elapsed = time.monotonic() - started
    state, state_end = args.tree_state, _tree_state()
    moved = "" if state_end == state else f" **rlcollect/ changed during the run**: now {state_end}."
    sections.append(NOTES.strip() + f"\n- load average (1 min) at the end: {os.getloadavg()[0]:.2f}; "
                    f"the run took {elapsed / 60:.1f} min.{moved}\n")
    print(sections[-1], flush=True)
    stem = "weights" + ("_quick" if args.quick else "")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.md").write_text("\n".join(sections))
    raw = {"command": args.command, "minutes": elapsed / 60, "schemes": data}
    (RESULTS / f"{stem}.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(f"wrote {Path('bench/results') / (stem + '.md')} and {stem}.json")


if __name__ == "__main__":
    # not this __main__ copy: workers must unpickle bench.weights' classes
    from bench.weights import main as run_main

    run_main()
