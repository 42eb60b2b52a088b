"""What one frame costs: stepping the env, running the policy at each batch size, and the loop.

Measured with the collectors' own rollout (:class:`~rlcollect.rollout.engine.Rollout`) in this
process, one torch thread: a batch is collected as a collector would, then its env steps are
replayed with the actions the policy chose (the env alone) and its policy steps rerun on the
batch's observations (the policy alone, at each batch size). What is left of a collected frame's
time is the loop's own work (storing, checking).

Examples:
    >>> costs = measure_costs("CartPole-v1", None, sizes=(1, 4), seconds=0.2)
    >>> sorted(costs.policy_us) == [1, 4] and costs.env_us > 0
    True
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from tensordict.nn import set_interaction_type

from rlcollect.data.buffers import BatchBuffers
from rlcollect.policies.adapter import PolicyAdapter
from rlcollect.policies.adapters import make_policy
from rlcollect.policies.random_policy import RandomPolicy
from rlcollect.rollout.engine import Rollout, RolloutSpec

__all__ = ["Costs", "machine_cores", "measure_costs", "one_thread"]

#: Steps of each env per measured batch.
STEPS = 16


def machine_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class Costs:
    """Microseconds per frame, measured in one process with one torch thread.

    Attributes:
        env_us: one env step (the env alone, with the policy's actions).
        policy_us: the policy's forward pass per frame, by batch size (envs per pass).
        loop_us: the rollout loop's own work per frame, besides the env and the policy.
        cores: the cores the limit counts.
        steps_in_groups: the envs can step some at a time (a list of Gymnasium envs: see
            ``AsyncBatchedCollector``'s ``env_groups``), not only all at once (a vector env, a pool).
        batched: the envs one env object steps where it brings its own (a Gymnasium vector
            env, a TorchRL batched env: every process then holds one such object); 0 for an env
            of which a process holds as many copies as it likes.
    """

    env_us: float
    policy_us: Mapping[int, float]
    loop_us: float
    cores: int
    steps_in_groups: bool = False
    batched: int = 0

    def policy_at(self, batch_size: int) -> float:
        """The policy's cost per frame at ``batch_size`` (the nearest measured size at or below it)."""
        below = [size for size in self.policy_us if size <= batch_size] or [min(self.policy_us)]
        return self.policy_us[max(below)]

    @property
    def best_batch_size(self) -> int:
        """The batch size where the policy costs least per frame."""
        return min(self.policy_us, key=lambda size: self.policy_us[size])

    @property
    def limit(self) -> float:
        """The machine's limit in frames/s: every core stepping envs and running the policy at its
        cheapest batch size, nothing else."""
        return self.cores * 1e6 / (self.env_us + self.policy_us[self.best_batch_size])


def _timed(works: Mapping[Any, Callable[[], None]], seconds: float, rounds: int = 5) -> dict[Any, float]:
    """Seconds per call of each of ``works``: in ``rounds`` rounds, each work repeated for its share
    of about ``seconds`` (at least once), the least average of its rounds (the least disturbed by
    other processes; interleaved, so that all see the same machine)."""
    best = dict.fromkeys(works, float("inf"))
    share = seconds / (rounds * len(works))
    for _ in range(rounds):
        for name, work in works.items():
            calls, start = 0, time.perf_counter()
            while calls < 1 or time.perf_counter() - start < share:
                work()
                calls += 1
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return best


def measure_costs(
    create_env_fn: Any,
    policy: Any,
    *,
    sizes: Sequence[int],
    seconds: float = 5.0,
    env_kwargs: Mapping[str, Any] | None = None,
    cores: int | None = None,
) -> Costs:
    """Measure the costs of one frame for ``create_env_fn`` and ``policy`` (as the collectors take
    them), the policy at each batch size in ``sizes``, in about ``seconds``.

    Raises:
        ValueError: ``sizes`` empty or not positive, ``seconds`` not positive, or a source the
            collectors would refuse.
    """
    if not sizes or min(sizes) < 1:
        raise ValueError(f"sizes must be batch sizes >= 1, got {list(sizes)}")
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    rollout = Rollout(RolloutSpec(create_env_fn, policy=policy, create_env_kwargs=env_kwargs))
    batched = rollout.envs.num_envs if rollout.envs.num_envs > 1 else 0  # one object, its own envs
    if batched:  # the policy runs on all of them at once, whatever the sizes asked for
        sizes = [batched]
    elif max(sizes) > 1:  # copies of one env: as many as the largest size
        rollout.close()
        rollout = Rollout(RolloutSpec(create_env_fn, policy=policy, num_envs=max(sizes),
                                      create_env_kwargs=env_kwargs))
    with one_thread():  # as in every worker process
        costs = _measure(rollout, max(sizes), sizes, seconds, cores or machine_cores())
    return replace(costs, batched=batched)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch at one intra-op thread inside, as rlcollect's worker processes run: what ``tune``
    measures costs and trials at, and what its printed code sets."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _measure(rollout: Rollout, num_envs: int, sizes: Sequence[int], seconds: float, cores: int) -> Costs:
    """:func:`measure_costs` on a built ``rollout`` of ``num_envs`` envs (closed at the end)."""
    try:
        buffers = BatchBuffers.allocate(rollout.layout, num_envs, STEPS)
        rollout.set_seed(0)
        rollout.collect(buffers)  # warm-up: first resets, first forward pass
        works: dict[Any, Callable[[], None]] = {
            "collect": lambda: _collect(rollout, buffers),  # the loop: the envs, the policy, storing
            "envs": lambda: _replay_envs(rollout, buffers),  # the batch's env steps again
            **{size: _policy_steps(rollout, buffers, size) for size in sorted(set(sizes))},
        }
        seconds_per_call = _timed(works, seconds)
    finally:
        rollout.close()
    per_frame = {name: 1e6 * value / STEPS / (num_envs if name in ("collect", "envs") else name)
                 for name, value in seconds_per_call.items()}
    policy_us = {size: per_frame[size] for size in sorted(set(sizes))}
    loop = max(0.0, per_frame["collect"] - per_frame["envs"] - policy_us[num_envs])
    return Costs(env_us=per_frame["envs"], policy_us=policy_us, loop_us=loop, cores=cores,
                 steps_in_groups=rollout.envs.steps_rows)


def _collect(rollout: Rollout, buffers: BatchBuffers) -> None:
    rollout.collect(buffers)


def _replay_envs(rollout: Rollout, buffers: BatchBuffers) -> None:
    """Step every env through the batch again with the actions it holds."""
    rollout.envs.bind(buffers)
    for t in range(buffers.num_steps):
        rollout.envs.step(t)
    buffers.finals.clear()


def _policy_steps(rollout: Rollout, buffers: BatchBuffers, size: int) -> Callable[[], None]:
    """The policy choosing actions at every step for ``size`` of the batch's observations."""
    adapter = _adapter(rollout, size)
    small = BatchBuffers.allocate(rollout.layout, size, buffers.num_steps)
    for key, obs in small.obs_ext.items():
        obs.copy_(buffers.obs_ext[key][:size])
    adapter.bind(small)

    def steps() -> None:
        with torch.inference_mode(), set_interaction_type(rollout.config.exploration_type):
            for t in range(small.num_steps):
                adapter.act(t)

    return steps


def _adapter(rollout: Rollout, size: int) -> PolicyAdapter:
    """The rollout's policy as a collector with ``size`` envs per process runs it."""
    if rollout.user_policy is None:
        return RandomPolicy(rollout.envs.action_space, size)
    envs = rollout.envs
    adapter = make_policy(rollout.user_policy, envs.observation_space, envs.action_space, size,
                          exploration_type=rollout.config.exploration_type)
    adapter.action_field = rollout.layout.action
    return adapter
