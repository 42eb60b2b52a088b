"""PufferLib: rlcollect's collectors vs PufferLib's vectorization with the same envs and policy.

PufferLib (``pufferlib.vector``) steps Gymnasium envs in worker processes that exchange
observations and actions with the main process through shared memory, and serves as the
vectorization of its own PPO trainer; the policy runs in the main process. Workloads (the
envs and policies of ``bench.limit``): ``pong-8`` (preprocessed Pong, the Nature CNN; 8 envs)
and ``cartpole-2x8`` (CartPole, the MLP; 16 envs). Contenders, each in its own process (see
bench/README.md):

- rlcollect ``MultiSyncCollector`` and ``MultiAsyncCollector`` (2 workers, half the envs each,
  the policy in each worker) and ``Collector`` (every env in one process), iterated;
- PufferLib loops, what a PufferLib user writes: ``recv`` the envs that are ready, run the policy
  on their observations, store observations, actions, rewards and flags into preallocated
  ``[T, n, ...]`` numpy arrays, ``send`` the actions. PufferLib resets an env at the step after
  its episode ended, in place of stepping it (the action sent for it is dropped): that frame
  holds no transition, so the loop counts transitions only, which is what rlcollect's batches
  hold (an env there resets within the step that ended its episode). With
  ``pufferlib.vector.Serial`` (every env in the main process), and ``Multiprocessing`` with 1
  worker, with 2 workers stepping all the envs at once, and with 2 workers of twice the envs,
  each ``recv`` taking one worker's while the other steps (PufferLib's double buffering).

PufferLib's workers wait for work by spinning (they sleep only after 0.5 s without any) and so
does its main process in ``recv``: it expects a core per worker beside the main process's
(``overwork=True`` lets more workers than cores start). PufferLib 3.0 (the release of 2025) is
measured; its install builds its C envs and fetches raylib from GitHub: where that is out of
reach, its Python sources work from the unpacked source release with
``PYTHONPATH=path/to/pufferlib-3.0.0`` and ``pip install gym psutil``.

Run: ``python -m bench.puffer`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import numpy as np
import torch

from bench.harness import Batches, Contender, Plan, Ratio, parse_args, run
from bench.limit import WORKERS, WORKLOADS, contenders, env_factory, workload_policy
from bench.workloads import MLP, NATURE_CNN, step_arrays, workload

FAMILY = "puffer"


def _counts(name: str, quick: bool) -> tuple[int, int]:
    """(envs in all, time steps per batch per env)."""
    w = workload(name, quick)
    return w.num_envs, w.steps


def _import_pufferlib() -> Any:
    """``pufferlib.vector`` and ``pufferlib.emulation`` (its import links ``resources`` into the
    current folder: a scratch folder takes it)."""
    if "pufferlib.vector" in sys.modules:
        return sys.modules["pufferlib"]
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="bench-puffer-") as scratch:
        os.chdir(scratch)
        try:
            import pufferlib.emulation
            import pufferlib.vector
        finally:
            os.chdir(here)
    return pufferlib


class _PufferEnv:
    """PufferLib's wrapper around the workload's Gymnasium env (picklable for its workers)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, buf: Any = None, seed: int = 0) -> Any:
        pufferlib = _import_pufferlib()
        return pufferlib.emulation.GymnasiumPufferEnv(env=env_factory(self.name)(), buf=buf, seed=seed)


def puffer_loop(
    workload_name: str, quick: bool, backend: str, workers: int = 1, envs_factor: int = 1
) -> Batches:
    """A PufferLib loop: ``envs_factor`` x the workload's envs on ``workers`` workers, ``recv`` giving
    the workload's number of envs at a time; each step stored into ``[T, n, ...]`` arrays."""
    pufferlib = _import_pufferlib()
    n, steps = _counts(workload_name, quick)
    policy = workload_policy(workload_name)
    vector_backend = getattr(pufferlib.vector, backend)
    options: dict[str, Any] = {"batch_size": n}
    if backend == "Multiprocessing":
        options.update(num_workers=workers, overwork=True)
    envs = pufferlib.vector.make(_PufferEnv(workload_name), num_envs=n * envs_factor, backend=vector_backend,
                                 **options)
    envs.async_reset(0)
    state = list(envs.recv())
    observations, actions, rewards, terminateds, truncateds, env_ids = step_arrays(
        steps, n, envs.single_observation_space, envs.single_action_space, np.int64)

    def batch() -> int:
        resets = 0
        with torch.inference_mode():
            for t in range(steps):
                obs, ids = state[0], state[5]
                resets += int(np.count_nonzero(state[2] | state[3]))  # these envs reset instead of stepping
                action = policy(torch.from_numpy(obs)).numpy()
                observations[t], actions[t], env_ids[t] = obs, action, ids
                envs.send(action)
                state[:] = envs.recv()
                rewards[t], terminateds[t], truncateds[t] = state[1], state[2], state[3]
        return steps * n - resets  # transitions: a reset's frame is not one

    return Batches(batch, envs.close)


def plan(name: str, quick: bool) -> Plan:
    kwargs = {"workload_name": name, "quick": quick}
    n, steps = _counts(name, quick)
    half = n // WORKERS
    puffer = "PufferLib loop, `Multiprocessing`"
    ours = [c for c in contenders(name, quick) if c.name in ("sync", "async", "single")]  # bench.limit's
    rows = [
        *ours,
        Contender("puffer-serial", f"PufferLib loop, `Serial` ({n} envs in one process)", puffer_loop,
                  {**kwargs, "backend": "Serial"}),
        Contender("puffer-1", f"{puffer} (1 worker x {n} envs)", puffer_loop,
                  {**kwargs, "backend": "Multiprocessing", "workers": 1}),
        Contender("puffer-2", f"{puffer} ({WORKERS} workers x {half} envs, all at once)",
                  puffer_loop, {**kwargs, "backend": "Multiprocessing", "workers": WORKERS}),
        Contender("puffer-2x2", f"{puffer} ({WORKERS} workers x {n} envs, "
                  f"batch_size={n}: one worker's envs while the other steps)", puffer_loop,
                  {**kwargs, "backend": "Multiprocessing", "workers": WORKERS, "envs_factor": 2}),
    ]
    ratios = [Ratio(mine, theirs, f"{label} / {peer}") for mine, label in
              (("sync", "rlcollect MultiSync"), ("async", "rlcollect MultiAsync"))
              for theirs, peer in (("puffer-serial", "PufferLib Serial"), ("puffer-1", "PufferLib 1 worker"),
                                   ("puffer-2", f"PufferLib {WORKERS} workers"),
                                   ("puffer-2x2", f"PufferLib {WORKERS} workers, double-buffered"))]
    ratios.append(Ratio("single", "puffer-serial", "rlcollect Collector / PufferLib Serial"))
    policy = NATURE_CNN if name == "pong-8" else MLP
    env = "preprocessed Pong" if name == "pong-8" else "CartPole-v1"
    heading = f"{env}, {n} envs, {policy}, {steps} steps per env per batch"
    return Plan(heading, rows, ratios)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(FAMILY, __doc__, WORKLOADS, repetitions=5, seconds=2.0, argv=argv)
    try:
        version = getattr(_import_pufferlib(), "__version__", "?")
    except ImportError as error:
        raise SystemExit(f"bench.puffer needs PufferLib ({error}): pip install pufferlib, or see "
                         "bench/README.md for its sources without the build") from None
    run(FAMILY, f"PufferLib {version}: rlcollect vs PufferLib's vectorization", args, plan)


if __name__ == "__main__":
    main()
