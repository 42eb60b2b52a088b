"""Collection from a pool that answers with whichever envs are ready (an asynchronous EnvPool).

Such a pool of ``N`` envs hands back ``B`` < ``N`` of them per ``recv``, in no fixed order, so a slow
env never holds up the others. A batch row can then not be one env; instead a batch holds the
frames **in the order they complete**, ``B`` rows of ``T``: frame ``k`` of the batch is at row
``k // T``, step ``k % T`` (read the batch row after row and each env's frames come in time
order). ``("collector", "env_ids")`` names each frame's env (counted over the whole collector) and
``("collector", "traj_ids")`` its trajectory, so :func:`~rlcollect.split_trajectories` regroups
the batch into whole trajectories, each in time order. Each frame is still a complete step:
``observation`` and ``action`` (and the policy's extras, and the version that chose it) as the
policy saw and chose them, ``("next", ...)`` what the env answered: the true final observation at
an episode end. Envs reset by the pool (EnvPool resets a finished env at the next action sent to
it) give no frame: their reset observation is the next frame's ``observation``.

Per answer: the frames it completes are written (an action staged per env is read back), then
the policy acts on the ``B`` answering envs together, their actions are staged and sent. When a
batch fills up in the middle of an answer, the rest of it waits for the next batch (its envs
idle until then, and act with the weights of that batch).

Examples:
    >>> from rlcollect import Collector
    >>> pool = {"batch_size": 2, "num_threads": 1}  # 4 envs, the first 2 to answer each time
    >>> with Collector("envpool:CartPole-v1", num_envs=4, create_env_kwargs=pool,
    ...                frames_per_batch=8, total_frames=8, seed=0) as collector:
    ...     batch = next(iter(collector))
    >>> batch.batch_size, batch["collector", "env_ids"].tolist()
    (torch.Size([2, 4]), [[0, 1, 2, 3], [0, 1, 2, 3]])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict.nn import set_interaction_type

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import BatchLayout, get_nested
from rlcollect.data.trajectories import TrajectoryIds
from rlcollect.envs.envpool_env import Received
from rlcollect.policies.adapters import PolicyAdapter
from rlcollect.rollout.config import RolloutConfig
from rlcollect.rollout.episodes import EpisodeTracker

__all__ = ["StreamLoop"]


class StreamLoop:
    """Fills batches from a streaming env batch (``envs.streams``), answer after answer.

    Args:
        envs: the pool: ``num_envs`` rows (``B``), ``pool_size`` envs, ``recv`` / ``send``.
        layout: the batch layout (with ``env_ids``).
        env_offset: the pool's first env among the collector's envs (for ``env_ids``).
    """

    def __init__(self, envs: Any, layout: BatchLayout, env_offset: int = 0) -> None:
        self.envs = envs
        self.env_offset = env_offset
        self.acting = BatchBuffers.allocate(layout, envs.num_envs, 1)  # the answering envs' step
        self.staged = BatchBuffers.allocate(layout, envs.pool_size, 1)  # per env: what it was sent
        self.pending: Received | None = None  # an answer whose frames did not all fit the last batch
        self._written = 0  # of its completed frames
        self._positions: tuple[np.ndarray, np.ndarray] | None = None

    def restart(self) -> None:
        """Forget the held answer (the envs were just reset)."""
        self.pending = None

    def collect(self, policy: PolicyAdapter, buffers: BatchBuffers, config: RolloutConfig,
                traj_ids: TrajectoryIds, episodes: EpisodeTracker, policy_version: int | None) -> int:
        """Fill ``buffers`` with ``B x T`` frames in the order they complete; return ``T``.

        ``policy_version`` ``None``: the policy stamps each step's version itself (a policy server).
        """
        rows, steps = buffers.num_envs, buffers.num_steps
        if self._positions is None or self._positions[0].size != rows * steps:
            self._positions = np.divmod(np.arange(rows * steps), steps)
        total, filled, answers = rows * steps, 0, 0
        buffers.terminated.zero_()
        buffers.truncated.zero_()
        with torch.inference_mode(), set_interaction_type(config.exploration_type):
            while True:
                if self.pending is None:
                    self.pending, self._written = self.envs.recv(answers), 0
                    answers += 1
                answer = self.pending
                todo = np.flatnonzero(answer.completes)[self._written:]
                count = min(len(todo), total - filled)
                if count:
                    self._write(buffers, answer, todo[:count], filled)
                    filled += count
                    self._written += count
                if count < len(todo):
                    break  # the batch is full: the rest of this answer opens the next one
                self._act(policy, answer, policy_version)
                self.pending = None
                if filled == total:
                    break
        self._finish(buffers, config, traj_ids, episodes)
        return steps

    def _write(self, buffers: BatchBuffers, answer: Received, rows: np.ndarray, start: int) -> None:
        """Write the frames the answer's ``rows`` complete at batch positions ``start, ...``."""
        assert self._positions is not None
        at = (self._positions[0][start:start + len(rows)], self._positions[1][start:start + len(rows)])
        envs = answer.env_ids[rows]
        staged = self.staged
        for key, obs in buffers.obs_ext_np.items():
            obs[at] = staged.obs_ext_np[key][envs, 0]
            answered = get_nested(answer.obs, key) if buffers.dict_obs else answer.obs
            buffers.next_obs_np[key][at] = answered[rows]
        buffers.action_np[at] = staged.action_np[envs, 0]
        if buffers.extras:
            at_t, envs_t = tuple(torch.from_numpy(i) for i in at), torch.from_numpy(envs)
            for key, extra in buffers.extras.items():
                extra[at_t] = staged.extras[key][envs_t, 0]
        buffers.policy_version.numpy()[at] = staged.policy_version.numpy()[envs, 0]
        buffers.reward_np[at + (0,)] = answer.reward[rows]
        buffers.terminated_np[at + (0,)] = answer.terminated[rows]
        buffers.truncated_np[at + (0,)] = answer.truncated[rows]
        assert buffers.env_ids is not None
        buffers.env_ids.numpy()[at] = envs

    def _act(self, policy: PolicyAdapter, answer: Received, policy_version: int | None) -> None:
        """The policy's actions for the answering envs, staged per env and sent."""
        acting, staged, envs = self.acting, self.staged, answer.env_ids
        acting.write_obs_all(0, answer.obs)
        if policy_version is not None:
            acting.policy_version.fill_(policy_version)
        policy.bind(acting)
        policy.act(0)
        policy.finish(1)
        for key, obs in acting.obs_ext_np.items():
            staged.obs_ext_np[key][envs, 0] = obs[:, 0]
        staged.action_np[envs, 0] = acting.action_np[:, 0]
        if acting.extras:
            envs_t = torch.from_numpy(envs)
            for key, extra in acting.extras.items():
                staged.extras[key][envs_t, 0] = extra[:, 0]
        staged.policy_version.numpy()[envs, 0] = acting.policy_version.numpy()[:, 0]
        self.envs.send(acting.action_np[:, 0], envs)

    def _finish(self, buffers: BatchBuffers, config: RolloutConfig, traj_ids: TrajectoryIds,
                episodes: EpisodeTracker) -> None:
        """Done flags, episode statistics, trajectory ids and env ids of a full batch."""
        assert buffers.env_ids is not None
        envs, done = _flat(buffers.env_ids.numpy()), _flat(buffers.done_np)  # in frame order
        torch.logical_or(buffers.terminated, buffers.truncated, out=buffers.done)
        episodes.update_stream(envs, _flat(buffers.reward_np), done, buffers.num_steps)
        if config.truncate_last:  # a collector cut: each env's last frame of the batch ends its trajectory
            last = len(envs) - 1 - np.unique(envs[::-1], return_index=True)[1]
            _flat(buffers.truncated_np)[last] |= ~_flat(buffers.terminated_np)[last]
            done[last] = True
        traj_ids.assign_stream(envs, done, _flat(buffers.traj_ids_np))
        episodes.label(buffers.traj_ids_np, buffers.policy_version.numpy())
        envs += self.env_offset


def _flat(array: np.ndarray) -> np.ndarray:
    """``array`` as one dimension, a view (writes go through; an error where it cannot be one)."""
    flat = array.view()
    flat.shape = (array.size,)
    return flat
