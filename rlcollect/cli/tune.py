"""``rlcollect tune``: which collector, workers, envs and batch collect fastest for an env and a
policy on this machine (:func:`rlcollect.tuning.tune`), printed with the code that builds it.

Examples:
    >>> imports, setup = policy_lines("my_pkg.policies:make_policy", "CartPole-v1", {})
    >>> print(imports + setup, end="")
    import gymnasium as gym
    from my_pkg.policies import make_policy
    one = gym.make('CartPole-v1')  # one env: the spaces make_policy is given
    policy = make_policy(one.observation_space, one.action_space)
    one.close()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlcollect.cli.errors import CliError, one_line
from rlcollect.cli.planning import env_spaces
from rlcollect.cli.policy import build_policy, parse_policy_spec

__all__ = ["TuneOptions", "policy_lines", "run_tune"]


@dataclass(frozen=True)
class TuneOptions:
    """The ``tune`` command's arguments."""

    env: str
    env_kwargs: dict[str, Any]
    policy: str | None
    seconds: float
    num_envs: int | None
    max_envs: int
    frames_per_batch: int | None
    kinds: Sequence[str]
    progress: bool


def policy_lines(spec: str, env: str, env_kwargs: dict[str, Any]) -> tuple[str, str]:
    """The imports and the lines that make ``--policy``'s policy from one ``env``'s spaces, for the
    printed code."""
    module, attr = parse_policy_spec(spec)
    kwargs = "".join(f", {key}={value!r}" for key, value in env_kwargs.items())
    imports, register = f"from {module} import {attr.split('.')[0]}\n", ""
    if env.startswith("envpool:"):
        imports = f"import envpool\n{imports}"
        one = f"envpool.make_gymnasium({env.removeprefix('envpool:')!r}, num_envs=1{kwargs})"
    else:
        imports = f"import gymnasium as gym\n{imports}"
        one = f"gym.make({env!r}{kwargs})"
        if env.startswith("ALE/"):  # ale-py's envs are registered by hand
            imports, register = f"import ale_py\n{imports}", "gym.register_envs(ale_py)\n"
    return imports, (f"{register}one = {one}  # one env: the spaces {attr} is given\n"
                     f"policy = {attr}(one.observation_space, one.action_space)\n"
                     "one.close()\n")


def run_tune(options: TuneOptions) -> str:
    """Tune for ``options`` and return the report (the pick's code last).

    Raises:
        CliError: a bad env, policy or argument, or no configuration could run.
    """
    from rlcollect.tuning import tune

    policy = None
    observation_space, action_space = env_spaces(options.env, options.env_kwargs)  # a bad --env named
    if options.policy is not None:
        policy = build_policy(options.policy, observation_space, action_space)
    try:
        result = tune(options.env, policy, seconds=options.seconds, num_envs=options.num_envs,
                      max_envs=options.max_envs, frames_per_batch=options.frames_per_batch,
                      kinds=tuple(options.kinds), env_kwargs=options.env_kwargs or None,
                      progress=options.progress)
    except (ValueError, TypeError, RuntimeError) as error:
        raise CliError(one_line(str(error))) from None
    if options.policy is None:
        return result.report(env=repr(options.env))
    imports, setup = policy_lines(options.policy, options.env, options.env_kwargs)
    return result.report(env=repr(options.env), imports=imports, setup=setup)
