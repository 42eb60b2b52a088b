"""Data layer: spaces to buffer layout, trajectory ids, trajectory splitting."""

from rlcollect.data.layout import BatchLayout, Field, action_fields, observation_fields
from rlcollect.data.trajectories import TrajectoryIds, split_trajectories

__all__ = [
    "BatchLayout",
    "Field",
    "TrajectoryIds",
    "action_fields",
    "observation_fields",
    "split_trajectories",
]
