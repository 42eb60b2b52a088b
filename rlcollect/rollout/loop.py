"""The hot loop: step the envs with the policy, straight into the preallocated batch buffers.

Per step: one policy call for all envs, then the env adapter's step. Nothing else happens per
step; everything that can be done per batch (next observations, done flags, trajectory ids,
policy versions, episode statistics) is done once, vectorised, in :func:`finish_batch`.

A policy server that serves a worker's envs in groups (``policy.groups > 1``) gets the other
order, :func:`step_in_groups`: each group's envs step while the server computes the next group's
actions (Sample Factory's double-buffered sampling), the same frames in the same rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

import numpy as np
import torch
from tensordict.nn import set_interaction_type

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.trajectories import TrajectoryIds
from rlcollect.envs.base import EnvBatch
from rlcollect.policies.adapter import PolicyAdapter
from rlcollect.rollout.config import RolloutConfig
from rlcollect.rollout.episodes import EpisodeTracker

__all__ = ["GroupedPolicy", "begin_batch", "collect_batch", "finish_batch", "step_all", "step_in_groups"]

Observations = dict[tuple[str, ...], torch.Tensor]


def begin_batch(buffers: BatchBuffers, pending_obs: Observations, pending_init: torch.Tensor | None = None
                ) -> None:
    """Put the carried-over observations (and ``is_init``) in slot 0 and clear the per-batch flags
    (every frame real until the envs mark one that is not, or collection stops early)."""
    for key, obs in buffers.obs_ext.items():
        obs[:, 0] = pending_obs[key]
    if buffers.is_init is not None and pending_init is not None:
        buffers.is_init[:, 0] = pending_init
    buffers.terminated.zero_()
    buffers.truncated.zero_()
    buffers.finals.clear()
    if buffers.mask is not None:
        buffers.mask.fill_(True)


def finish_batch(
    buffers: BatchBuffers,
    steps: int,
    config: RolloutConfig,
    traj_ids: TrajectoryIds,
    episodes: EpisodeTracker,
    policy_version: int | None,
    pending_obs: Observations,
    pending_init: torch.Tensor | None = None,
) -> None:
    """Fill what the steps did not write: next observations, done, ids, versions, statistics.

    ``steps`` < ``T`` when collection stopped early; the frames after it are masked out.
    ``policy_version`` ``None``: the policy stamped each step's version itself (a policy server).
    ``pending_init`` (``[N, 1]``, with an ``is_init`` in the buffers): whether each env's next
    observation starts an episode, set here from the episode ends (not from the collector's cut).
    """
    buffers.write_next_obs(steps)
    for key, obs in buffers.obs_ext.items():
        pending_obs[key].copy_(obs[:, steps])
    for env, t, final_obs in buffers.finals:  # true final observations, not the reset ones
        buffers.write_final_obs(env, t, final_obs)
    real = _clear_holes(buffers, steps)
    np.logical_or(buffers.terminated_np, buffers.truncated_np, out=buffers.done_np)
    if buffers.is_init is not None:  # an episode starts where the step before ended one
        holes = None if real is None else torch.from_numpy(~real)[..., None]
        buffers.is_init[:, 1:steps] = buffers.done[:, : max(steps - 1, 0)]
        if holes is not None:  # or was an env's own reset step
            buffers.is_init[:, 1:steps] |= holes[:, : max(steps - 1, 0)]
        buffers.is_init[:, steps:] = False  # masked frames
        if pending_init is not None and steps:
            pending_init.copy_(buffers.done[:, steps - 1])
            if holes is not None:
                pending_init |= holes[:, steps - 1]
    done = buffers.done_np[:, :steps, 0]
    episodes.update(buffers.reward_np[:, :steps, 0], done, real)
    traj_ids.assign(done, buffers.traj_ids_np[:, :steps])  # the env's episodes: a cut keeps its id
    if config.truncate_last and steps:  # a collector cut: the trajectory ends here for the learner
        buffers.truncated[:, steps - 1] |= ~buffers.terminated[:, steps - 1]
        buffers.done[:, steps - 1] = True
    if policy_version is not None:
        buffers.policy_version.fill_(policy_version)
    episodes.label(buffers.traj_ids_np, buffers.policy_version.numpy(), buffers.infos_np)  # those that ended
    if buffers.mask_np is not None and (real is not None or steps < buffers.num_steps):
        mask = buffers.mask_np  # (numpy: a tenth of torch's time for these [N, T] passes)
        mask[:, steps:] = False  # frames not collected, or not transitions: no trajectory, no end
        np.copyto(buffers.traj_ids_np, -1, where=~mask)
        np.logical_and(buffers.done_np, mask[..., None], out=buffers.done_np)
        np.logical_and(buffers.truncated_np, mask[..., None], out=buffers.truncated_np)


def _clear_holes(buffers: BatchBuffers, steps: int) -> np.ndarray | None:
    """Which frames of ``steps`` are transitions (``[N, steps]``; ``None`` where all are) where
    some are an env's own reset steps, whose reward and flags this clears: such a step ends
    nothing and earns nothing (whatever the env said)."""
    if not buffers.layout.masked or buffers.mask_np is None:
        return None
    real: np.ndarray = buffers.mask_np[:, :steps]
    if real.all():
        return None
    np.copyto(buffers.reward_np[:, :steps], 0, where=~real[..., None])
    for flags in (buffers.terminated_np, buffers.truncated_np):
        np.logical_and(flags[:, :steps], real[..., None], out=flags[:, :steps])
    return real


def collect_batch(
    envs: EnvBatch,
    policy: PolicyAdapter,
    buffers: BatchBuffers,
    config: RolloutConfig,
    traj_ids: TrajectoryIds,
    episodes: EpisodeTracker,
    policy_version: int | None,
    pending_obs: Observations,
    stop: np.ndarray | None = None,
    pending_init: torch.Tensor | None = None,
    on_error: Callable[[int, Exception], None] | None = None,
) -> int:
    """Fill ``buffers`` with one batch; return the steps taken (``buffers.num_steps`` unless
    ``stop[0]`` was set). ``on_error(t, error)`` runs where the envs' step ``t`` raised ``error``,
    before it goes on (it may raise a clearer one: the policy's action outside the action space).

    ``stop`` is a one-element flag another process may raise (preemption), read before each step
    but the first (a batch has at least one step, as in TorchRL: a worker that starts its batch
    late still advances); without it the loop's one test per step is ``stop is not None``.
    ``pending_init``: see :func:`finish_batch`.
    """
    begin_batch(buffers, pending_obs, pending_init)
    steps = buffers.num_steps
    with torch.inference_mode(), set_interaction_type(config.exploration_type):
        if policy.groups == 1:
            steps = step_all(envs, policy, steps, stop, on_error)
        else:  # served in groups: each group steps while the server acts for another
            steps = step_in_groups(envs, cast(GroupedPolicy, policy), steps, stop, on_error)
        policy.finish(steps)  # what the policy adapter checks once per batch (its outputs)
        envs.finish(steps)  # what the env adapter writes once per batch (rewards)
    finish_batch(buffers, steps, config, traj_ids, episodes, policy_version, pending_obs, pending_init)
    return steps


def step_all(envs: EnvBatch, policy: PolicyAdapter, steps: int, stop: np.ndarray | None = None,
             on_error: Callable[[int, Exception], None] | None = None) -> int:
    """Take ``steps`` steps of every env (see :func:`collect_batch`); return the steps taken."""
    act, step = policy.act, envs.step
    for t in range(steps):
        if stop is not None and t and stop[0]:  # not before the first step: every worker advances
            return t
        act(t)  # action[:, t] <- policy(observation slot t)
        try:  # (free unless it raises)
            step(t)  # reward, flags [:, t]; observation slot t + 1 (reset obs if done)
        except Exception as error:
            if on_error is not None:
                on_error(t, error)
            raise
    return steps


class GroupedPolicy(Protocol):
    """A policy server's worker side that serves its envs in groups (see
    :class:`~rlcollect.workers.inference.ServedPolicy`)."""

    rows: tuple[tuple[int, int], ...]  # each group's envs, (start, stop)

    def ask(self, t: int, group: int) -> None: ...

    def wait(self, group: int) -> None: ...

    def settle(self) -> None: ...


def step_in_groups(envs: EnvBatch, policy: GroupedPolicy, steps: int, stop: np.ndarray | None = None,
                   on_error: Callable[[int, Exception], None] | None = None) -> int:
    """Take ``steps`` steps, one group of envs at a time; return the steps taken.

    Every group asks for its step-0 actions; then, at each step, each group in turn waits for its
    actions, steps its envs and asks for the next step's, so that the server computes one group's
    actions while another's envs step. ``stop`` is read where the first group would ask for the
    next step (as :func:`collect_batch` reads it before each step but the first): every group takes
    the same steps. An env's error waits for the answers still due before it is raised.
    """
    for group in range(len(policy.rows)):
        policy.ask(0, group)
    go_on = True
    for t in range(steps):
        for group, (start, end) in enumerate(policy.rows):
            policy.wait(group)
            try:
                envs.step_rows(t, start, end)
            except Exception as error:
                policy.settle()
                if on_error is not None:
                    on_error(t, error)
                raise
            if group == 0:
                go_on = t + 1 < steps and not (stop is not None and stop[0])
            if go_on:
                policy.ask(t + 1, group)
        if not go_on:
            return t + 1
    return steps
