"""The modules a rollout updates by model id: the policy's, those given as ``models``, and those
found in the env by path (:func:`env_modules`); their lookup and copy.

Examples:
    >>> import torch
    >>> models = {"policy": torch.nn.Linear(2, 1)}
    >>> find_module(models, "policy").out_features
    1
    >>> sorted(copy_weights(models)["policy"])
    ['bias', 'weight']
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import torch

from rlcollect.data.attributes import resolve_path
from rlcollect.envs.base import source_env

__all__ = ["ModelLookup", "copy_weights", "env_modules", "find_module"]


def find_module(models: Mapping[str, torch.nn.Module], model_id: str) -> torch.nn.Module:
    """The module updated under ``model_id``.

    Raises:
        KeyError: unknown model id, listing the known ones.
    """
    if model_id not in models:
        raise KeyError(f"unknown model id {model_id!r}; known: {sorted(models)}")
    return models[model_id]


class ModelLookup:
    """An engine's ``module(model_id)``: what a weight update under ``model_id`` writes into; and
    :meth:`act_with_copy`."""

    models: dict[str, torch.nn.Module]
    policy: Any  # what acts: its ``callable`` and the ``module`` in it (``None``: none)

    def module(self, model_id: str) -> torch.nn.Module:
        """The module updated under ``model_id`` (see :func:`find_module`)."""
        return find_module(self.models, model_id)

    def check_weights_state(self, models: Any) -> None:
        """Raise ``ValueError`` (before anything changes) if ``models``, a state's weights by model
        id, does not fit these modules: their keys and shapes, named."""
        for model_id, weights in dict(models).items():
            check_fits(self.module(model_id), weights, repr(model_id))

    def act_with_copy(self) -> torch.nn.Module | None:
        """From now on, have the policy act with a deep copy of its module (the callable around it,
        a compiled or a numpy wrapper, copied with it), updated under ``"policy"`` in its place;
        return the copy, or ``None`` where no module acts (random actions, a policy server, a
        function).

        Examples:
            >>> from types import SimpleNamespace
            >>> net = torch.nn.Linear(2, 1)
            >>> engine = ModelLookup()
            >>> engine.policy = SimpleNamespace(callable=net, module=net)
            >>> engine.models = {"policy": net}
            >>> twin = engine.act_with_copy()
            >>> twin is not net, engine.module("policy") is twin, engine.policy.callable is twin
            (True, True, True)
        """
        policy: Any = getattr(self, "policy", None)
        module: torch.nn.Module | None = getattr(policy, "module", None)
        if module is None:
            return None
        memo: dict[int, Any] = {}
        acting = copy.deepcopy(policy.callable, memo)
        twin: torch.nn.Module | None = memo.get(id(module))  # the copy inside the copied callable
        if twin is None:  # a callable that does not call the module (it stays the one updated)
            twin = copy.deepcopy(module)
        policy.callable, policy.module = acting, twin
        if self.models.get("policy") is module:
            self.models["policy"] = twin
        return twin


def copy_weights(models: Mapping[str, torch.nn.Module]) -> dict[str, dict[str, torch.Tensor]]:
    """A copy of every module's ``state_dict`` by model id (for a rollout's state)."""
    return {k: {n: t.detach().clone() for n, t in m.state_dict().items()} for k, m in models.items()}


def env_modules(envs: Any, paths: Sequence[str]) -> dict[str, torch.nn.Module]:
    """The modules at ``paths`` from the env (``"env.transform[0].module"``: attributes and
    ``[literal]`` subscripts from the env object, as TorchRL's model ids address them).

    Raises:
        KeyError: a path that does not resolve in this env.
        TypeError: a path to something that is not an ``nn.Module``.
    """
    env = source_env(envs)
    found: dict[str, torch.nn.Module] = {}
    for path in paths:
        try:
            module = resolve_path(SimpleNamespace(env=env), path)
        except (AttributeError, KeyError, IndexError, TypeError) as error:
            raise KeyError(f"model id {path!r} does not resolve in the env ({type(env).__name__}): {error}"
                           ) from None
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"model id {path!r} is {type(module).__name__} in the env, not an nn.Module")
        found[path] = module
    return found


def check_fits(module: torch.nn.Module, weights: Any, what: str) -> None:
    """Raise ``ValueError`` unless ``weights`` (a state's ``state_dict`` of ``what``) has
    ``module``'s keys and shapes (a state of another model is named, not half loaded)."""
    ours = {key: tuple(value.shape) for key, value in module.state_dict().items()}
    theirs = {str(key): tuple(getattr(value, "shape", ())) for key, value in dict(weights or {}).items()}
    if theirs != ours:
        raise ValueError(f"load_state_dict: the state's {what} weights are {theirs}, this collector's "
                         f"{what} has {ours}: the state was taken of another model")
