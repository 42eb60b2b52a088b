"""Small envs and policies the tests share: written plainly so each test can state what it expects."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit
from tensordict.nn import TensorDictModule


class DictObsEnv(gym.Env[dict[str, Any], int]):
    """Dict observations; episodes end by termination (|x| > 2) or by a 12-step time limit.

    The reset observation has ``count == 0`` and the final one ``count > 0``, so a batch that
    stored a reset observation as the final one is caught.
    """

    observation_space = spaces.Dict(
        {"pos": spaces.Box(-10.0, 10.0, (2,), np.float32), "count": spaces.Discrete(100)}
    )
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1, 1, size=2).astype(np.float32)
        self._count = 0
        return self._obs(), {}

    def step(self, action: int) -> Any:
        move = 0.5 if action else -0.5
        self._pos = (self._pos + move + self.np_random.normal(0, 0.3, 2)).astype(np.float32)
        self._count += 1
        return self._obs(), float(self._pos[1]), bool(abs(self._pos[0]) > 2.0), False, {}

    def _obs(self) -> dict[str, Any]:
        return {"pos": self._pos.copy(), "count": self._count}


def make_dict_env() -> gym.Env[Any, Any]:
    return TimeLimit(DictObsEnv(), max_episode_steps=12)


def make_cartpole() -> gym.Env[Any, Any]:
    """CartPole with a 40-step limit: a tilt-following policy both terminates and truncates."""
    return gym.make("CartPole-v1", max_episode_steps=40)


class StepInfo(gym.Wrapper[Any, Any, Any, Any]):
    """An env whose step infos report the step: ``x`` (the cart position, float32), ``steps`` (the
    episode's steps, int), ``upright`` (a bool) and ``pair`` (a float64 ``[2]``); its reset info
    has none of them, so a reset's info stored in a step's place is caught."""

    def reset(self, **kwargs: Any) -> Any:
        obs, _ = self.env.reset(**kwargs)
        self._steps = 0
        return obs, {"reset": True}

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        self._steps += 1
        info = {"x": np.float32(obs[0]), "steps": self._steps, "upright": bool(abs(obs[2]) < 0.05),
                "pair": np.array([obs[1], -obs[3]], dtype=np.float64)}
        return obs, reward, terminated, truncated, info


def make_cartpole_info() -> gym.Env[Any, Any]:
    """:func:`make_cartpole` with :class:`StepInfo`'s infos."""
    return StepInfo(make_cartpole())


def make_pendulum() -> gym.Env[Any, Any]:
    return gym.make("Pendulum-v1", max_episode_steps=30)


class TiltPolicy(torch.nn.Module):
    """Deterministic CartPole policy: push towards the pole's tilt, with a weight to update."""

    def __init__(self, sign: float = 1.0) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([0.3, 0.0, sign, 0.0]))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs @ self.weight.to(obs.dtype) > 0).long()  # any floating obs_dtype


def tilt_module() -> TensorDictModule:
    """:class:`TiltPolicy` as a TensorDict policy (``"observation"`` in, ``"action"`` out)."""
    return TensorDictModule(TiltPolicy(), in_keys=["observation"], out_keys=["action"])


class PendulumPolicy(torch.nn.Module):
    """Deterministic continuous policy for Pendulum: ``[N, 3] -> [N, 1]`` in [-2, 2]."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(3, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return 2 * torch.tanh(self.net(obs))


def dict_policy(pos: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Deterministic policy for :class:`DictObsEnv` (for a TensorDictModule)."""
    return ((pos[..., 0] < 0) ^ (count % 3 == 0)).long()


class EnvBroke(Exception):
    """Raised by :class:`CountingEnv` on purpose."""


class CountingEnv(gym.Env[np.ndarray, int]):
    """Observation ``[uid, n]``: ``uid`` is the seed of the first reset, ``n`` the steps since creation.

    Every frame a collector yields can be traced back to one env and one step, so tests can check
    that each produced frame arrives exactly once. Faults on demand: sleep per step, raise
    :class:`EnvBroke` at step ``fail_at`` (only while ``fail_marker`` does not exist, if given; the
    file is created when raising), hang forever at step ``hang_at``.
    """

    observation_space = spaces.Box(-1e9, 1e9, (2,), np.float64)
    action_space = spaces.Discrete(2)

    def __init__(
        self,
        episode_length: int = 7,
        step_sleep: float = 0.0,
        fail_at: int | None = None,
        fail_marker: str | None = None,
        hang_at: int | None = None,
    ) -> None:
        self.episode_length, self.step_sleep = episode_length, step_sleep
        self.fail_at, self.fail_marker, self.hang_at = fail_at, fail_marker, hang_at
        self.uid: int | None = None
        self.total = 0
        self.episode_step = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        if self.uid is None:
            self.uid = -1 if seed is None else seed
        self.episode_step = 0
        return np.array([self.uid, self.total], dtype=np.float64), {}

    def _claim_failure(self) -> bool:
        """True for the one env that creates the marker first (atomically), or always without one."""
        import os

        if self.fail_marker is None:
            return True
        try:
            os.close(os.open(self.fail_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def step(self, action: int) -> Any:
        import time

        if self.fail_at is not None and self.total == self.fail_at and self._claim_failure():
            raise EnvBroke(f"env {self.uid} broke at step {self.total}")
        if self.hang_at is not None and self.total == self.hang_at:
            time.sleep(3600)
        if self.step_sleep:
            time.sleep(self.step_sleep)
        self.total += 1
        self.episode_step += 1
        terminated = self.episode_step >= self.episode_length
        return np.array([self.uid, self.total], dtype=np.float64), float(action), terminated, False, {}


class WeightedPolicy(torch.nn.Module):
    """Action = 1 if ``scale * 1 + offset.bias > 0``: two models (``policy``'s own weight and the
    ``offset`` submodule) decide the action together."""

    def __init__(self, scale: float = 1.0, offset: float = 0.0) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(scale))
        self.offset = Offset(offset)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (self.scale + self.offset.bias > 0).long().expand(obs.shape[0])


class Offset(torch.nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor(value))


def assert_ids_label_trajectories(batches: list[Any], cut_keeps_ids: bool = False) -> None:
    """Consecutive ``[N, T]`` batches: per row, the trajectory id changes exactly after a done, and
    no id lives in two rows. ``cut_keeps_ids`` (``set_truncated``: each batch's last frame is done
    for the learner, and the env's episode goes on): past a batch's last frame, an id may go on."""
    ids = torch.cat([b["collector", "traj_ids"] for b in batches], 1)
    done = torch.cat([b["next", "done"][..., 0] for b in batches], 1)
    changes, ends = ids[:, 1:] != ids[:, :-1], done[:, :-1]
    if cut_keeps_ids:
        inside = torch.ones_like(ends)
        for last in torch.tensor([b.shape[-1] for b in batches]).cumsum(0)[:-1] - 1:
            inside[:, last] = False
        assert not (changes & ~ends).any() and torch.equal(changes[inside], ends[inside])
        assert (changes[~inside] <= ends[~inside]).all() and not changes[~inside].all()
    else:
        assert torch.equal(changes, ends)
    owners = {int(t): r for r in range(ids.shape[0]) for t in ids[r].unique()}
    assert len(owners) == len(ids.unique())


def resumed_beside_fresh(build: Callable[[], Any], batches: int) -> tuple[list[Any], Any, Any, int]:
    """``batches`` batches of a collector ``build`` makes, then its state loaded into a second one:
    the batches, the second one's first batch, a fresh collector's first batch, and the frames the
    second one counts after its batch (envs whose state is not data warn: tested where it matters)."""
    with build() as saved:
        before = [saved.next().clone() for _ in range(batches)]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "the envs' state is not data")
            state = saved.state_dict()
    with build() as fresh:
        reference = fresh.next().clone()
    with build() as resumed:
        resumed.load_state_dict(state)
        batch = resumed.next().clone()
        frames = resumed.stats().frames
    return before, batch, reference, frames


def assert_same_but_ids(batch: Any, reference: Any) -> None:
    """The same entries, value for value, trajectory ids aside."""
    assert set(batch.keys(True, True)) == set(reference.keys(True, True))
    for key in reference.keys(True, True):
        if key != ("collector", "traj_ids"):
            torch.testing.assert_close(batch[key], reference[key], msg=f"{key}")


class PixelEnv(gym.Env[np.ndarray, int]):
    """An Atari-sized pixel observation space (84x84x4 uint8) and two actions: the spaces of a
    run folder written by a test, not an env to step."""

    observation_space = spaces.Box(0, 255, (84, 84, 4), np.uint8)
    action_space = spaces.Discrete(2)


class Payload:
    """Unpickling it creates the folder ``marker``: the proof that a reader ran code from the data
    (the crafted states and folders of the trust tests carry it)."""

    def __init__(self, marker: str | os.PathLike[str]) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> Any:
        return (os.makedirs, (self.marker,))
