"""A TorchRL env stepped through TorchRL: :class:`TorchRLEnv`, an env batch whose steps are
``env.step`` then ``env.maybe_reset`` on the next root, so the true final observation comes from
``"next"`` and the reset observation from the new root.
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.checks import BadDataError
from rlcollect.envs.base import EnvBatch
from rlcollect.envs.torchrl_spaces import as_flag, key_tuple, prepare_env_policy, spec_space

__all__ = ["TorchRLEnv"]


class TorchRLEnv(EnvBatch):
    """Wraps a TorchRL ``EnvBase``; an env with ``batch_size=[N]`` gives ``N`` envs.

    Observation keys are the observation spec's keys (one ``"observation"`` key gives the usual
    layout, several give a Dict layout); the action is ``"action"``.

    Examples:
        >>> from torchrl.envs import GymEnv
        >>> TorchRLEnv(GymEnv("CartPole-v1", categorical_action_encoding=True)).num_envs
        1
    """

    observes_episode_starts = True  # is_init is its InitTracker's, as in TorchRL

    def __init__(self, env: Any, max_episode_steps: int | None = None) -> None:
        batch_size = tuple(env.batch_size)
        if len(batch_size) > 1:
            raise ValueError(f"TorchRL env batch_size {batch_size}: only [] or [N] are supported")
        super().__init__(batch_size[0] if batch_size else 1, max_episode_steps)
        self.env = env
        self._batched = bool(batch_size)
        self.unbatched = not self._batched
        def per_env(spec: Any) -> Any:
            return spec[0] if self._batched else spec

        obs_spec = per_env(env.observation_spec)
        self._obs_keys = list(obs_spec.keys())
        self._step_keys = [*self._obs_keys, "reward", "terminated"]  # what every step must return
        self._obs_keys_nested = {(key,) if isinstance(key, str) else tuple(key) for key in self._obs_keys}
        # the leaves, as the batch buffers name them: ("delta", "observation") of a nested entry
        self._obs_leaves = [key_tuple(key) for key in obs_spec.keys(include_nested=True, leaves_only=True)]
        obs_space = spec_space(obs_spec, "observation_spec")
        assert isinstance(obs_space, spaces.Dict)
        single = self._obs_keys == ["observation"]
        self.observation_space = obs_space["observation"] if single else obs_space
        self.action_space = spec_space(per_env(env.action_spec), "action_spec")
        self._root: Any = None
        # what a step's "next" may hold: an entry beyond it would have no place in the buffers
        self._declared: set[tuple[str, ...]] | None = {*self._obs_leaves, *map(key_tuple, env.done_keys),
                                                        *map(key_tuple, env.reward_keys)}

    def bind(self, buffers: BatchBuffers) -> None:
        super().bind(buffers)
        self._reward = buffers.reward[..., 0]  # [N, T]
        # each observation's shape as the env returns it (its spec's): checked once per key and step
        self._obs_shapes = {key: buffers.obs_ext[key].shape[2:] if not self._batched
                            else buffers.obs_ext[key].shape[:1] + buffers.obs_ext[key].shape[2:]
                            for key in self._obs_leaves}
        self._terminated = buffers.terminated[..., 0]
        self._truncated = buffers.truncated[..., 0]
        self._actions = buffers.action
        # what the policy wrote for the next step (a recurrent module's next state): handed to the
        # env's step as TorchRL's collectors do, so that it becomes the next root (its primer's key)
        self._policy_next = [(key, extra) for key, extra in buffers.extras.items()
                             if key[0] == "next" and key[1:] in self._obs_keys_nested]

    def _write_root(self, slot: int) -> None:
        assert self._buffers is not None
        for key in self._obs_leaves:
            value = self._root.get(key)
            if value.shape != self._obs_shapes[key]:  # a copy would broadcast it, or fail deep in torch
                name = key[0] if len(key) == 1 else key
                raise BadDataError(f"entry {name!r}", None, slot - 1 if slot else None,
                                   f"has shape {tuple(value.shape)}, but the env's observation_spec "
                                   f"declares {tuple(self._obs_shapes[key])}: a TorchRL env must return "
                                   "what its specs say")
            self._buffers.obs_ext[key][:, slot] = value if self._batched else value.unsqueeze(0)

    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        if seeds is not None:
            self.env.set_seed(seeds[0])  # a batched TorchRL env seeds sub-env i with seed + i
        self._root = self.env.reset()
        self._write_root(slot)
        self._steps[:] = 0

    def step(self, t: int) -> None:
        buffers = self._buffers
        assert buffers is not None and self._root is not None
        action = self._actions[:, t].clone()  # the env's own: one it keeps or edits touches no batch
        self._root.set("action", action if self._batched else action[0])
        for next_key, extra in self._policy_next:
            self._root.set(next_key, extra[:, t] if self._batched else extra[0, t])
        out = self.env.step(self._root)
        nxt = out.get("next")
        if self._declared is not None:  # the first step: every entry has its place
            self._check_declared(nxt, t)
        for key in self._step_keys:  # a key the step dropped: never the previous value again
            if nxt.get(key, None) is None:
                returned = sorted(map(str, nxt.keys()))
                raise BadDataError(f"entry ('next', {key!r})", None, t,
                                   f"is missing from the env's step, which returned {returned}: a TorchRL "
                                   "env must return its observations, reward and terminated at every step")
        reward = nxt.get("reward").reshape(self.num_envs)  # TorchRL's step checked it against its spec
        terminated = as_flag(nxt.get("terminated")).reshape(self.num_envs)
        truncated = as_flag(nxt.get("truncated", torch.zeros_like(terminated))).reshape(self.num_envs)
        self._steps += 1
        truncated = truncated | torch.from_numpy(self._steps >= self._limit)
        self._reward[:, t] = reward
        self._terminated[:, t] = terminated
        self._truncated[:, t] = truncated
        done = terminated | truncated
        if done.any():
            for i in torch.nonzero(done)[:, 0].tolist():
                final = {k: (nxt.get(k)[i] if self._batched else nxt.get(k)).clone() for k in self._obs_keys}
                buffers.finals.append((i, t, final if len(final) > 1 else next(iter(final.values()))))
            self._steps[done.numpy()] = 0
        root = self.env.step_mdp(out)
        for key in ("done", "terminated", "truncated"):  # collector-side limits count as ends
            if key in root:
                root.set(key, (done if key != "terminated" else terminated).reshape(root.get(key).shape))
        self._root = self.env.maybe_reset(root)
        self._write_root(t + 1)

    def _check_declared(self, nxt: Any, t: int) -> None:
        """Raise where the step returned an entry the specs do not declare (it would be lost)."""
        assert self._declared is not None
        extra = sorted(str(key) for key in map(key_tuple, nxt.keys(True, True)) if key not in self._declared)
        self._declared = None
        if extra:
            raise BadDataError(f"entries {', '.join(extra)} of 'next'", None, t,
                               "are not in the env's specs, from which the batch buffers are laid out: "
                               "declare them in its observation spec (a transform's "
                               "transform_observation_spec), so that the batch holds them")

    def prepare_policy(self, policy: Any) -> None:
        prepare_env_policy(self.env, policy)

    def seed_action_spaces(self, seeds: list[int]) -> None:
        self.action_space.seed(seeds[0])

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()

    def _state_objects(self) -> Any:
        return None  # never held in a state_dict, as in TorchRL (no warning: by design)
