"""TorchRL 0.14's constructor signatures, shown by the collectors of :mod:`rlcollect.torchrl`.

Those collectors take TorchRL's arguments as keywords and translate them
(:mod:`rlcollect.torchrl.translate`); :func:`torchrl_signature` gives each class the signature
TorchRL's class of the same name has, with TorchRL's defaults (what ``help()``, ``inspect`` and a
notebook's call tips show), followed by ``**kwargs``: rlcollect's own arguments
(:class:`rlcollect.Collector`'s, ``seed`` and ``num_envs`` for instance). Every default shown is
accepted when passed and means what leaving the argument out means.

Examples:
    >>> import inspect
    >>> from rlcollect.torchrl import Collector, RayCollector
    >>> parameters = inspect.signature(Collector).parameters
    >>> parameters["split_trajs"].default, parameters["total_frames"].default
    (None, -1)
    >>> inspect.signature(RayCollector).parameters["split_trajs"].default  # TorchRL's RayCollector's
    False
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from tensordict.nn import InteractionType

__all__ = ["ASYNC", "COLLECTOR", "MULTI", "RAY", "torchrl_signature"]

_REQUIRED = inspect.Parameter.empty

#: TorchRL's defaults, by argument name: its ``Collector``'s, and its ``MultiCollector``'s for the
#: arguments only that one takes (the two agree where both take one).
_DEFAULTS: dict[str, Any] = {
    "policy_factory": None, "backend": None, "backend_options": None, "num_collectors": None, "sync": None,
    "frames_per_batch": _REQUIRED, "total_frames": -1, "device": None, "storing_device": None,
    "policy_device": None, "env_device": None, "create_env_kwargs": None, "max_frames_per_traj": None,
    "init_random_frames": None, "reset_at_each_iter": False, "postproc": None, "split_trajs": None,
    "track_traj_ids": True, "exploration_type": InteractionType.RANDOM, "return_same_td": False,
    "reset_when_done": True, "interruptor": None, "set_truncated": False, "use_buffers": None,
    "replay_buffer": None, "extend_buffer": True, "trust_policy": None, "compile_policy": None,
    "cudagraph_policy": None, "no_cuda_sync": False, "weight_updater": None, "weight_sync_schemes": None,
    "weight_recv_schemes": None, "track_policy_version": False, "worker_idx": None, "trajs_per_batch": None,
    "trajs_per_write": None, "traj_format": None, "auto_register_policy_transforms": None,
    "pre_collect_hook": None, "post_collect_hook": None, "compact_obs": False,
    # MultiCollector's own
    "num_workers": None, "collector_class": None, "update_at_each_batch": False,
    "preemptive_threshold": None, "num_threads": None, "num_sub_threads": 1, "cat_results": None,
}

#: Each class's keyword arguments in TorchRL's order (after ``create_env_fn`` and ``policy``).
COLLECTOR = """policy_factory backend backend_options num_collectors sync frames_per_batch total_frames
    device storing_device policy_device env_device create_env_kwargs max_frames_per_traj init_random_frames
    reset_at_each_iter postproc split_trajs track_traj_ids exploration_type return_same_td reset_when_done
    interruptor set_truncated use_buffers replay_buffer extend_buffer trust_policy compile_policy
    cudagraph_policy no_cuda_sync weight_updater weight_sync_schemes weight_recv_schemes
    track_policy_version worker_idx trajs_per_batch trajs_per_write traj_format
    auto_register_policy_transforms pre_collect_hook post_collect_hook compact_obs"""
#: TorchRL's ``MultiCollector``.
MULTI = """num_workers policy_factory frames_per_batch total_frames device storing_device env_device
    policy_device create_env_kwargs collector_class max_frames_per_traj init_random_frames
    reset_at_each_iter postproc split_trajs exploration_type reset_when_done update_at_each_batch
    preemptive_threshold num_threads num_sub_threads cat_results set_truncated use_buffers replay_buffer
    extend_buffer trust_policy compile_policy cudagraph_policy no_cuda_sync weight_updater
    weight_sync_schemes weight_recv_schemes track_policy_version worker_idx trajs_per_batch
    trajs_per_write traj_format init_fn auto_register_policy_transforms pre_collect_hook post_collect_hook
    compact_obs"""
#: TorchRL's ``AsyncCollector``.
ASYNC = """policy_factory frames_per_batch total_frames device storing_device env_device policy_device
    create_env_kwargs max_frames_per_traj init_random_frames reset_at_each_iter postproc split_trajs
    exploration_type reset_when_done update_at_each_batch preemptive_threshold num_threads num_sub_threads
    set_truncated track_policy_version"""
#: TorchRL's ``RayCollector``, and the defaults in which it differs from the others.
RAY = """policy_factory trust_policy frames_per_batch total_frames device storing_device env_device
    policy_device max_frames_per_traj init_random_frames reset_at_each_iter postproc split_trajs
    exploration_type collector_class collector_kwargs num_workers_per_collector sync ray_init_config
    remote_configs num_collectors update_after_each_batch max_weight_update_interval replay_buffer
    weight_updater weight_sync_schemes weight_recv_schemes use_env_creator no_cuda_sync trajs_per_batch
    pre_collect_hook post_collect_hook"""
RAY_DEFAULTS: dict[str, Any] = {
    "max_frames_per_traj": -1, "init_random_frames": -1, "split_trajs": False, "collector_kwargs": None,
    "num_workers_per_collector": 1, "sync": False, "ray_init_config": None, "remote_configs": None,
    "update_after_each_batch": False, "max_weight_update_interval": -1, "use_env_creator": False,
    "no_cuda_sync": None,
}

_T = TypeVar("_T", bound=type)


def torchrl_signature(names: str, **defaults: Any) -> Callable[[_T], _T]:
    """Give a class's ``__init__`` TorchRL's signature: ``create_env_fn``, ``policy=None``, then
    ``names`` as keyword-only arguments with TorchRL's defaults (``defaults`` where they differ),
    then ``**kwargs``."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                  inspect.Parameter("create_env_fn", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                  inspect.Parameter("policy", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
    parameters += [inspect.Parameter(name, keyword, default=defaults.get(name, _DEFAULTS.get(name)))
                   for name in names.split()]
    parameters.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    signature = inspect.Signature(parameters)

    def decorate(cls: _T) -> _T:
        assert "__init__" in vars(cls), f"{cls.__name__} has no __init__ of its own"
        cls.__init__.__signature__ = signature  # type: ignore[misc]
        cls.__signature__ = _ClassSignature()  # type: ignore[attr-defined]
        return cls

    return decorate


class _ClassSignature:
    """A class's signature: its ``__init__``'s without ``self`` (read by ``inspect`` before the
    metaclass's ``__call__``, which takes ``*args, **kwargs``); a subclass's own ``__init__``
    gives its own."""

    def __get__(self, instance: Any, owner: type) -> inspect.Signature:
        signature = inspect.signature(owner.__init__)  # type: ignore[misc]
        return signature.replace(parameters=list(signature.parameters.values())[1:])
