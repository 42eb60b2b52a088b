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
from typing import Any

from rlcollect.common.callers import outside_stacklevel
from rlcollect.envs.base import EnvBatch
from rlcollect.envs.torchrl_gym import TorchRLGymEnvs, TorchRLGymVector, gym_envs_inside, plain_in_processes
from rlcollect.envs.torchrl_spaces import key_tuple
from rlcollect.envs.torchrl_stepped import TorchRLEnv
from rlcollect.envs.torchrl_tensordict import TensorDictEnv, tensordict_only

__all__ = ["dump_env_transform", "torchrl_env_batch", "with_policy_transforms", "with_step_counter"]


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
    if type(env) is ParallelEnv and plain_in_processes(env):
        return TorchRLGymVector(env, max_episode_steps)
    reason = tensordict_only(env)
    if reason is not None:
        return TensorDictEnv(env, reason)
    if type(env) is ParallelEnv:
        return TorchRLEnv(env, max_episode_steps)
    inner = gym_envs_inside(env)
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
    from torchrl.envs.transforms import InitTracker
    from torchrl.modules.utils.utils import _compute_missing_env_transforms

    missing = _compute_missing_env_transforms(env, policy)
    if not append:  # TorchRL's detection names an InitTracker for any module: warn where one is read
        reads = {key_tuple(key) for key in getattr(policy, "in_keys", None) or ()}
        missing = [t for t in missing if not isinstance(t, InitTracker) or ("is_init",) in reads]
    if not missing:
        return env
    if not append:
        names = ", ".join(type(transform).__name__ for transform in missing)
        warnings.warn(f"the env lacks transforms the policy needs ({names}); TorchRL's collectors append "
                      "them from v0.15: pass auto_register_policy_transforms=True to append them now "
                      "(or False to silence this warning)", FutureWarning, stacklevel=outside_stacklevel())
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
        entry = key_tuple(key)[1:]  # (leaving out which spec holds it)
        if "step_count" in entry:
            raise ValueError(f"max_frames_per_traj={max_steps} with a TorchRL env that already counts steps "
                             f"(its {'.'.join(entry)!r} entry: a StepCounter): give the limit to that "
                             "StepCounter, or leave max_frames_per_traj=None")
    return TransformedEnv(env, StepCounter(max_steps=max_steps))


def dump_env_transform(env: Any, step: int | None = None) -> None:
    """Call ``dump(step=step)`` on the env's transform where it has one (TorchRL's
    ``VideoRecorder`` writes the frames it gathered); nothing otherwise, as TorchRL's collectors'
    ``_dump_env_transform``."""
    dump = getattr(getattr(env, "transform", None), "dump", None)
    if callable(dump):
        dump(step=step)
