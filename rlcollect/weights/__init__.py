"""Weights layer: weight-update forms, extraction, application and versioning."""

from rlcollect.weights.forms import apply_weights, as_weights, weight_update_forms

__all__ = ["apply_weights", "as_weights", "weight_update_forms"]
