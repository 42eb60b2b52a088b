"""What one process's rollout is built from: :class:`RolloutSpec`, picklable, made by the collectors'
options (``CollectorOptions.rollout_spec``) and sent to each worker.

Examples:
    >>> spec = RolloutSpec("CartPole-v1", num_envs=2, set_truncated=True)
    >>> spec.truncates_last, build_policy(spec) is None
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict.nn import InteractionType

from rlcollect.data.layout import Field
from rlcollect.envs.factory import EnvSource

__all__ = ["POLICY_FROM_SPEC", "RolloutSpec", "build_policy"]


@dataclass(frozen=True)
class RolloutSpec:
    """Everything needed to build one process's :class:`Rollout` (picklable with cloudpickle).

    Attributes:
        create_env_fn, create_env_kwargs: the env source and its keyword arguments.
        policy: the policy (``None`` for random actions); ``policy_factory`` builds it instead.
        num_envs: copies of a single env in this process (a vector env brings its own).
        max_frames_per_traj: collector-side episode limit.
        set_truncated: mark each batch's last frame truncated.
        reset_at_each_iter: reset every env before each batch but the first (the previous batch's
            last frames are marked truncated too).
        exploration_type, policy_device, compile_policy: how the policy runs.
        pre_collect_hook: called before each batch, in the process that collects.
        post_collect_hook: called with each batch a worker process collected, in that process
            (the multi-process collectors' workers run it, as TorchRL's do); rollouts ignore it.
        check: ``"full"``, ``"batch"`` or ``"off"``: what is checked of the envs' and the policy's
            data (see :mod:`rlcollect.data.checks`).
        models: other modules by model id whose weights can be updated (share objects with the
            policy or env factory: they are pickled together).
        env_models: model ids that are paths into this process's env (``"env.transform[0].module"``,
            as TorchRL's model ids address an env transform's module): found in the env once built.
        action_dtype: ``"space"``: actions are stored in the action space's dtype; ``"policy"``
            (TorchRL's layout): in the dtype the policy returns, where both are integer or bool
            dtypes (a policy's int64 one-hot action for a bool one-hot space stays int64).
        action_at_build: a TensorDict policy that writes no action is refused when the rollout is
            built (``False``, TorchRL's layout: when it first acts).
        register_policy_transforms: a TorchRL env gets the transforms the policy needs and it
            lacks (``InitTracker``, a recurrent module's primers): ``True`` appends them, ``None``
            warns that they are missing (TorchRL 0.14's ``auto_register_policy_transforms``).
        engine: builds what a worker runs instead of a :class:`Rollout`, ``engine(spec, setup)``
            (worker processes of its own, for a Ray actor).
        info_keys: the keys of the envs' step infos stored in the batch, at ``("next", "info", key)``.
        info_fields: their per-frame shapes and dtypes where already known (the parent's probe
            found them: each worker lays its batch out as the parent's slots); ``None``: the
            rollout finds them from one step of its first env (:mod:`rlcollect.envs.infos`).
    """

    create_env_fn: EnvSource
    policy: Any = None
    num_envs: int = 1
    create_env_kwargs: Mapping[str, Any] | None = None
    policy_factory: Callable[[], Any] | None = None
    max_frames_per_traj: int | None = None
    set_truncated: bool = False
    reset_at_each_iter: bool = False
    exploration_type: InteractionType = InteractionType.RANDOM
    policy_device: torch.device | None = None
    compile_policy: bool | Mapping[str, Any] = False
    env_models: tuple[str, ...] = ()
    pre_collect_hook: Callable[[], None] | None = None
    post_collect_hook: Callable[[Any], None] | None = None
    check: str = "full"
    obs_dtype: torch.dtype | None = None
    models: Mapping[str, torch.nn.Module] = field(default_factory=dict)
    engine: Callable[..., Any] | None = None
    action_dtype: str = "space"
    action_at_build: bool = True
    register_policy_transforms: bool | None = None
    info_keys: tuple[str, ...] = ()
    info_fields: tuple[Field, ...] | None = None

    @property
    def truncates_last(self) -> bool:
        """Each batch's last frame is marked truncated (``set_truncated``, or a reset before the
        next batch): the learner sees every trajectory end there."""
        return self.set_truncated or self.reset_at_each_iter


#: ``Rollout(user_policy=...)`` left out: the rollout builds the policy from its spec.
POLICY_FROM_SPEC: Any = object()


def build_policy(spec: RolloutSpec) -> Any:
    """The user's policy for ``spec``: ``policy_factory()`` if given (called once), else ``policy``."""
    return spec.policy_factory() if spec.policy_factory is not None else spec.policy
