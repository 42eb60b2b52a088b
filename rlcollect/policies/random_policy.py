"""Uniform random actions, each env's from a stream of its own.

Env ``i`` (counted over the whole collector) draws from a generator spawned from the collector's
seed: ``SeedSequence(seed, spawn_key=(i,))``. So a seed gives every env the same random actions
however the envs are split over workers (one process of 4 envs, or 2 workers of 2), and no env's
actions share a stream with its own generator (an env reset with ``seed + i`` draws its starting
state, and FrozenLake its slips, from ``np_random(seed + i)``; a policy drawing from that same
stream would choose actions correlated with them). Each env draws a batch's ``T`` actions at once,
when the batch starts.

Examples:
    >>> import gymnasium as gym
    >>> four = RandomPolicy(gym.spaces.Discrete(3), num_envs=4, seed=0)
    >>> two = RandomPolicy(gym.spaces.Discrete(3), num_envs=2, seed=0, first_env=2)  # a second worker
    >>> bool((four.draw(5)[2:] == two.draw(5)).all())
    True
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from rlcollect.data.buffers import BatchBuffers
from rlcollect.policies.adapter import PolicyAdapter

__all__ = ["RANDOM_VERSION", "RandomPolicy"]

#: The ``policy_version`` of a frame whose action was drawn at random during the warm-up
#: (``init_random_frames``): no version of the policy chose it, and the policy's extras there are 0.
RANDOM_VERSION = -1


class RandomPolicy(PolicyAdapter):
    """Uniform random actions for ``num_envs`` envs (envs ``first_env, ...`` of the collector) from
    ``action_space``, seeded by :meth:`seed` (see the module docstring)."""

    _action_np: np.ndarray  # [N, T, *act], set by bind()

    def __init__(self, action_space: gym.Space[Any], num_envs: int, seed: int | None = None,
                 first_env: int = 0) -> None:
        self.single, self.num_envs = action_space, num_envs
        self._streams: list[gym.Space[Any]] = []  # per env: the single space batched over T steps
        self._steps = 0  # the T they are batched over
        self._states: list[Any] = []  # per env: its generator's state, until it draws
        self._draws = np.zeros(0)
        self.seed(seed, first_env)

    def seed(self, seed: int | None, first_env: int = 0) -> None:
        """Env ``i``'s stream from ``SeedSequence(seed, spawn_key=(first_env + i,))`` (``None``:
        fresh entropy)."""
        root, self._first_env = np.random.SeedSequence(seed), first_env
        self._streams, self._states = [], [
            np.random.PCG64(np.random.SeedSequence(root.entropy, spawn_key=(first_env + i,))).state
            for i in range(self.num_envs)]

    def draw(self, steps: int) -> np.ndarray:
        """Each env's next ``steps`` actions, ``[N, steps, *act]``."""
        if not self._streams or self._steps != steps:
            states = self._stream_states()
            self._streams = [batch_space(self.single, steps) for _ in range(self.num_envs)]
            for stream, state in zip(self._streams, states, strict=True):
                stream.np_random.bit_generator.state = state
            self._steps, self._states = steps, []
        return np.stack([stream.sample() for stream in self._streams])

    def sample(self) -> Any:
        """One step's actions for all envs, ``[N, *act]``."""
        return self.draw(1)[:, 0]

    def bind(self, buffers: BatchBuffers) -> None:
        """Point at ``buffers``, draw its ``T`` steps of actions and zero what a policy would have
        written beside them (no output of an earlier batch's policy stays in a random one)."""
        super().bind(buffers)
        self._draws = self.draw(buffers.num_steps)
        for extra in buffers.extras.values():
            extra.zero_()

    def _views(self, buffers: BatchBuffers) -> dict[str, Any]:
        return {"_action_np": buffers.action_np}

    def act(self, t: int) -> None:
        self._action_np[:, t] = self._draws[:, t]

    def _stream_states(self) -> list[Any]:
        """Each env's generator state: held until the streams are built, then theirs."""
        return self._states or [s.np_random.bit_generator.state for s in self._streams]

    def state_dict(self) -> dict[str, Any]:
        """Each env's generator state."""
        return {"streams": copy.deepcopy(self._stream_states())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore each env's generator state (from a state_dict of rlcollect before per-env
        streams, one generator for all envs: streams spawned from that generator's state)."""
        if isinstance(state, dict) and isinstance(state.get("state"), dict) and "bit_generator" in state:
            self.seed(int(state["state"]["state"]) % 2**63, self._first_env)
            return
        streams = state.get("streams") if isinstance(state, dict) else None
        if not isinstance(streams, list) or len(streams) != self.num_envs:
            raise ValueError(f"the random policy's state must hold {self.num_envs} env streams, got "
                             f"{type(state).__name__}")
        self._streams, self._states = [], copy.deepcopy(streams)
