"""The hot loop: step the envs with the policy, straight into the preallocated batch buffers.

Per step: one policy call for all envs, then the env adapter's step. Nothing else happens per
step; everything that can be done per batch (next observations, done flags, trajectory ids,
policy versions, episode statistics) is done once, vectorised, in :func:`finish_batch`.
"""

from __future__ import annotations

import torch
from tensordict.nn import set_interaction_type

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.trajectories import TrajectoryIds
from rlcollect.envs.base import EnvBatch
from rlcollect.policies.adapters import PolicyAdapter
from rlcollect.rollout.config import RolloutConfig
from rlcollect.rollout.episodes import EpisodeTracker

__all__ = ["begin_batch", "collect_batch", "finish_batch"]


def begin_batch(buffers: BatchBuffers) -> None:
    """Carry the last observation over to slot 0 and clear the per-batch flags."""
    for obs in buffers.obs_ext.values():
        obs[:, 0] = obs[:, buffers.num_steps]
    buffers.terminated.zero_()
    buffers.truncated.zero_()
    buffers.finals.clear()


def finish_batch(
    buffers: BatchBuffers,
    config: RolloutConfig,
    traj_ids: TrajectoryIds,
    episodes: EpisodeTracker,
    policy_version: int,
) -> None:
    """Fill what the steps did not write: next observations, done, ids, versions, statistics."""
    for key, next_obs in buffers.next_obs.items():
        next_obs.copy_(buffers.obs_ext[key][:, 1:])
    for env, t, final_obs in buffers.finals:  # true final observations, not the reset ones
        buffers.write_final_obs(env, t, final_obs)
    torch.logical_or(buffers.terminated, buffers.truncated, out=buffers.done)
    episodes.update(buffers.reward_np[..., 0], buffers.done_np[..., 0])
    if config.truncate_last:  # a collector cut: the trajectory ends here for the learner
        buffers.truncated[:, -1] |= ~buffers.terminated[:, -1]
        buffers.done[:, -1] = True
    traj_ids.assign(buffers.done_np[..., 0], buffers.traj_ids_np)
    buffers.policy_version.fill_(policy_version)


def collect_batch(
    envs: EnvBatch,
    policy: PolicyAdapter,
    buffers: BatchBuffers,
    config: RolloutConfig,
    traj_ids: TrajectoryIds,
    episodes: EpisodeTracker,
    policy_version: int,
) -> None:
    """Fill ``buffers`` with one batch of ``config.num_steps`` steps of every env."""
    begin_batch(buffers)
    with torch.inference_mode(), set_interaction_type(config.exploration_type):
        for t in range(config.num_steps):
            policy.act(t)  # action[:, t] <- policy(observation slot t)
            envs.step(t)  # reward, flags [:, t]; observation slot t + 1 (reset obs if done)
    finish_batch(buffers, config, traj_ids, episodes, policy_version)
