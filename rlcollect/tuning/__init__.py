"""Tuning: which collector, how many workers and envs, how big a batch, for an env and a policy
on this machine (:func:`tune`, and ``rlcollect tune`` on the command line).

Names are imported on first use (``rlcollect.tuning.kinds`` stays free of torch).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcollect.tuning.candidates import Candidate
    from rlcollect.tuning.costs import Costs, measure_costs
    from rlcollect.tuning.kinds import KINDS
    from rlcollect.tuning.tuner import Trial, TuneResult, tune

_WHERE = {"Candidate": "candidates", "Costs": "costs", "measure_costs": "costs", "KINDS": "kinds",
          "Trial": "tuner", "TuneResult": "tuner", "tune": "tuner"}

__all__ = ["KINDS", "Candidate", "Costs", "Trial", "TuneResult", "measure_costs", "tune"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"rlcollect.tuning.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'rlcollect.tuning' has no attribute {name!r}")
