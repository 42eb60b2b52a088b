"""Weights layer: weight-update forms, extraction, application and the versioned store."""

from rlcollect.weights.forms import apply_weights, as_weights, weight_update_forms
from rlcollect.weights.store import WeightStore, WorkerWeights

__all__ = ["WeightStore", "WorkerWeights", "apply_weights", "as_weights", "weight_update_forms"]
