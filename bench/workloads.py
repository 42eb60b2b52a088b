"""The workloads, defined once: env id, env count, frames per batch and the seeded policy.

Also what several families share: the env factory (ale-py ids registered in any process), the
CleanRL-style vector-env loop, TorchRL's env and policy wrappers, and iterating a collector.

Example:
    >>> w = workload("cartpole-2x8")
    >>> w.num_envs, w.steps, workload("cartpole-2x8", quick=True).frames_per_batch
    (16, 128, 512)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from bench.harness import Batches

__all__ = [
    "SLOW_DELAYS_S", "WORKLOADS", "NatureCNN", "PongCNN", "SlowEnv", "Workload", "iterate", "make_env",
    "make_nature_cnn", "make_policy", "make_pong_preprocessed", "make_slow_policy", "register",
    "slow_env_factories", "torchrl_env", "torchrl_nature_cnn", "torchrl_policy", "torchrl_pong_preprocessed",
    "step_arrays", "vector_loop", "workload",
]

MLP = "MLP obs-64-64-act (tanh)"


@dataclass(frozen=True)
class Workload:
    """An env id, its copies (``num_workers`` processes x ``envs_per_worker``) and a batch size."""

    name: str
    env_id: str
    num_workers: int  # 1: every env in one process
    envs_per_worker: int
    frames_per_batch: int  # per (synchronous) batch, summed over all envs
    policy: str  # for the report

    @property
    def num_envs(self) -> int:
        """Envs over all workers."""
        return self.num_workers * self.envs_per_worker

    @property
    def steps(self) -> int:
        """Time steps per batch (per env)."""
        return self.frames_per_batch // self.num_envs


WORKLOADS = {
    w.name: w
    for w in (
        Workload("cartpole-1", "CartPole-v1", 1, 1, 1000, f"{MLP}, argmax"),
        Workload("cartpole-8", "CartPole-v1", 1, 8, 1024, f"{MLP}, argmax"),
        Workload("cartpole-2x8", "CartPole-v1", 2, 8, 2048, f"{MLP}, argmax"),
        Workload("pendulum-8", "Pendulum-v1", 1, 8, 1024, f"{MLP}, 2 tanh"),
        Workload("pong-2x4", "ALE/Pong-v5", 2, 4, 256, "CNN on uint8 frames (2 conv + linear), argmax"),
    )
}


def workload(name: str, quick: bool = False) -> Workload:
    """The workload ``name``; ``quick`` (smoke runs): a quarter of the frames per batch."""
    w = WORKLOADS[name]
    return replace(w, frames_per_batch=w.frames_per_batch // 4) if quick else w


def register(env_id: str) -> None:
    """Register ale-py's ``ALE/...`` ids with Gymnasium where ``env_id`` is one (in any process)."""
    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)


def make_env(env_id: str) -> gym.Env[Any, Any]:
    """``gym.make(env_id)``, registering ale-py's ids first."""
    register(env_id)
    return gym.make(env_id)


class PongCNN(nn.Module):
    """uint8 frames ``[N, 210, 160, 3]`` -> actions ``[N]``: every 4th pixel, 2 strided convs, linear."""

    def __init__(self, num_actions: int = 6) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=4, stride=2)  # [3, 53, 40] -> [8, 25, 19]
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, stride=2)  # -> [16, 12, 9]
        self.head = nn.Linear(16 * 12 * 9, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs[:, ::4, ::4].permute(0, 3, 1, 2).float().div_(255)
        return self.head(torch.relu(self.conv2(torch.relu(self.conv1(x)))).flatten(1)).argmax(-1)


class Argmax(nn.Module):
    """Greedy discrete action from logits: ``[N, A] -> [N]``."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)


class ScaledTanh(nn.Module):
    """Squash into ``[-scale, scale]`` (Pendulum's torque range)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * self.scale


def make_policy(w: Workload) -> nn.Module:
    """The seeded policy (same weights in every contender): the CNN for Atari, else the MLP (pong-8 and
    pong-16: the Nature CNN, slow-8: the MLP for SlowEnv)."""
    if w.name in ("pong-8", "pong-16", "slow-8"):
        return make_slow_policy() if w.name == "slow-8" else make_nature_cnn()
    torch.manual_seed(0)
    if w.env_id.startswith("ALE/"):
        return PongCNN()
    env = make_env(w.env_id)
    obs_dim, space = int(np.prod(env.observation_space.shape or ())), env.action_space
    env.close()
    if isinstance(space, gym.spaces.Discrete):
        head: list[nn.Module] = [nn.Linear(64, int(space.n)), Argmax()]
    else:
        assert isinstance(space, gym.spaces.Box)
        head = [nn.Linear(64, space.shape[0]), ScaledTanh(float(space.high[0]))]
    return nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), *head)


def iterate(collector: Any, warmup_batches: int = 1, pids: Callable[[], list[int]] | None = None) -> Batches:
    """A collector (rlcollect's or TorchRL's), iterated as users do; shut down at the end."""
    batches = iter(collector)
    return Batches(lambda: int(next(batches).numel()), collector.shutdown, warmup_batches, pids)


def step_arrays(steps: int, n: int, obs_space: Any, act_space: Any, action_dtype: Any = None
                ) -> tuple[np.ndarray, ...]:
    """What a hand-written loop stores, preallocated ``[steps, n, ...]``: observations, actions
    (``action_dtype``, default the space's), rewards, terminated and truncated flags, env ids."""
    observations = np.zeros((steps, n, *(obs_space.shape or ())), dtype=obs_space.dtype)
    actions = np.zeros((steps, n, *(act_space.shape or ())), dtype=action_dtype or act_space.dtype)
    flags = np.zeros((2, steps, n), dtype=bool)
    return (observations, actions, np.zeros((steps, n), dtype=np.float32), flags[0], flags[1],
            np.zeros((steps, n), dtype=np.int64))


def vector_loop(w: Workload, vector_env: Callable[..., gym.vector.VectorEnv]) -> Batches:
    """CleanRL's loop: a ``SyncVectorEnv`` or ``AsyncVectorEnv`` of all the workload's envs (same-step
    autoreset, as rlcollect) + the policy, each step stored into preallocated ``[T, N, ...]`` arrays."""
    policy = make_policy(w)
    envs = vector_env([partial(make_env, w.env_id)] * w.num_envs,
                      autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    steps, n = w.steps, w.num_envs
    observations, actions, rewards, terminateds, truncateds, _ = step_arrays(
        steps, n, envs.single_observation_space, envs.single_action_space)
    obs, _ = envs.reset(seed=0)

    def batch() -> int:
        nonlocal obs
        with torch.inference_mode():
            for t in range(steps):
                observations[t] = obs
                actions[t] = action = policy(torch.from_numpy(obs)).numpy()
                obs, rewards[t], terminateds[t], truncateds[t], _ = envs.step(action)
        return steps * n

    return Batches(batch, envs.close)


def torchrl_env(env_id: str, num_envs: int = 1) -> Any:
    """TorchRL's ``GymEnv`` (integer actions, as the policy's argmax), a ``SerialEnv`` of them for several."""
    from torchrl.envs import GymEnv, SerialEnv

    if num_envs > 1:
        return SerialEnv(num_envs, partial(torchrl_env, env_id))
    register(env_id)
    return GymEnv(env_id, categorical_action_encoding=True)


def torchrl_policy(w: Workload) -> Any:
    """The seeded policy as a ``TensorDictModule`` (Atari observations are TorchRL's ``"pixels"``)."""
    from tensordict.nn import TensorDictModule

    obs_key = "pixels" if w.env_id.startswith("ALE/") else "observation"
    return TensorDictModule(make_policy(w), in_keys=[obs_key], out_keys=["action"])


# -- bench.batched: preprocessed Pong with the Nature CNN, and envs of unequal speed ---------------
NATURE_CNN = "Nature CNN (3 conv + linear 512) on uint8 [4, 84, 84], argmax"
SLOW_DELAYS_S = (0.0002, 0.0005, 0.001, 0.002)  # one env per worker: 10x between the fastest and slowest

WORKLOADS.update({
    w.name: w
    for w in (
        Workload("pong-8", "ALE/Pong-v5 (frameskip=1) + AtariPreprocessing(84, gray, skip 4) + "
                 "FrameStackObservation(4)", 1, 8, 256, NATURE_CNN),
        Workload("pong-16", "pong-8's env, 16 copies", 1, 16, 512, NATURE_CNN),
        Workload("slow-8", "SlowEnv (sleeps 0.2 / 0.5 / 1 / 2 ms a step, 200-step episodes)", 4, 1, 256,
                 f"{MLP}, argmax"),
    )
})


def make_pong_preprocessed() -> gym.Env[Any, Any]:
    """``ALE/Pong-v5`` with ``frameskip=1``, Gymnasium's ``AtariPreprocessing`` (skip 4, 84 x 84, gray)
    and 4 stacked frames: uint8 observations ``[4, 84, 84]``, 6 actions. Module-level, so picklable."""
    register("ALE/Pong-v5")
    env = gym.make("ALE/Pong-v5", frameskip=1)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)


class NatureCNN(nn.Module):
    """The DQN (Nature, 2015) network: uint8 ``[N, 4, 84, 84]`` -> greedy actions ``[N]`` (also unbatched:
    ``[4, 84, 84]`` -> ``[]``, as TorchRL's policy server may call it)."""

    def __init__(self, num_actions: int = 6, in_channels: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=8, stride=4), nn.ReLU(),  # -> [32, 20, 20]
            nn.Conv2d(32, 64, kernel_size=4, stride=2), nn.ReLU(),  # -> [64, 9, 9]
            nn.Conv2d(64, 64, kernel_size=3, stride=1), nn.ReLU(),  # -> [64, 7, 7]
            nn.Flatten(-3), nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, num_actions),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.float().div_(255)).argmax(-1)


def make_nature_cnn() -> NatureCNN:
    """The seeded Nature CNN for Pong's 6 actions (the same weights in every contender)."""
    torch.manual_seed(0)
    return NatureCNN()


class SlowEnv(gym.Env[np.ndarray, Any]):
    """An env whose ``step`` sleeps ``delay`` seconds: Box(4,) float32 observations, 2 actions, episodes
    of ``episode_length`` steps (terminated), reward 1 a step. Picklable (a plain class)."""

    def __init__(self, delay: float = 0.001, episode_length: int = 200) -> None:
        self.delay, self.episode_length, self._t = delay, episode_length, 0
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self) -> np.ndarray:
        return self.np_random.uniform(-1.0, 1.0, size=4).astype(np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        time.sleep(self.delay)
        self._t += 1
        return self._obs(), 1.0, self._t >= self.episode_length, False, {}


def slow_env_factories() -> list[Callable[[], gym.Env[Any, Any]]]:
    """One picklable factory per env (per worker), each with its own delay."""
    return [partial(SlowEnv, delay=delay) for delay in SLOW_DELAYS_S]


def make_slow_policy() -> nn.Module:
    """The seeded MLP 4-64-64-2 (tanh), argmax, as ``make_policy`` builds it for CartPole."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2),
                         Argmax())


def torchrl_pong_preprocessed() -> Any:
    """``make_pong_preprocessed`` in TorchRL's ``GymWrapper`` (integer actions: the CNN's argmax; the
    observation key is ``"observation"``)."""
    from torchrl.envs import GymWrapper

    return GymWrapper(make_pong_preprocessed(), categorical_action_encoding=True)


def torchrl_nature_cnn() -> Any:
    """The seeded Nature CNN as a ``TensorDictModule`` (``"observation"`` -> ``"action"``)."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(make_nature_cnn(), in_keys=["observation"], out_keys=["action"])
