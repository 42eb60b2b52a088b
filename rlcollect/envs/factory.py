"""Turn what the user passed as an env (id, factory, env, vector env) into an :class:`EnvBatch`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeAlias

import gymnasium as gym
from gymnasium.vector import AutoresetMode, VectorEnv

from rlcollect.data.checks import short_repr
from rlcollect.envs.base import EnvBatch
from rlcollect.envs.envpool_env import ENVPOOL_PREFIX, is_envpool, make_envpool_batch
from rlcollect.envs.gym_envs import GymEnvs
from rlcollect.envs.next_step import NextStepVectorEnv
from rlcollect.envs.torchrl_env import torchrl_env_batch, with_policy_transforms
from rlcollect.envs.torchrl_spaces import is_torchrl_env
from rlcollect.envs.torchrl_tensordict import TensorDictEnv
from rlcollect.envs.vector import GymVectorEnv, PartialResetError

__all__ = ["EnvSource", "check_env_source", "make_env_batch", "source_modules"]

#: An env id, a ``gymnasium.Env`` / ``VectorEnv`` factory, or an ``Env`` / ``VectorEnv`` instance.
EnvSource: TypeAlias = "str | Callable[..., Any] | gym.Env[Any, Any] | VectorEnv[Any, Any, Any]"


def _register_optional_envs(env_id: str) -> None:
    """Register the env ids that optional packages provide (``ALE/...`` from ale-py)."""
    if env_id.startswith("ALE/"):
        try:
            import ale_py
        except ImportError:
            raise ValueError(
                f"create_env_fn={env_id!r} needs ale-py: pip install rlcollect[atari]"
            ) from None
        gym.register_envs(ale_py)


def check_env_source(name: str, source: Any) -> None:
    """Raise ``TypeError`` naming ``name`` and the value unless ``source`` can build envs: an env id,
    a callable, a ``VectorEnv`` or a TorchRL env."""
    if isinstance(source, (str, VectorEnv, gym.Env)) or callable(source) or is_torchrl_env(source):
        return
    if is_envpool(source):
        return
    raise TypeError(
        f"{name} must be an env id, a callable returning a gymnasium Env or VectorEnv, "
        f"or an Env or VectorEnv; got {type(source).__name__} {short_repr(source)}"
    )





def _check_spaces(env: gym.Env[Any, Any], source: Any) -> None:
    """Both spaces are Gymnasium spaces (an old gym space, or none, is named here)."""
    for name in ("observation_space", "action_space"):
        space = getattr(env, name, None)
        if not isinstance(space, gym.spaces.Space):
            raise TypeError(
                f"env {short_repr(env)} (from create_env_fn={short_repr(source)}) has "
                f"{name}={short_repr(space)} "
                f"({type(space).__name__}); rlcollect needs a gymnasium.spaces.Space there: set "
                f"self.{name} in the env's __init__ (gymnasium.spaces, not gym.spaces)"
            )


def _make_one(source: str | Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    if isinstance(source, str):
        _register_optional_envs(source)
        try:
            return gym.make(source, **kwargs)
        except gym.error.Error as error:
            raise ValueError(
                f"create_env_fn={source!r} is not a registered Gymnasium env id ({error})"
            ) from None
        except TypeError as error:
            if "argument" not in str(error) or not kwargs:
                raise
            raise TypeError(f"create_env_kwargs={short_repr(kwargs)} do not fit create_env_fn={source!r}: "
                            f"{error}") from None
    if kwargs:
        try:
            signature = inspect.signature(source)
        except (TypeError, ValueError):
            signature = None
        if signature is not None:
            try:
                signature.bind(**kwargs)
            except TypeError as error:
                raise TypeError(f"create_env_kwargs={short_repr(kwargs)} do not fit create_env_fn="
                                f"{short_repr(source)}: {error}") from None
    return source(**kwargs)


def source_modules(source: Any) -> list[str]:
    """The modules a process needs to build envs from ``source`` (ale-py for ``ALE/...`` ids, the
    factory's own module), for a forkserver to import before it forks workers.

    Examples:
        >>> source_modules("ALE/Pong-v5"), source_modules(make_env_batch)
        (['ale_py'], ['rlcollect.envs.factory'])
    """
    if isinstance(source, str):
        return ["ale_py"] if source.startswith("ALE/") else []
    function = source.func if isinstance(source, functools.partial) else source
    module = getattr(function, "__module__", None)  # an env instance: its class's module
    return [module] if isinstance(module, str) and module != "__main__" else []


def copies_one_env(source: Any) -> bool:
    """Whether each process given ``source`` steps a copy of one env: an env built already (a
    Gymnasium, vector or TorchRL env, pickled for each worker, its generators with it), or an
    EnvPool task (the collector builds every pool with one seed). Unseeded copies step the same
    episodes; an id or a function builds fresh envs, seeded as the function says.

    Examples:
        >>> copies_one_env(gym.make("CartPole-v1")), copies_one_env("envpool:Pong-v5")
        (True, True)
        >>> copies_one_env("CartPole-v1"), copies_one_env(lambda: gym.make("CartPole-v1"))
        (False, False)
    """
    if isinstance(source, str):
        return source.startswith(ENVPOOL_PREFIX)
    return isinstance(source, (gym.Env, VectorEnv)) or is_torchrl_env(source)


def _vector_batch(env: VectorEnv[Any, Any, Any], max_episode_steps: int | None) -> GymVectorEnv:
    """A vector env's batch: reset at once where it can be (``SAME_STEP``, or partial resets that
    work), else through its own ``NEXT_STEP`` resets (:mod:`rlcollect.envs.next_step`)."""
    try:
        return GymVectorEnv(env, max_episode_steps)
    except PartialResetError as error:
        if error.mode != AutoresetMode.NEXT_STEP:
            raise
    return NextStepVectorEnv(env, max_episode_steps)


def make_env_batch(
    source: EnvSource,
    num_envs: int = 1,
    kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    *,
    policy: Any = None,
    register_policy_transforms: bool | None = False,
) -> EnvBatch | TensorDictEnv:
    """Build the env batch for ``source``: ``num_envs`` copies of a single env, or a vector env; a
    TorchRL env whose data the batch buffers cannot hold gives a :class:`TensorDictEnv`.

    Args:
        source: an env id (``"CartPole-v1"``; ``"envpool:Pong-v5"`` for an EnvPool of ``num_envs``),
            a callable returning a ``gymnasium.Env``, a ``VectorEnv`` or a TorchRL ``EnvBase``, or a
            ``gymnasium.Env`` (one env) / ``VectorEnv`` / ``EnvBase`` / EnvPool pool itself.
        num_envs: copies of a single env to step in this process (must be 1 for a vector env,
            which brings its own).
        kwargs: keyword arguments for ``gymnasium.make`` or the callable.
        max_episode_steps: collector-side episode limit.
        policy, register_policy_transforms: a TorchRL env gets the transforms ``policy`` needs and
            it lacks (``True``: appended; ``None``: a ``FutureWarning`` names them; ``False``:
            nothing), see :func:`~rlcollect.envs.torchrl_env.with_policy_transforms`.

    Raises:
        ValueError: unknown env id, or ``num_envs`` > 1 with a vector env.
        TypeError: ``source`` or what it returns is not an env.

    Examples:
        >>> make_env_batch("CartPole-v1", num_envs=4).num_envs
        4
    """
    kwargs = dict(kwargs or {})
    if (isinstance(source, str) and source.startswith(ENVPOOL_PREFIX)) or is_envpool(source):
        return make_envpool_batch(source, num_envs, kwargs, max_episode_steps)
    first = _first_env(source, kwargs)
    if is_torchrl_env(first):
        return _torchrl_batch(first, num_envs, max_episode_steps, policy, register_policy_transforms)
    if isinstance(first, VectorEnv):
        if num_envs != 1:
            raise ValueError(
                f"num_envs={num_envs} with a VectorEnv of {first.num_envs} envs: a vector env "
                "brings its own envs, leave num_envs=1"
            )
        return _vector_batch(first, max_episode_steps)
    if not isinstance(first, gym.Env):
        raise TypeError(
            f"create_env_fn returned {type(first).__name__} {short_repr(first)}; expected a gymnasium.Env or "
            "VectorEnv (a gym.Env of the old gym package: port it or wrap it with shimmy)"
        )
    assert not isinstance(source, VectorEnv)
    _check_spaces(first, source)
    if isinstance(source, gym.Env):  # one env the user built
        if num_envs != 1:
            raise ValueError(f"num_envs={num_envs} with create_env_fn={short_repr(source)}, one env: pass "
                             "its id or a function that builds it (lambda: gym.make(...)) for several")
        return GymEnvs([source], max_episode_steps, given=True)
    envs = [first] + [_make_one(source, kwargs) for _ in range(num_envs - 1)]
    return GymEnvs(envs, max_episode_steps)


def _first_env(source: Any, kwargs: dict[str, Any]) -> Any:
    """The first env of ``source``: the env itself where the user built it (used as it is; a
    worker gets a copy of it), else one built from it."""
    if isinstance(source, (VectorEnv, gym.Env)) or is_torchrl_env(source):
        if kwargs and hasattr(source, "update_kwargs"):  # a TorchRL batched env: its sub-envs get them
            source.update_kwargs(kwargs)  # (as in TorchRL's collectors)
        elif kwargs:
            raise TypeError(f"create_env_kwargs={short_repr(kwargs)} with create_env_fn="
                            f"{short_repr(source)}, an env already built: give them to what builds it "
                            "(its id, or a function)")
        return source
    check_env_source("create_env_fn", source)
    return _make_one(source, kwargs)


def _torchrl_batch(env: Any, num_envs: int, max_episode_steps: int | None, policy: Any,
                   register_policy_transforms: bool | None) -> EnvBatch | TensorDictEnv:
    """The env batch of a TorchRL env (with the transforms ``policy`` needs, as asked)."""
    if num_envs != 1:
        raise ValueError(
            f"num_envs={num_envs} with a TorchRL env: batch it with torchrl's SerialEnv or "
            "ParallelEnv and leave num_envs=1"
        )
    if policy is not None and register_policy_transforms is not False:
        env = with_policy_transforms(env, policy, append=bool(register_policy_transforms))
    return torchrl_env_batch(env, max_episode_steps)
