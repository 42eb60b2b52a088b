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
from rlcollect.policies.adapter import PolicyAdapter
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
        self.acting = _Row(BatchBuffers.allocate(layout, envs.num_envs, 1))  # the answering envs' step
        self.staged = _Row(BatchBuffers.allocate(layout, envs.pool_size, 1))  # per env: what it was sent
        self.pending: Received | None = None  # an answer whose frames did not all fit the last batch
        self._written = 0  # of its completed frames
        self._version: int | None = None  # the version acting.version holds
        self._targets: dict[int, _Frames] = {}  # per batch buffers (a worker alternates slots)
        self._by_env = bool(self.staged.extras)  # extras to stage per env (torch-indexed)

    def restart(self) -> None:
        """Forget the held answer (the envs were just reset)."""
        self.pending = None

    def collect(self, policy: PolicyAdapter, buffers: BatchBuffers, config: RolloutConfig,
                traj_ids: TrajectoryIds, episodes: EpisodeTracker, policy_version: int | None) -> int:
        """Fill ``buffers`` with ``B x T`` frames in the order they complete; return ``T``.

        ``policy_version`` ``None``: the policy stamps each step's version itself (a policy server).
        """
        if id(buffers) not in self._targets:
            self._targets[id(buffers)] = _Frames(buffers)
        frames = self._targets[id(buffers)]
        total, filled, answers = frames.total, 0, 0
        buffers.terminated.zero_()
        buffers.truncated.zero_()
        policy.bind(self.acting.buffers)  # nothing else binds it while this batch fills
        with torch.inference_mode(), set_interaction_type(config.exploration_type):
            while True:
                if self.pending is None:
                    self.pending, self._written = self.envs.recv(answers), 0
                    answers += 1
                answer = self.pending
                completes = answer.completes
                todo = None if answer.all_complete else np.flatnonzero(completes)  # None: every row
                left = (len(completes) if todo is None else len(todo)) - self._written
                count = min(left, total - filled)
                if count:
                    if self._written or count < left:
                        todo = np.arange(len(completes)) if todo is None else todo
                        todo = todo[self._written:self._written + count]
                    self._write(frames, answer, todo, filled, count)
                    filled += count
                    self._written += count
                if count < left:
                    break  # the batch is full: the rest of this answer opens the next one
                self._act(policy, answer, policy_version)
                self.pending = None
                if filled == total:
                    break
        self._finish(buffers, config, traj_ids, episodes)
        return frames.steps

    def _write(self, frames: _Frames, answer: Received, rows: np.ndarray | None, start: int,
               count: int) -> None:
        """Write the ``count`` frames the answer's ``rows`` (``None``: all) complete at batch
        positions ``start, ...``."""
        stop, staged = start + count, self.staged
        envs = answer.env_ids if rows is None else answer.env_ids[rows]
        for key, obs in frames.obs.items():  # (take: a gather at half the cost of [envs])
            frames.write_obs(obs, start, staged.obs[key].take(envs, 0))
            answered = get_nested(answer.obs, key) if frames.dict_obs else answer.obs
            frames.next_obs[key][start:stop] = answered if rows is None else answered[rows]
        frames.action[start:stop] = staged.action.take(envs, 0)
        if frames.extras:
            envs_t = torch.from_numpy(envs)
            for key, extra in frames.extras.items():
                extra[start:stop] = staged.extras[key][envs_t]
        frames.version[start:stop] = staged.version.take(envs)
        if frames.is_init is not None and staged.is_init is not None:
            frames.is_init[start:stop] = staged.is_init.take(envs)
        frames.reward[start:stop] = answer.reward if rows is None else answer.reward[rows]
        frames.terminated[start:stop] = answer.terminated if rows is None else answer.terminated[rows]
        frames.truncated[start:stop] = answer.truncated if rows is None else answer.truncated[rows]
        frames.env_ids[start:stop] = envs

    def _act(self, policy: PolicyAdapter, answer: Received, policy_version: int | None) -> None:
        """The policy's actions for the answering envs, staged per env and sent."""
        acting, staged, envs = self.acting, self.staged, answer.env_ids
        envs_t = torch.from_numpy(envs) if self._by_env else None
        acting.buffers.write_obs_all(0, answer.obs)
        if policy_version is not None and policy_version != self._version:
            acting.version[:] = self._version = policy_version
        for c in policy.carried:  # each answering env's own state, from its last step
            policy.carry[c.written].copy_(staged.extras[c.written][envs_t])
        if acting.is_init is not None and staged.is_init is not None:  # a reset observation starts one
            np.logical_not(answer.completes, out=acting.is_init)
            staged.is_init[envs] = acting.is_init
        policy.act(0)
        policy.finish(1)
        for key, obs in acting.obs.items():
            staged.obs[key][envs] = obs
        staged.action[envs] = acting.action
        for key, extra in acting.extras.items():
            staged.extras[key][envs_t] = extra
        staged.version[envs] = acting.version
        self.envs.send(acting.action, envs)

    def _finish(self, buffers: BatchBuffers, config: RolloutConfig, traj_ids: TrajectoryIds,
                episodes: EpisodeTracker) -> None:
        """Done flags, episode statistics, trajectory ids and env ids of a full batch."""
        assert buffers.env_ids is not None
        envs, done = _flat(buffers.env_ids.numpy()), _flat(buffers.done_np)  # in frame order
        torch.logical_or(buffers.terminated, buffers.truncated, out=buffers.done)
        episodes.update_stream(envs, _flat(buffers.reward_np), done, buffers.num_steps)
        traj_ids.assign_stream(envs, done, _flat(buffers.traj_ids_np))  # a cut keeps the episode's id
        if config.truncate_last:  # a collector cut: each env's last frame of the batch ends its trajectory
            last = len(envs) - 1 - np.unique(envs[::-1], return_index=True)[1]
            _flat(buffers.truncated_np)[last] |= ~_flat(buffers.terminated_np)[last]
            done[last] = True
        episodes.label(buffers.traj_ids_np, buffers.policy_version.numpy())
        envs += self.env_offset


def _flat(array: np.ndarray, dims: int = 0) -> np.ndarray:
    """``array``'s first ``dims`` dimensions (all: 0) as one, a view (writes go through; an error
    where it cannot be one)."""
    flat: np.ndarray = array.view()
    flat.shape = (-1,) if dims == 0 else (-1, *array.shape[dims:])
    return flat


class _Row:
    """Views of one-step buffers without their time dimension: ``[rows, ...]`` per key."""

    def __init__(self, buffers: BatchBuffers) -> None:
        self.buffers = buffers
        self.obs = {key: array[:, 0] for key, array in buffers.obs_ext_np.items()}
        self.action = buffers.action_np[:, 0]
        self.extras = {key: extra[:, 0] for key, extra in buffers.extras.items()}
        self.version = buffers.policy_version.numpy()[:, 0]
        self.is_init = None if buffers.is_init is None else buffers.is_init.numpy()[:, 0, 0]


class _Frames:
    """A batch's tensors as frames in order: flat ``[B * T, ...]`` views (observations, which live
    in ``[B, T + 1]`` slots, are written row by row)."""

    def __init__(self, buffers: BatchBuffers) -> None:
        assert buffers.env_ids is not None
        self.steps = buffers.num_steps
        self.total = buffers.num_envs * buffers.num_steps
        self.dict_obs = buffers.dict_obs
        self.obs = buffers.obs_ext_np
        self.next_obs = {key: _flat(array, 2) for key, array in buffers.next_obs_np.items()}
        self.action = _flat(buffers.action_np, 2)
        self.extras = {key: extra.view(self.total, *extra.shape[2:]) for key, extra in buffers.extras.items()}
        self.version = _flat(buffers.policy_version.numpy(), 2)
        self.reward, self.terminated, self.truncated = (
            _flat(array, 3) for array in (buffers.reward_np, buffers.terminated_np, buffers.truncated_np))
        self.env_ids = _flat(buffers.env_ids.numpy(), 2)
        self.is_init = None if buffers.is_init is None else _flat(buffers.is_init.numpy(), 3)

    def write_obs(self, obs: np.ndarray, start: int, values: np.ndarray) -> None:
        """Write ``values`` as the observations of frames ``start, ...``."""
        steps, done = self.steps, 0
        while done < len(values):
            row, col = divmod(start + done, steps)
            count = min(len(values) - done, steps - col)
            obs[row, col:col + count] = values[done:done + count]
            done += count
