"""TorchRL envs whose data the batch buffers cannot hold, stepped tensordict by tensordict.

Several action, reward or done keys, multi-agent groups with their own dims, batch sizes of two
or more dims, heterogeneous or non-tensor specs, transforms that edit the stored frames:
:func:`tensordict_only` says why, and
:class:`TensorDictEnv` is what :mod:`rlcollect.rollout.tensordict_loop` steps, as TorchRL's
collector steps them.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from rlcollect.data.trajectories import trajectory_ends
from rlcollect.envs.torchrl_spaces import key_tuple, prepare_env_policy, spec_space

__all__ = ["TensorDictEnv", "frame_editors", "tensordict_only"]


FLAGS = ("done", "terminated", "truncated")


def tensordict_only(env: Any) -> str | None:
    """Why the batch buffers cannot hold ``env``'s data (``None``: they can): the engine's layout
    has one ``"action"``, one ``"reward"``, the flags at the root, a batch size of at most one dim
    and Gymnasium-mappable specs.

    Examples:
        >>> from torchrl.envs import GymEnv
        >>> from torchrl.testing.mocking_classes import NestedCountingEnv
        >>> tensordict_only(GymEnv("CartPole-v1")) is None
        True
        >>> tensordict_only(NestedCountingEnv())
        "action keys [('data', 'action')] (the buffers hold one 'action')"
    """
    batch_size = tuple(env.batch_size)
    if len(batch_size) > 1:
        return f"batch_size {batch_size} (the buffers hold [] or [N])"
    if list(env.action_keys) != ["action"]:
        return f"action keys {list(env.action_keys)} (the buffers hold one 'action')"
    if list(env.reward_keys) != ["reward"]:
        return f"reward keys {list(env.reward_keys)} (the buffers hold one 'reward')"
    if not set(env.done_keys) <= set(FLAGS) or "terminated" not in env.done_keys:
        return f"done keys {list(env.done_keys)} (the buffers hold 'terminated' and 'truncated' at the root)"

    def per_env(spec: Any) -> Any:
        return spec[0] if batch_size else spec

    try:
        spec_space(per_env(env.observation_spec), "observation_spec")
        spec_space(per_env(env.action_spec), "action_spec")
    except Exception as error:  # stacked (heterogeneous) specs, non-tensor entries, ...
        return f"specs with no Gymnasium space ({type(error).__name__}: {error})"
    editors = frame_editors(env)
    if editors:
        return (f"transforms that edit each frame after its step ({', '.join(editors)}), which the "
                "buffers, laid out from the specs, would not follow")
    return None


def frame_editors(env: Any) -> list[str]:
    """The transforms of ``env`` that edit the stored frame after ``step_mdp`` (they override
    TorchRL's ``_post_step_mdp_hooks``: ``NextObservationDelta`` writes ``("next", "delta", key)``
    and drops ``("next", key)``, none of it in the specs).

    Examples:
        >>> from torchrl.envs import GymEnv, NextObservationDelta, StepCounter, TransformedEnv
        >>> frame_editors(TransformedEnv(GymEnv("CartPole-v1"), NextObservationDelta()))
        ['NextObservationDelta']
        >>> frame_editors(TransformedEnv(GymEnv("CartPole-v1"), StepCounter()))
        []
    """
    from torchrl.envs import Compose, Transform, TransformedEnv

    names: list[str] = []
    while isinstance(env, TransformedEnv):
        transform = env.transform
        chain = list(transform.transforms) if isinstance(transform, Compose) else [transform]
        names += [type(t).__name__ for t in chain
                  if type(t)._post_step_mdp_hooks is not Transform._post_step_mdp_hooks]
        env = env.base_env
    return names


class TensorDictEnv:
    """A TorchRL env stepped tensordict by tensordict (see :mod:`rlcollect.rollout.tensordict_loop`):
    its batch is ``[*env.batch_size, T]`` with the env's own keys.

    Args:
        env: the TorchRL env.
        reason: why the batch buffers cannot hold its data (:func:`tensordict_only`).

    Examples:
        >>> from torchrl.testing.mocking_classes import NestedCountingEnv
        >>> envs = TensorDictEnv(NestedCountingEnv(batch_size=(2,)), "nested keys")
        >>> envs.num_envs, envs.batch_size
        (2, torch.Size([2]))
    """

    def __init__(self, env: Any, reason: str) -> None:
        self.env, self.reason = env, reason
        self.batch_size = torch.Size(env.batch_size)
        self.num_envs = self.pool_size = self.batch_size.numel()
        self.unbatched = False  # batches are [*batch_size, T]: nothing to drop for TorchRL's layout
        self.streams = self.follows_num_envs = False  # (as an EnvBatch says: rows are envs, built by the env)
        self.done_keys = [key_tuple(key) for key in env.done_keys]
        self.reward_keys = [key_tuple(key) for key in env.reward_keys]
        observed = [key_tuple(key) for key in env.full_observation_spec.keys(True, True)]
        acted = [key_tuple(key) for spec in (env.full_action_spec, env.full_state_spec)
                 for key in spec.keys(True, True)]
        #: the keys of a frame that the env writes (the others are the policy's or the collector's)
        self.env_keys = {*observed, *acted} | {
            ("next", *key) for key in [*observed, *self.reward_keys, *self.done_keys]}

    def reset(self, seed: int | None = None) -> Any:
        """Reset every env (env ``i`` seeded ``seed + i`` by TorchRL); return the first root."""
        if seed is not None:
            self.env.set_seed(seed)
        return self.env.reset()

    def rand_action(self, root: Any) -> Any:
        return self.env.rand_action(root)

    def step(self, root: Any) -> tuple[Any, Any]:
        """``root`` with its ``"next"``, and the next root (reset where the env ended)."""
        return cast(tuple[Any, Any], self.env.step_and_maybe_reset(root))

    def ends(self, nxt: Any) -> torch.Tensor:
        """``[*batch, T]``: whether the trajectory ended at each frame (any done key, any agent)."""
        return trajectory_ends(nxt, len(self.batch_size) + 1, self.done_keys)

    def rewards(self, nxt: Any) -> torch.Tensor:
        """``[*batch, T]``: the sum of every reward entry of each frame (all agents: the team's)."""
        dims = len(self.batch_size) + 1
        total = torch.zeros(nxt.batch_size[:dims], dtype=torch.float64)
        for key in self.reward_keys:
            reward = nxt.get(key)
            total += reward.reshape(*reward.shape[:dims], -1).sum(-1, dtype=torch.float64)
        return total

    def prepare_policy(self, policy: Any) -> None:
        prepare_env_policy(self.env, policy)

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()
