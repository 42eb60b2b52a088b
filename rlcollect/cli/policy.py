"""``--policy pkg.module:factory``: import a policy factory and build the policy from the env's spaces.

The factory is called as ``factory(observation_space, action_space)`` with the single env's
Gymnasium spaces and returns anything :class:`~rlcollect.Collector` takes as a policy (an
``nn.Module`` or callable from observations to actions, or a TensorDict policy).

Examples:
    >>> parse_policy_spec("my_project.policies:make_mlp")
    ('my_project.policies', 'make_mlp')
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, cast

from rlcollect.cli.errors import CliError, one_line

__all__ = ["build_policy", "load_factory", "parse_policy_spec"]


def parse_policy_spec(spec: str) -> tuple[str, str]:
    """Split ``"pkg.module:factory"`` into the module and the attribute path.

    Raises:
        CliError: ``spec`` is not of that form.
    """
    module, sep, attr = spec.partition(":")
    if not sep or not module.strip() or not attr.strip() or ":" in attr:
        raise CliError(f"--policy {spec!r}: expected the form pkg.module:factory")
    return module.strip(), attr.strip()


def load_factory(spec: str) -> Callable[..., Any]:
    """Import the module of ``spec`` and return its (dotted) attribute ``factory``.

    The current directory is importable, as for ``python -m``: ``--policy my_policies:make`` finds
    ``./my_policies.py``.

    Raises:
        CliError: the module does not import, has no such attribute, or it is not callable.
    """
    module_name, attr = parse_policy_spec(spec)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as error:  # any error of the user's module is a bad --policy
        raise CliError(
            f"--policy {spec!r}: cannot import module {module_name!r} "
            f"({type(error).__name__}: {one_line(str(error))})"
        ) from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise CliError(f"--policy {spec!r}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise CliError(f"--policy {spec!r}: {attr!r} is a {type(target).__name__}, not a callable factory")
    return cast(Callable[..., Any], target)


def build_policy(spec: str, observation_space: Any, action_space: Any) -> Any:
    """The policy that ``spec``'s factory returns for these spaces.

    Raises:
        CliError: the factory cannot be loaded, raises, or returns ``None``.
    """
    factory = load_factory(spec)
    try:
        policy = factory(observation_space, action_space)
    except Exception as error:  # the factory is user code: report, don't trace back
        raise CliError(
            f"--policy {spec!r}: the factory raised {type(error).__name__}: {one_line(str(error))}"
        ) from None
    if policy is None:
        raise CliError(f"--policy {spec!r}: the factory returned None instead of a policy")
    return policy
