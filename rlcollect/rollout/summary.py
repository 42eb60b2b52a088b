"""What a collector learns from its probe rollout (the batch layout, the envs it built, the modules
weight updates write), in a form a worker process can send back: a collector whose policy only a
``policy_factory`` builds has worker 0 build the probe, so the factory runs in the workers alone.

Examples:
    >>> from rlcollect.rollout.build import make_rollout
    >>> from rlcollect.rollout.spec import RolloutSpec
    >>> import torch
    >>> rollout = make_rollout(RolloutSpec("Pendulum-v1", policy=torch.nn.Linear(3, 1)))
    >>> summary = EngineSummary.of(rollout).portable()
    >>> rollout.close()
    >>> summary.num_envs, summary.follows_num_envs, sorted(summary.models["policy"].keys(True, True))
    (1, True, ['bias', 'weight'])
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictParams

from rlcollect.data.layout import BatchLayout

if TYPE_CHECKING:
    from rlcollect.rollout.build import Engine

__all__ = ["EngineSummary"]


@dataclass(frozen=True)
class EngineSummary:
    """A probe rollout's facts (see :class:`~rlcollect.rollout.build.Engine`).

    Attributes:
        layout: the batch buffers' layout (``None``: a TorchRL env's own TensorDicts).
        num_envs: the envs it built.
        models: the modules weight updates write, by model id.
        follows_num_envs: it built as many envs as asked (copies of one env).
        streams: an asynchronous EnvPool pool (frames in the order envs complete).
        unbatched: one env without a batch dimension of its own.
        reason: why its data does not fit the buffers (where ``layout`` is ``None``).
        env_kind: the class of what steps its envs (named in errors).
        engine: the probe itself, where it was built in this process (closed).
    """

    layout: BatchLayout | None
    num_envs: int
    models: dict[str, torch.nn.Module]
    follows_num_envs: bool = False
    streams: bool = False
    unbatched: bool = False
    reason: str = ""
    env_kind: str = ""
    engine: Engine | None = None

    @classmethod
    def of(cls, engine: Engine) -> EngineSummary:
        """The summary of ``engine``, which it keeps."""
        envs = engine.envs
        return cls(engine.layout, engine.num_envs, dict(engine.models),
                   follows_num_envs=bool(getattr(envs, "follows_num_envs", False)),
                   streams=bool(getattr(envs, "streams", False)),
                   unbatched=bool(getattr(envs, "unbatched", False)),
                   reason=str(getattr(envs, "reason", "")), env_kind=type(envs).__name__, engine=engine)

    def portable(self) -> EngineSummary:
        """This summary to send to another process: no engine, and each model's weights on the CPU
        as a module of their own (the policy and its device stay where they were built)."""
        models: dict[str, torch.nn.Module] = {
            model_id: TensorDictParams(TensorDict.from_module(module).data.cpu().clone(), no_convert=True)
            for model_id, module in self.models.items()}
        return replace(self, models=models, engine=None)
