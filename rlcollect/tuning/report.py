"""``tune``'s result as text: the costs, the limit, each trial against it, the pick and its code.

Examples:
    >>> print(fraction(750.0, 1000.0))
    0.75
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlcollect.tuning.tuner import TuneResult

__all__ = ["format_report", "fraction", "off_note"]


def fraction(fps: float, limit: float) -> str:
    """``fps`` as a fraction of ``limit``, two decimals."""
    return f"{fps / limit:.2f}"


def format_report(result: TuneResult, code: str) -> str:
    """The text ``rlcollect tune`` prints (and ``str(result)``)."""
    costs, limit = result.costs, result.limit
    best = costs.best_batch_size
    width = max([72, *(len(trial.candidate.label) for trial in result.trials)])
    lines = [
        f"per frame: env {costs.env_us:,.1f} µs, policy {costs.policy_us[best]:,.1f} µs (at {best} envs "
        + (f"per pass: one env object's, {costs.batched} envs" if costs.batched else
           f"per pass; {costs.policy_at(1):,.1f} µs at 1") + f"), loop {costs.loop_us:,.1f} µs",
        f"the limit (every core stepping envs and running the policy, nothing else): "
        f"{limit:,.0f} frames/s on {costs.cores} core{'s' if costs.cores > 1 else ''}",
        "",
        f"{'collector':<{width}} {'predicted':>10} {'measured':>10} {'ratio':>6} {'of limit':>8} "
        f"{'start-up':>9}",
    ]
    for trial in result.trials:
        if trial.error is not None:
            lines.append(f"{trial.candidate.label:<{width}} {trial.predicted_fps:>10,.0f} "
                         f"failed: {trial.error}")
            continue
        lines.append(f"{trial.candidate.label:<{width}} {trial.predicted_fps:>10,.0f} {trial.fps:>10,.0f} "
                     f"{fraction(trial.fps, trial.predicted_fps):>6} {fraction(trial.fps, limit):>8} "
                     f"{trial.startup_seconds:>8.1f}s")
    pick = result.pick
    lines += [
        "",
        f"pick: {pick.candidate.label}: {pick.fps:,.0f} frames/s measured, "
        f"{fraction(pick.fps, limit)} of the limit (predicted {fraction(pick.predicted_fps, limit)}, "
        f"measured/predicted {fraction(pick.fps, pick.predicted_fps)}); first batch after "
        f"{pick.startup_seconds:.1f} s; tuned in {result.seconds:.0f} s",
        *off_note(pick.fps / pick.predicted_fps, costs.cores),
        "",
        *("    " + line if line else "" for line in code.splitlines()),
    ]
    return "\n".join(lines)


def off_note(ratio: float, cores: int) -> list[str]:
    """Why a pick's measure is more than 30 % off its prediction, or nothing.

    Examples:
        >>> off_note(0.9, 2)
        []
        >>> off_note(0.5, 2)[0][:60]
        'the measure is 0.50 of the prediction: the prediction counts'
    """
    if 0.7 <= ratio <= 1.3:
        return []
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return [f"the measure is {ratio:.2f} of the prediction: the prediction counts the env, the policy "
            f"and the loop as measured alone in one process, on every core at once with nothing else "
            f"running, and no cost of communication between processes; the load average was {load:.1f} "
            f"on {cores} core{'s' if cores > 1 else ''} at the end"]
