"""Policies layer: adapters from the user's policy to in-place action writes."""

from rlcollect.policies.adapter import PolicyAdapter, interaction_type
from rlcollect.policies.adapters import make_policy
from rlcollect.policies.module_policy import ModulePolicy
from rlcollect.policies.random_policy import RandomPolicy
from rlcollect.policies.tensordict_policy import TensorDictPolicy

__all__ = [
    "ModulePolicy",
    "PolicyAdapter",
    "RandomPolicy",
    "TensorDictPolicy",
    "interaction_type",
    "make_policy",
]
