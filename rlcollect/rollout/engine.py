"""One process's collection: its envs, policies, ids, episode sums and seeds, batch after batch.

A :class:`Rollout` is what the single-process collector runs in the caller's process and what
every worker runs for its share of the envs. It is built from a picklable :class:`RolloutSpec`;
it collects into whatever :class:`BatchBuffers` it is handed (its own, or a worker's slice of a
shared-memory slot), and the buffers decide the steps per batch.

Examples:
    >>> from rlcollect.data.buffers import BatchBuffers
    >>> rollout = Rollout(RolloutSpec("CartPole-v1", num_envs=2))
    >>> buffers = BatchBuffers.allocate(rollout.layout, 2, 3)  # 2 envs, T = 3 steps
    >>> rollout.set_seed(0)
    >>> rollout.collect(buffers)
    3
    >>> buffers.batch["observation"].shape
    torch.Size([2, 3, 4])
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.common.generators import generator_states, restore_generators, seed_generators
from rlcollect.common.state import check_tensor, checked_state, stamped
from rlcollect.data.batch_checks import BatchValueCheck
from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.checks import BadDataError
from rlcollect.data.layout import (
    BatchLayout,
    Field,
    OneHotSpace,
    action_fields,
    observation_fields,
    stored_observation_space,
)
from rlcollect.data.trajectories import TrajectoryIds
from rlcollect.envs.base import EnvBatch
from rlcollect.envs.factory import make_env_batch
from rlcollect.envs.infos import info_fields
from rlcollect.policies.adapter import PolicyAdapter
from rlcollect.policies.adapters import make_policy
from rlcollect.policies.random_policy import RANDOM_VERSION, RandomPolicy
from rlcollect.rollout.config import RolloutConfig
from rlcollect.rollout.episodes import EpisodeTracker
from rlcollect.rollout.loop import collect_batch
from rlcollect.rollout.models import ModelLookup, copy_weights, env_modules
from rlcollect.rollout.spec import POLICY_FROM_SPEC, RolloutSpec, build_policy
from rlcollect.rollout.stream import StreamLoop

__all__ = ["POLICY_FROM_SPEC", "Rollout", "RolloutSpec", "build_policy", "compile_adapter"]

_ROLLOUT_KEYS = ("frames", "batches", "traj_ids", "episodes", "envs", "pending_obs", "models", "rng")


def compile_adapter(policy: PolicyAdapter, compile_policy: bool | Mapping[str, Any]) -> None:
    """``torch.compile`` what ``policy`` calls where ``compile_policy`` asks (``True`` or
    ``torch.compile`` arguments); random and served policies call nothing to compile."""
    if compile_policy and hasattr(policy, "callable"):
        kwargs = dict(compile_policy) if isinstance(compile_policy, Mapping) else {}
        policy.callable = torch.compile(policy.callable, **kwargs)


class Rollout(ModelLookup):
    """Collects batches for ``spec.num_envs`` envs into given buffers.

    Args:
        spec: what to build.
        env_offset: index of this process's first env among all the collector's envs (seeds).
        traj_stride, traj_offset, traj_start: trajectory-id space (see ``TrajectoryIds``).
        served_policy: an adapter that has a policy server choose the actions (and stamp each
            step's policy version); ``spec.policy`` is then unused.
        envs: the env batch, already built (default: built from ``spec``).
    """

    def __init__(
        self,
        spec: RolloutSpec,
        *,
        env_offset: int = 0,
        traj_stride: int = 1,
        traj_offset: int = 0,
        traj_start: int = 0,
        served_policy: PolicyAdapter | None = None,
        envs: EnvBatch | None = None,
        user_policy: Any = POLICY_FROM_SPEC,
    ) -> None:
        self.spec = spec
        self.env_offset = env_offset
        self.served = served_policy is not None
        self.user_policy = None if self.served else (
            build_policy(spec) if user_policy is POLICY_FROM_SPEC else user_policy)
        made = envs if envs is not None else make_env_batch(
            spec.create_env_fn, spec.num_envs, dict(spec.create_env_kwargs or {}), spec.max_frames_per_traj,
            policy=self.user_policy, register_policy_transforms=spec.register_policy_transforms,
        )
        if not isinstance(made, EnvBatch):  # rlcollect.rollout.build makes a TensorDictRollout of it
            made.close()
            raise TypeError(f"this TorchRL env's data does not fit the batch buffers ({made.reason}): "
                            "build its rollout with rlcollect.rollout.build.make_rollout")
        self.envs = made
        self.num_envs = self.envs.num_envs
        # what the batch holds: the env's observations, floating-point ones in spec.obs_dtype
        obs_space = stored_observation_space(self.envs.observation_space, spec.obs_dtype)
        action_space = self.envs.action_space
        self.random_policy = RandomPolicy(action_space, self.num_envs)
        self.policy: PolicyAdapter = self._adapt_policy(served_policy, obs_space, action_space)
        self.layout = self._layout(obs_space, action_space)
        self.policy.action_field = self.layout.action
        self._value_check = BatchValueCheck(obs_space, action_space, self.layout.observations,
                                            self.layout.action, self.layout.extras)
        self.set_check(spec.check)
        self.config = RolloutConfig(
            truncate_last=spec.truncates_last,
            exploration_type=spec.exploration_type,
        )
        # a streaming pool (rows are not envs) counts its own envs: ids, episodes, seeds are per env
        pool = self.envs.pool_size
        self.first_env = env_offset * pool // self.num_envs  # this process's first env in the collector
        self.traj_ids = TrajectoryIds(pool, stride=traj_stride, offset=traj_offset, start=traj_start)
        self.episodes = EpisodeTracker(pool, env_offset=self.first_env, infos=self.layout.infos)
        self.stream = StreamLoop(self.envs, self.layout, self.first_env) if self.envs.streams else None
        # what the next batch's first step starts from: each env's observation and whether it
        # starts an episode (all do at first, and after a reset)
        self.pending_obs = {
            f.key: torch.zeros((self.num_envs, *f.shape), dtype=f.dtype) for f in self.layout.observations}
        self.pending_init = torch.ones(self.num_envs, 1, dtype=torch.bool) if self.layout.is_init else None
        self._scratch = BatchBuffers.allocate(self.layout, self.num_envs, 1)  # resets write here
        self.frames = self.batches = 0
        self.collect_seconds = 0.0
        self.models: dict[str, torch.nn.Module] = {**spec.models, **env_modules(self.envs, spec.env_models)}
        if self.policy.module is not None:
            self.models["policy"] = self.policy.module

    def _adapt_policy(self, served_policy: PolicyAdapter | None, obs_space: gym.Space[Any],
                      action_space: gym.Space[Any]) -> PolicyAdapter:
        """The policy that acts: the server's, the random one, or the user's adapted (and compiled
        where the spec asks)."""
        spec = self.spec
        if self.user_policy is not None:
            self.envs.prepare_policy(self.user_policy)
        policy = served_policy if served_policy is not None else (
            self.random_policy
            if self.user_policy is None
            else make_policy(
                self.user_policy, obs_space, action_space, self.num_envs,
                device=spec.policy_device, exploration_type=spec.exploration_type,
                unbatched=self.envs.unbatched, episode_starts=not self.envs.observes_episode_starts,
                action_at_build=spec.action_at_build,
            )
        )
        compile_adapter(policy, spec.compile_policy)
        return policy

    def _layout(self, obs_space: gym.Space[Any], action_space: gym.Space[Any]) -> BatchLayout:
        """What a batch holds: the observations, the action as stored, the policy's extras, and
        the env of each frame and ``is_init`` where the envs or the policy need them."""
        return BatchLayout(
            tuple(observation_fields(obs_space)), self._stored_action(action_space), self.policy.extras,
            dict_observations=isinstance(obs_space, gym.spaces.Dict), env_ids=self.envs.streams,
            is_init=self.policy.reads_is_init, infos=self._info_fields(), masked=self.envs.takes_own_resets,
        )

    def _info_fields(self) -> tuple[Field, ...]:
        """The ``info_keys``' fields: the spec's (a worker lays its batch out as its parent's
        slots), or those of the first env's values at one step (the envs are reset after)."""
        spec = self.spec
        if spec.info_fields is not None or not spec.info_keys:
            return spec.info_fields or ()
        return info_fields(self.envs.step_info(), spec.info_keys, source="the first env at its first step")

    def _stored_action(self, action_space: gym.Space[Any]) -> Field:
        """The action as stored: the space's dtype, or the policy's (an integer one) when the spec
        says so (TorchRL's layout); a float one-hot action (scores the env steps with the argmax
        of) is stored as the policy wrote it in every layout, as TorchRL does."""
        action = action_fields(action_space)[0]
        wanted = self.policy.action_dtype
        if isinstance(action_space, OneHotSpace) and wanted is not None and wanted.is_floating_point:
            return dataclasses.replace(action, dtype=wanted)
        if self.spec.action_dtype == "policy" and wanted is not None and not wanted.is_floating_point \
                and not action.dtype.is_floating_point and not wanted.is_complex:
            action = dataclasses.replace(action, dtype=wanted)
        return action

    def set_check(self, check: str) -> None:
        """What is checked from the next batch on: ``"full"``, ``"batch"`` or ``"off"``
        (:mod:`rlcollect.data.checks`; validated by the collectors' options)."""
        self.envs.check_writes = self.policy.check_writes = check == "full"
        self.check_values = None if check == "off" else self._value_check

    # -- collection ------------------------------------------------------------------------
    def collect(
        self,
        buffers: BatchBuffers,
        *,
        random: bool = False,
        policy_version: int = 0,
        stop: np.ndarray | None = None,
    ) -> int:
        """Collect one batch into ``buffers``; return the steps taken (``T`` unless stopped).

        A served policy stamps each step's version itself; ``policy_version`` stamps the others,
        and :data:`RANDOM_VERSION` the ``random`` ones (no policy chose them).
        """
        if self.spec.pre_collect_hook is not None:
            self.spec.pre_collect_hook()
        if self.spec.reset_at_each_iter and self.batches > 0:
            self.reset()
        policy = self.random_policy if random else self.policy
        self.envs.bind(buffers)
        policy.bind(buffers)
        start = time.perf_counter()
        try:
            version = RANDOM_VERSION if random else None if self.served else policy_version
            if self.stream is not None:  # frames in the order the envs answer (no preemption: none waits)
                steps = self.stream.collect(policy, buffers, self.config, self.traj_ids, self.episodes,
                                            version)
            else:
                check = self.check_values
                blame = None if check is None else partial(check.blame_action, buffers)
                steps = collect_batch(self.envs, policy, buffers, self.config, self.traj_ids, self.episodes,
                                      version, self.pending_obs, stop, self.pending_init, blame)
            if self.check_values is not None:
                self.check_values(buffers, steps)
        except BadDataError as error:  # (its cause kept: the env's error an action outside the space made)
            raise error.located(self.env_offset, self.batches) from error.__cause__
        self.collect_seconds += time.perf_counter() - start
        self.frames += buffers.frames(steps)
        self.batches += 1
        return steps

    def collect_batch(self, buffers: BatchBuffers | None, num_steps: int, *, random: bool = False,
                      policy_version: int = 0, stop: np.ndarray | None = None) -> tuple[TensorDictBase, int]:
        """The :class:`~rlcollect.rollout.build.Engine` form of :meth:`collect`: the batch (in
        ``buffers``, ``num_steps`` long) and the steps taken."""
        assert buffers is not None, "a Rollout collects into batch buffers"
        steps = self.collect(buffers, random=random, policy_version=policy_version, stop=stop)
        return buffers.batch, steps

    def _reset(self, seeds: list[int] | None) -> None:
        """Reset the envs; their observations become the next batch's first."""
        self.envs.bind(self._scratch)
        self.envs.reset(slot=0, seeds=seeds)
        if self.stream is not None:
            self.stream.restart()
        for key, obs in self._scratch.obs_ext.items():
            self.pending_obs[key].copy_(obs[:, 0])
        if self.pending_init is not None:
            self.pending_init.fill_(True)
        self.episodes.abandon()

    def reset(self) -> None:
        """Reset every env now (unseeded); the next batch starts new trajectories."""
        self._reset(None)
        self.traj_ids.restart()

    def set_seed(self, seed: int | None, *, new_trajectories: bool = False) -> None:
        """Reset env ``i`` with ``seed + first_env + i`` and seed the generators from it."""
        if seed is None:
            self._reset(None)
        else:
            seeds = [seed + self.first_env + i for i in range(self.envs.pool_size)]
            self._reset(seeds)
            self.envs.seed_action_spaces(seeds)
            self.random_policy.seed(seed, self.env_offset)
            seed_generators(seed + self.env_offset)
        if new_trajectories:
            self.traj_ids.restart()

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Counters, ids, episode sums, pending observations, RNG states, weights and envs."""
        return stamped("Rollout", {
            "frames": self.frames,
            "batches": self.batches,
            "traj_ids": self.traj_ids.state_dict(),
            "episodes": self.episodes.state_dict(),
            "envs": self.envs.state_dict(),
            "pending_obs": {k: v.clone() for k, v in self.pending_obs.items()},
            "models": copy_weights(self.models),
            "rng": {**generator_states(), "random_policy": self.random_policy.state_dict()},
            "policy_state": {  # what a policy carrying state continues from
                "pending_init": None if self.pending_init is None else self.pending_init.clone(),
                "carry": {key: value.clone() for key, value in self.policy.carry.items()},
            },
        })

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`: the next batches equal the uninterrupted run's. From a
        state without the envs (their state was not data), each env goes on with its own episode (its
        observation, step count, running return and policy state) under a new trajectory id:
        no frame pairs an observation of the saved envs with a step of these.

        Raises:
            TypeError, ValueError: not a rollout's state, or one of other envs (each named).
        """
        state = checked_state("Rollout", state, _ROLLOUT_KEYS)
        pending = state["pending_obs"]
        if not isinstance(pending, Mapping) or set(pending) != set(self.pending_obs):
            raise ValueError(f"Rollout.load_state_dict: the state's observations are "
                             f"{sorted(map(str, pending)) if isinstance(pending, Mapping) else pending!r}, "
                             f"these envs' are {sorted(map(str, self.pending_obs))}")
        for key, value in pending.items():  # the envs' count and spaces, before anything changes
            check_tensor(f"the state's observation {key} (one row per env)", value, self.pending_obs[key])
        self.check_weights_state(state["models"])
        restored = self.envs.load_state_dict(state["envs"])  # all or nothing: refused, nothing changed
        self.frames, self.batches = int(state["frames"]), int(state["batches"])
        self.episodes.load_state_dict(state["episodes"], running=restored)
        if restored:
            self.traj_ids.load_state_dict(state["traj_ids"])
            for key, value in pending.items():
                self.pending_obs[key].copy_(value)
            self._load_policy_state(state.get("policy_state") or {})
        else:
            self.traj_ids.continue_after(state["traj_ids"])
        for model_id, weights in state["models"].items():
            self.module(model_id).load_state_dict(weights)
        restore_generators(state["rng"])
        self.random_policy.load_state_dict(state["rng"]["random_policy"])

    def _load_policy_state(self, carried: Mapping[str, Any]) -> None:
        """What a policy carrying state continues from (its envs restored with it)."""
        if self.pending_init is not None and carried.get("pending_init") is not None:
            self.pending_init.copy_(carried["pending_init"])
        for key, value in (carried.get("carry") or {}).items():
            if key in self.policy.carry:
                self.policy.carry[key].copy_(value)

    def close(self) -> None:
        """Close the envs."""
        self.envs.close()
