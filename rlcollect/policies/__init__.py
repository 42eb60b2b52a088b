"""Policies layer: adapters from the user's policy to in-place action writes."""

from rlcollect.policies.adapters import (
    ModulePolicy,
    PolicyAdapter,
    RandomPolicy,
    TensorDictPolicy,
    interaction_type,
    make_policy,
)

__all__ = [
    "ModulePolicy",
    "PolicyAdapter",
    "RandomPolicy",
    "TensorDictPolicy",
    "interaction_type",
    "make_policy",
]
