"""The Gymnasium envs inside a plain TorchRL ``GymEnv``, ``SerialEnv`` or ``ParallelEnv``, stepped
directly (several times faster than through TorchRL), with the TorchRL env's spaces, seeding and
policy preparation, so the data is the same frame for frame.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from rlcollect.envs.gym_envs import GymEnvs
from rlcollect.envs.torchrl_spaces import OneHotSpace, prepare_env_policy, spec_space
from rlcollect.envs.torchrl_stepped import TorchRLEnv
from rlcollect.envs.vector import GymVectorEnv

__all__ = ["TorchRLGymEnvs", "TorchRLGymVector", "gym_envs_inside", "plain_in_processes"]


def plain_in_processes(env: Any) -> bool:
    """Whether each of a ``ParallelEnv``'s constructors builds a plain ``GymEnv`` (each distinct
    constructor and arguments built once here, and closed)."""
    if env.device not in (None, torch.device("cpu")) or not env.is_closed:
        return False
    probed: list[tuple[Any, Any]] = []
    for create, kwargs in zip(env.create_env_fn, env.create_env_kwargs, strict=True):
        if any(create is c and kwargs == k for c, k in probed):
            continue
        probed.append((create, kwargs))
        built = create(**kwargs)
        try:
            if _plain_gym_env(built) is None:
                return False
        finally:
            built.close()
    return True


def gym_envs_inside(env: Any) -> list[gym.Env[Any, Any]] | None:
    """The Gymnasium envs a ``GymEnv`` (or a ``SerialEnv`` of them, which this starts) only
    converts to and from TensorDicts; ``None`` where TorchRL does more than that."""
    from torchrl.envs import SerialEnv

    if type(env) is SerialEnv:
        if env.device not in (None, torch.device("cpu")) or env.num_workers < 1:
            return None
        if env.is_closed:
            env.start()
        subs = list(env._envs)
    else:
        subs = [env]
    inner = []
    for sub in subs:
        gym_env = _plain_gym_env(sub)
        if gym_env is None:
            return None
        inner.append(gym_env)
    return inner


def _plain_gym_env(env: Any) -> gym.Env[Any, Any] | None:
    """``env._env`` when ``env`` is a ``GymEnv`` (not a subclass) that adds nothing to it but
    TensorDicts: one ``observation``, ``action`` and ``reward``, the three done flags, no pixels,
    frame skip, info reader or state, on the CPU, with spaces that map to its specs unchanged."""
    from torchrl.envs import GymEnv

    if type(env) is not GymEnv:
        return None
    inner = getattr(env, "_env", None)
    if not isinstance(inner, gym.Env) or isinstance(inner, gym.vector.VectorEnv):
        return None
    if (env.from_pixels or env.info_dict_reader or getattr(env, "wrapper_frame_skip", 1) != 1
            or getattr(env, "frame_skip", 1) != 1 or tuple(env.batch_size) != ()
            or env.device not in (None, torch.device("cpu")) or env._seed_calls_reset is False):
        return None
    if (list(env.full_observation_spec.keys(True, True)) != ["observation"]
            or list(env.full_action_spec.keys(True, True)) != ["action"]
            or list(env.full_reward_spec.keys(True, True)) != ["reward"]
            or tuple(env.reward_spec.shape) != (1,) or env.reward_spec.dtype != torch.float32
            or sorted(env.full_done_spec.keys(True, True)) != ["done", "terminated", "truncated"]
            or list(env.full_state_spec.keys(True, True))):
        return None
    obs_space, act_space = inner.observation_space, inner.action_space
    obs_spec = spec_space(env.observation_spec["observation"], "observation_spec")
    if not (isinstance(obs_space, spaces.Box) and type(obs_spec) is spaces.Box
            and obs_space.shape == obs_spec.shape and obs_space.dtype == obs_spec.dtype):
        return None
    act_spec = spec_space(env.action_spec, "action_spec")
    if isinstance(act_space, spaces.Discrete):
        if act_space.start != 0 or not (
                (isinstance(act_spec, spaces.Discrete) and act_spec.n == act_space.n and act_spec.start == 0)
                or (isinstance(act_spec, OneHotSpace) and act_spec.shape == (int(act_space.n),))):
            return None
    elif not (isinstance(act_space, spaces.Box) and type(act_spec) is spaces.Box
              and act_space.shape == act_spec.shape and act_space.dtype == act_spec.dtype):
        return None
    return inner


class _InnerGymEnv(gym.ActionWrapper):
    """The Gymnasium env inside a ``GymEnv``: with a one-hot action ``space`` it takes TorchRL's
    one-hot actions and steps the env with their index, as ``GymEnv`` does; ``holds`` keeps the
    TorchRL env it came from alive (and so unclosed)."""

    def __init__(
        self, env: gym.Env[Any, Any], space: spaces.Space[Any] | None = None, holds: Any = None
    ) -> None:
        super().__init__(env)
        self._one_hot = isinstance(space, OneHotSpace)
        if space is not None:
            self.action_space = space
        self.holds = holds

    def action(self, action: Any) -> Any:
        if not self._one_hot:
            return action
        action = np.asarray(action)  # as TorchRL's OneHot spec reads it: float scores truncate first
        return int((action.astype(np.int64) if action.dtype.kind == "f" else action).argmax())


def _gym_env_in_process(create_env_fn: Any, kwargs: dict[str, Any], action_space: spaces.Space[Any]) -> Any:
    """Run in a vector env's process: build the TorchRL env, hand out the Gymnasium env inside."""
    env = create_env_fn(**kwargs)
    inner = _plain_gym_env(env)
    if inner is None:
        raise TypeError(f"ParallelEnv's create_env_fn {create_env_fn!r} built {type(env).__name__} "
                        f"{env!r:.80}, not the plain GymEnv it built in the main process")
    return _InnerGymEnv(inner, action_space, holds=env)


class TorchRLGymEnvs(GymEnvs):
    """The Gymnasium envs inside a plain TorchRL ``GymEnv`` (or a ``SerialEnv`` of them), stepped
    by rlcollect's own loop as :class:`GymEnvs` are; the spaces (one-hot actions included),
    seeding, policy preparation and closing are the TorchRL env's, as in :class:`TorchRLEnv`, so
    the batches are the same frame for frame, only made without a TensorDict per step.

    Examples:
        >>> from torchrl.envs import GymEnv, SerialEnv
        >>> from rlcollect.envs.torchrl_env import torchrl_env_batch
        >>> batch = torchrl_env_batch(SerialEnv(2, lambda: GymEnv("CartPole-v1")))
        >>> batch.num_envs, batch.unbatched, batch.action_space
        (2, False, OneHotSpace((2,), int64))
    """

    observes_episode_starts = True  # is_init is its InitTracker's, as in TorchRL

    follows_num_envs = False  # the TorchRL env brings its own envs

    def __init__(
        self, env: Any, inner: list[gym.Env[Any, Any]], max_episode_steps: int | None = None
    ) -> None:
        self.env = env
        self.unbatched = not tuple(env.batch_size)
        def per_env(spec: Any) -> Any:
            return spec if self.unbatched else spec[0]

        action_space = spec_space(per_env(env.action_spec), "action_spec")
        if isinstance(action_space, OneHotSpace):
            inner = [_InnerGymEnv(e, OneHotSpace(action_space.shape, action_space.dtype)) for e in inner]
        super().__init__(inner, max_episode_steps)
        self.observation_space = spec_space(per_env(env.observation_spec)["observation"], "observation_spec")
        self.action_space = action_space

    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        if seeds is not None:  # TorchRL's seeding: a reset with the seed (sub-env i gets the i-th of
            self.env.set_seed(seeds[0])  # TorchRL's seed chain), then the first episode's reset
        super().reset(slot)

    prepare_policy = TorchRLEnv.prepare_policy
    seed_action_spaces = TorchRLEnv.seed_action_spaces
    close = TorchRLEnv.close
    _state_objects = TorchRLEnv._state_objects


class TorchRLGymVector(GymVectorEnv):
    """A TorchRL ``ParallelEnv`` of plain ``GymEnv`` s as a Gymnasium ``AsyncVectorEnv`` of as many
    processes (started by a forkserver, resetting finished envs in the same step), each stepping
    the Gymnasium env inside the ``GymEnv`` its constructor builds; the spaces, seeding (TorchRL's
    seed chain) and policy preparation are the ``ParallelEnv``'s, so the batches are the ones
    TorchRL's collector makes, without TorchRL's per-step TensorDicts and pipes.
    """

    observes_episode_starts = True  # is_init is its InitTracker's, as in TorchRL

    def __init__(self, env: Any, max_episode_steps: int | None = None) -> None:
        self.torchrl_env = env
        action_space = spec_space(env.action_spec[0], "action_spec")
        factories = [partial(_gym_env_in_process, create, kwargs, action_space)
                     for create, kwargs in zip(env.create_env_fn, env.create_env_kwargs, strict=True)]
        vector = gym.vector.AsyncVectorEnv(factories, context="forkserver",
                                           autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        super().__init__(vector, max_episode_steps)
        observation_space = spec_space(env.observation_spec[0], "observation_spec")
        assert isinstance(observation_space, spaces.Dict)
        self.observation_space = observation_space["observation"]
        self.action_space = action_space

    def _reset_all(self, seeds: list[int] | None) -> Any:
        if seeds is not None:  # as ParallelEnv.set_seed: sub-env i is reset with the i-th seed of
            from torchrl._utils import seed_generator  # TorchRL's chain, then reset for its first episode

            chain = [seeds[0]]
            while len(chain) < self.num_envs:
                chain.append(seed_generator(chain[-1]))
            self.env.reset(seed=chain)  # type: ignore[arg-type]  # a list: one seed per sub-env
        obs, _ = self.env.reset()
        return obs

    def prepare_policy(self, policy: Any) -> None:
        prepare_env_policy(self.torchrl_env, policy)

    seed_action_spaces = TorchRLEnv.seed_action_spaces

    def close(self) -> None:
        self.env.close()
        if not self.torchrl_env.is_closed:
            self.torchrl_env.close()

    _state_objects = TorchRLEnv._state_objects
