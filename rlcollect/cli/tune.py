"""``rlcollect tune``: which collector, workers, envs and batch collect fastest for an env and a
policy on this machine (:func:`rlcollect.tuning.tune`), printed with the code that builds it.

Examples:
    >>> print(policy_lines("my_pkg.policies:make_policy"))
    from my_pkg.policies import make_policy
    <BLANKLINE>
    policy = make_policy(observation_space, action_space)  # the single env's spaces
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


def policy_lines(spec: str) -> str:
    """The lines that make ``--policy``'s policy, for the printed code."""
    module, attr = parse_policy_spec(spec)
    name = attr.split(".")[0]
    made = f"policy = {attr}(observation_space, action_space)  # the single env's spaces"
    return f"from {module} import {name}\n\n{made}"


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
    report = result.report(env=repr(options.env))
    if options.policy is None:
        return report
    head, sep, code = report.rpartition("    import rlcollect\n")
    extra = "".join(f"    {line}\n" if line else "\n" for line in policy_lines(options.policy).splitlines())
    return f"{head}{sep}{extra}{code}"
