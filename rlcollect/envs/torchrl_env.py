"""A TorchRL ``EnvBase`` (``GymEnv``, ``TransformedEnv``, ``SerialEnv``, ...) as an env batch.

Users keep their TorchRL envs and transforms and swap only the collector. TorchRL is imported
lazily (``pip install rlcollect[torchrl]``). Specs are mapped to Gymnasium spaces once, at
construction; each step is ``env.step`` then ``env.maybe_reset`` on the next root, so the true
final observation comes from ``"next"`` and the reset observation from the new root.

A plain ``GymEnv``, or a ``SerialEnv`` or ``ParallelEnv`` of them, only wraps Gymnasium envs that
rlcollect steps itself several times faster: :func:`torchrl_env_batch` steps the Gymnasium envs
inside it directly (:class:`TorchRLGymEnvs` in this process; :class:`TorchRLGymVector`, a
Gymnasium ``AsyncVectorEnv`` of as many processes, for a ``ParallelEnv``), with the TorchRL env's
spaces, seeding and policy preparation, so the data is the same frame for frame. Anything else
(transforms, pixels, frame skips, info readers, several keys) is stepped through TorchRL
(:class:`TorchRLEnv`).

Envs whose data the batch buffers cannot hold (several action, reward or done keys, multi-agent
groups with their own dims, batch sizes of two or more dims, heterogeneous or non-tensor specs)
are :class:`TensorDictEnv`: stepped tensordict by tensordict by
:mod:`rlcollect.rollout.tensordict_loop`, as TorchRL's collector steps them.
"""

from __future__ import annotations

import warnings
from copy import deepcopy
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.checks import BadDataError
from rlcollect.envs.base import EnvBatch
from rlcollect.envs.gym_envs import GymEnvs
from rlcollect.envs.vector import GymVectorEnv

__all__ = [
    "OneHotSpace", "TensorDictEnv", "TorchRLEnv", "TorchRLGymEnvs", "TorchRLGymVector", "is_torchrl_env",
    "tensordict_only", "torchrl_env_batch",
]


def is_torchrl_env(obj: Any) -> bool:
    """Whether ``obj`` is a TorchRL ``EnvBase`` (without importing TorchRL if it is not loaded)."""
    import sys

    module = sys.modules.get("torchrl.envs")
    return module is not None and isinstance(obj, module.EnvBase)


class OneHotSpace(spaces.Box):
    """One-hot vectors along the last axis (TorchRL's ``OneHot`` spec): a Box of 0s and 1s whose
    samples hold exactly one 1 per vector. Gymnasium's ``batch_space`` keeps the class.

    Examples:
        >>> space = OneHotSpace((3,), np.int64, seed=0)
        >>> int(space.sample().sum()), space.sample().dtype
        (1, dtype('int64'))
    """

    def __init__(
        self, shape: tuple[int, ...], dtype: Any, seed: int | np.random.Generator | None = None
    ) -> None:
        super().__init__(0, 1, shape, dtype, seed)

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        index = self.np_random.integers(self.shape[-1], size=self.shape[:-1])
        return np.asarray(np.eye(self.shape[-1], dtype=self.dtype)[index])

    def contains(self, x: Any) -> bool:
        return bool(super().contains(x) and np.all(np.asarray(x).sum(-1) == 1))

    def __repr__(self) -> str:
        return f"OneHotSpace({self.shape}, {self.dtype})"


@batch_space.register(OneHotSpace)
def _batch_one_hot(space: OneHotSpace, n: int = 1) -> OneHotSpace:
    return OneHotSpace((n, *space.shape), space.dtype, seed=deepcopy(space.np_random))


def _space(spec: Any, key: str) -> spaces.Space[Any]:
    from torchrl.data import Binary, Bounded, Categorical, Composite, OneHot, Unbounded

    if isinstance(spec, Composite):
        return spaces.Dict({k: _space(spec[k], k) for k in list(spec.keys())})
    dtype = np.dtype(str(spec.dtype).replace("torch.", ""))
    shape = tuple(spec.shape)
    if isinstance(spec, OneHot):
        return OneHotSpace(shape, dtype)
    if dtype == np.bool_ and isinstance(spec, (Categorical, Binary)):  # flags (InitTracker's is_init)
        return spaces.Box(0, 1, shape, np.bool_)
    if isinstance(spec, Categorical):
        if shape:
            return spaces.MultiDiscrete(np.full(shape, spec.space.n))
        return spaces.Discrete(spec.space.n)
    if isinstance(spec, Binary):
        return spaces.MultiBinary(shape)
    integer = np.issubdtype(dtype, np.integer)
    # integer counters (step_count) may span int64: keep bounds numpy can sample between
    limit = np.int64(2**31 - 1) if integer else np.inf
    if isinstance(spec, Bounded):
        low = np.maximum(spec.space.low.cpu().numpy(), -limit - 1).astype(dtype)
        high = np.minimum(spec.space.high.cpu().numpy(), limit).astype(dtype)
        return spaces.Box(low, high, shape, dtype)
    if isinstance(spec, Unbounded):
        return spaces.Box(-limit - (1 if integer else 0), limit, shape, dtype)
    raise TypeError(f"{key}: TorchRL spec {type(spec).__name__} is not supported")


def _prepare_policy(env: Any, policy: Any) -> None:
    """As TorchRL's collectors do: a ``RandomPolicy()`` takes the env's action spec, exploration
    modules built without a spec take it too."""
    from torchrl.modules import set_exploration_modules_spec_from_env

    if callable(getattr(policy, "set_action_spec_from_env", None)):
        policy.set_action_spec_from_env(env)
    if isinstance(policy, torch.nn.Module):
        set_exploration_modules_spec_from_env(policy, env)


def _flag(value: torch.Tensor) -> torch.Tensor:
    """A done flag as bool (an env may declare its flags with a float or int spec, as TorchRL
    allows): set where non-zero."""
    return value if value.dtype is torch.bool else value != 0


class TorchRLEnv(EnvBatch):
    """Wraps a TorchRL ``EnvBase``; an env with ``batch_size=[N]`` gives ``N`` envs.

    Observation keys are the observation spec's keys (one ``"observation"`` key gives the usual
    layout, several give a Dict layout); the action is ``"action"``.

    Examples:
        >>> from torchrl.envs import GymEnv
        >>> TorchRLEnv(GymEnv("CartPole-v1", categorical_action_encoding=True)).num_envs
        1
    """

    def __init__(self, env: Any, max_episode_steps: int | None = None) -> None:
        batch_size = tuple(env.batch_size)
        if len(batch_size) > 1:
            raise ValueError(f"TorchRL env batch_size {batch_size}: only [] or [N] are supported")
        super().__init__(batch_size[0] if batch_size else 1, max_episode_steps)
        self.env = env
        self._batched = bool(batch_size)
        self.unbatched = not self._batched
        per_env = (lambda spec: spec[0]) if self._batched else (lambda spec: spec)
        obs_spec = per_env(env.observation_spec)
        self._obs_keys = list(obs_spec.keys())
        self._step_keys = [*self._obs_keys, "reward", "terminated"]  # what every step must return
        self._obs_keys_nested = {(key,) if isinstance(key, str) else tuple(key) for key in self._obs_keys}
        # the leaves, as the batch buffers name them: ("delta", "observation") of a nested entry
        self._obs_leaves = [_tuple(key) for key in obs_spec.keys(include_nested=True, leaves_only=True)]
        obs_space = _space(obs_spec, "observation_spec")
        assert isinstance(obs_space, spaces.Dict)
        single = self._obs_keys == ["observation"]
        self.observation_space = obs_space["observation"] if single else obs_space
        self.action_space = _space(per_env(env.action_spec), "action_spec")
        self._root: Any = None

    def bind(self, buffers: BatchBuffers) -> None:
        super().bind(buffers)
        self._reward = buffers.reward[..., 0]  # [N, T]
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
        action = self._actions[:, t]
        self._root.set("action", action if self._batched else action[0])
        for next_key, extra in self._policy_next:
            self._root.set(next_key, extra[:, t] if self._batched else extra[0, t])
        out = self.env.step(self._root)
        nxt = out.get("next")
        for key in self._step_keys:  # a key the step dropped: never the previous value again
            if nxt.get(key, None) is None:
                returned = sorted(map(str, nxt.keys()))
                raise BadDataError(f"entry ('next', {key!r})", None, t,
                                   f"is missing from the env's step, which returned {returned}: a TorchRL "
                                   "env must return its observations, reward and terminated at every step")
        reward = nxt.get("reward").reshape(self.num_envs)
        terminated = _flag(nxt.get("terminated")).reshape(self.num_envs)
        truncated = _flag(nxt.get("truncated", torch.zeros_like(terminated))).reshape(self.num_envs)
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

    def prepare_policy(self, policy: Any) -> None:
        _prepare_policy(self.env, policy)

    def seed_action_spaces(self, seeds: list[int]) -> None:
        self.action_space.seed(seeds[0])

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()

    def _picklable_state(self) -> Any:
        raise TypeError("TorchRL envs are not pickled into a state_dict")

    def _restore_picklable_state(self, state: Any) -> None:
        raise TypeError("TorchRL envs are not restored from a state_dict")


_FLAGS = ("done", "terminated", "truncated")


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
    if not set(env.done_keys) <= set(_FLAGS) or "terminated" not in env.done_keys:
        return f"done keys {list(env.done_keys)} (the buffers hold 'terminated' and 'truncated' at the root)"
    per_env = (lambda spec: spec[0]) if batch_size else (lambda spec: spec)
    try:
        _space(per_env(env.observation_spec), "observation_spec")
        _space(per_env(env.action_spec), "action_spec")
    except Exception as error:  # stacked (heterogeneous) specs, non-tensor entries, ...
        return f"specs with no Gymnasium space ({type(error).__name__}: {error})"
    return None


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
        self.done_keys = [_tuple(key) for key in env.done_keys]
        self.reward_keys = [_tuple(key) for key in env.reward_keys]

    def reset(self, seed: int | None = None) -> Any:
        """Reset every env (env ``i`` seeded ``seed + i`` by TorchRL); return the first root."""
        if seed is not None:
            self.env.set_seed(seed)
        return self.env.reset()

    def rand_action(self, root: Any) -> Any:
        return self.env.rand_action(root)

    def step(self, root: Any) -> tuple[Any, Any]:
        """``root`` with its ``"next"``, and the next root (reset where the env ended)."""
        return self.env.step_and_maybe_reset(root)

    def ends(self, nxt: Any) -> torch.Tensor:
        """``[*batch, T]``: whether the trajectory ended at each frame (any done key, any agent)."""
        dims = len(self.batch_size) + 1
        end = torch.zeros(nxt.batch_size[:dims], dtype=torch.bool)
        for key in self.done_keys:
            flag = nxt.get(key)
            end |= flag.reshape(*flag.shape[:dims], -1).any(-1)
        return end

    def rewards(self, nxt: Any) -> torch.Tensor:
        """``[*batch, T]``: the sum of every reward entry of each frame (all agents: the team's)."""
        dims = len(self.batch_size) + 1
        total = torch.zeros(nxt.batch_size[:dims], dtype=torch.float64)
        for key in self.reward_keys:
            reward = nxt.get(key)
            total += reward.reshape(*reward.shape[:dims], -1).sum(-1, dtype=torch.float64)
        return total

    def prepare_policy(self, policy: Any) -> None:
        _prepare_policy(self.env, policy)

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()


def _tuple(key: Any) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def torchrl_env_batch(env: Any, max_episode_steps: int | None = None) -> EnvBatch | TensorDictEnv:
    """The env batch for a TorchRL env: the Gymnasium envs inside a plain ``GymEnv`` or a
    ``SerialEnv`` of them, stepped directly (:class:`TorchRLGymEnvs`); any other env through
    TorchRL (:class:`TorchRLEnv`).

    Examples:
        >>> from torchrl.envs import GymEnv, StepCounter, TransformedEnv
        >>> type(torchrl_env_batch(GymEnv("CartPole-v1"))).__name__
        'TorchRLGymEnvs'
        >>> type(torchrl_env_batch(TransformedEnv(GymEnv("CartPole-v1"), StepCounter()))).__name__
        'TorchRLEnv'
    """
    from torchrl.envs import ParallelEnv

    if max_episode_steps is not None:  # as TorchRL's collectors: a StepCounter, its step_count in the data
        env, max_episode_steps = with_step_counter(env, max_episode_steps), None
    if type(env) is ParallelEnv and _plain_in_processes(env):
        return TorchRLGymVector(env, max_episode_steps)
    reason = tensordict_only(env)
    if reason is not None:
        return TensorDictEnv(env, reason)
    if type(env) is ParallelEnv:
        return TorchRLEnv(env, max_episode_steps)
    inner = _gym_envs_inside(env)
    if inner is None:
        return TorchRLEnv(env, max_episode_steps)
    return TorchRLGymEnvs(env, inner, max_episode_steps)


def with_policy_transforms(env: Any, policy: Any, *, append: bool) -> Any:
    """``env`` with the transforms ``policy`` needs and the env lacks: an ``InitTracker`` for
    modules that read ``is_init``, a recurrent module's ``TensorDictPrimer`` (as TorchRL 0.14's
    collectors with ``auto_register_policy_transforms=True``; TorchRL's own detection, which also
    looks inside batched envs). ``append=False``: ``env`` unchanged, with a ``FutureWarning``
    naming what is missing (TorchRL's default until it appends them, from v0.15).

    Examples:
        >>> from torchrl.envs import GymEnv
        >>> from torchrl.modules import GRUModule
        >>> gru = GRUModule(input_size=4, hidden_size=8, in_keys=["observation", "state", "is_init"],
        ...                 out_keys=["features", ("next", "state")])
        >>> env = with_policy_transforms(GymEnv("CartPole-v1"), gru, append=True)
        >>> sorted(k for k in env.observation_spec.keys() if k in ("is_init", "state"))
        ['is_init', 'state']
    """
    from torchrl.modules.utils.utils import _compute_missing_env_transforms

    missing = _compute_missing_env_transforms(env, policy)
    if not missing:
        return env
    if not append:
        names = ", ".join(type(transform).__name__ for transform in missing)
        warnings.warn(f"the env lacks transforms the policy needs ({names}); TorchRL's collectors append "
                      "them from v0.15: pass auto_register_policy_transforms=True to append them now "
                      "(or False to silence this warning)", FutureWarning, stacklevel=2)
        return env
    for transform in missing:
        env = env.append_transform(transform)
    return env


def with_step_counter(env: Any, max_steps: int) -> Any:
    """``env`` with a TorchRL ``StepCounter(max_steps)`` appended, as TorchRL's collectors do for
    ``max_frames_per_traj``: the batches hold ``step_count``, episodes are truncated at ``max_steps``.

    Raises:
        ValueError: the env already counts steps (a ``step_count`` entry).

    Examples:
        >>> from torchrl.envs import GymEnv
        >>> "step_count" in with_step_counter(GymEnv("CartPole-v1"), 10).observation_spec.keys()
        True
    """
    from torchrl.envs import StepCounter, TransformedEnv

    for key in env.output_spec.keys(True, True):
        entry = _tuple(key)[1:]  # (leaving out which spec holds it)
        if "step_count" in entry:
            raise ValueError(f"max_frames_per_traj={max_steps} with a TorchRL env that already counts steps "
                             f"(its {'.'.join(entry)!r} entry: a StepCounter): give the limit to that "
                             "StepCounter, or leave max_frames_per_traj=None")
    return TransformedEnv(env, StepCounter(max_steps=max_steps))


def _plain_in_processes(env: Any) -> bool:
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


def _gym_envs_inside(env: Any) -> list[gym.Env[Any, Any]] | None:
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
    obs_spec = _space(env.observation_spec["observation"], "observation_spec")
    if not (isinstance(obs_space, spaces.Box) and type(obs_spec) is spaces.Box
            and obs_space.shape == obs_spec.shape and obs_space.dtype == obs_spec.dtype):
        return None
    act_spec = _space(env.action_spec, "action_spec")
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
        return int(action.argmax()) if self._one_hot else action


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
        >>> batch = torchrl_env_batch(SerialEnv(2, lambda: GymEnv("CartPole-v1")))
        >>> batch.num_envs, batch.unbatched, batch.action_space
        (2, False, OneHotSpace((2,), int64))
    """

    follows_num_envs = False  # the TorchRL env brings its own envs

    def __init__(
        self, env: Any, inner: list[gym.Env[Any, Any]], max_episode_steps: int | None = None
    ) -> None:
        self.env = env
        self.unbatched = not tuple(env.batch_size)
        per_env = (lambda spec: spec) if self.unbatched else (lambda spec: spec[0])
        action_space = _space(per_env(env.action_spec), "action_spec")
        if isinstance(action_space, OneHotSpace):
            inner = [_InnerGymEnv(e, OneHotSpace(action_space.shape, action_space.dtype)) for e in inner]
        super().__init__(inner, max_episode_steps)
        self.observation_space = _space(per_env(env.observation_spec)["observation"], "observation_spec")
        self.action_space = action_space

    def reset(self, slot: int, seeds: list[int] | None = None) -> None:
        if seeds is not None:  # TorchRL's seeding: a reset with the seed (sub-env i gets the i-th of
            self.env.set_seed(seeds[0])  # TorchRL's seed chain), then the first episode's reset
        super().reset(slot)

    prepare_policy = TorchRLEnv.prepare_policy
    seed_action_spaces = TorchRLEnv.seed_action_spaces
    close = TorchRLEnv.close
    _picklable_state = TorchRLEnv._picklable_state
    _restore_picklable_state = TorchRLEnv._restore_picklable_state


class TorchRLGymVector(GymVectorEnv):
    """A TorchRL ``ParallelEnv`` of plain ``GymEnv`` s as a Gymnasium ``AsyncVectorEnv`` of as many
    processes (started by a forkserver, resetting finished envs in the same step), each stepping
    the Gymnasium env inside the ``GymEnv`` its constructor builds; the spaces, seeding (TorchRL's
    seed chain) and policy preparation are the ``ParallelEnv``'s, so the batches are the ones
    TorchRL's collector makes, without TorchRL's per-step TensorDicts and pipes.
    """

    def __init__(self, env: Any, max_episode_steps: int | None = None) -> None:
        self.torchrl_env = env
        action_space = _space(env.action_spec[0], "action_spec")
        factories = [partial(_gym_env_in_process, create, kwargs, action_space)
                     for create, kwargs in zip(env.create_env_fn, env.create_env_kwargs, strict=True)]
        vector = gym.vector.AsyncVectorEnv(factories, context="forkserver",
                                           autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        super().__init__(vector, max_episode_steps)
        observation_space = _space(env.observation_spec[0], "observation_spec")
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
        _prepare_policy(self.torchrl_env, policy)

    seed_action_spaces = TorchRLEnv.seed_action_spaces

    def close(self) -> None:
        self.env.close()
        if not self.torchrl_env.is_closed:
            self.torchrl_env.close()

    _picklable_state = TorchRLEnv._picklable_state
    _restore_picklable_state = TorchRLEnv._restore_picklable_state
