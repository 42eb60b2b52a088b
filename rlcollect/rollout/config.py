"""Options of the rollout loop, decided once per collector."""

from __future__ import annotations

from dataclasses import dataclass

from tensordict.nn import InteractionType

__all__ = ["RolloutConfig"]


@dataclass(frozen=True)
class RolloutConfig:
    """What one process's rollout loop needs to know; built once by the collector.

    Attributes:
        truncate_last: mark the last frame of every batch truncated (``set_truncated`` or
            ``reset_at_each_iter``), so each batch ends its trajectories.
        exploration_type: tensordict interaction type the policy runs under.
    """

    truncate_last: bool = False
    exploration_type: InteractionType = InteractionType.RANDOM
