"""TorchRL's ``collector.pipes``, as a legacy weight updater uses them: one pipe per worker, which
takes ``(weights, "update")`` and answers ``(None, "updated")``.

TorchRL's multi-process collectors talk to their workers through pipes of their own, and an updater
written for them (a ``WeightUpdaterBase`` whose ``_sync_weights_with_worker`` does
``collector.pipes[i].send((weights, "update"))`` then ``collector.pipes[i].recv()``) sends the
weights that way. rlcollect's workers take their weights from the collector's weight channel: a pipe
here hands the weights to that channel for its worker only (they act from the worker's next batch,
stamped with a new ``policy_version``), and answers at once. No other message exists: rlcollect's
workers speak no pipe protocol, and a message that is not an update is refused, named.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from tensordict.nn import TensorDictModule
    >>> from rlcollect.torchrl import MultiSyncCollector
    >>> policy = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    >>> collector = MultiSyncCollector(["Pendulum-v1"] * 2, policy, frames_per_batch=8)
    >>> zeros = TensorDict.from_module(policy).data.clone().zero_()
    >>> collector.pipes[1].send((zeros, "update"))  # worker 1 acts with zeros from its next batch
    >>> collector.pipes[1].recv()
    (None, 'updated')
    >>> collector.shutdown()
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rlcollect.data.checks import short_repr

__all__ = ["WorkerPipe", "worker_pipes"]


class WorkerPipe:
    """Worker ``worker``'s end of TorchRL's pipe protocol, weight updates only (module docstring)."""

    def __init__(self, collector: Any, worker: int) -> None:
        self._collector, self.worker = collector, worker
        self._answers: deque[tuple[Any, str]] = deque()

    def send(self, message: Any) -> None:
        """``(weights, "update")``: the weights go to this worker (from its next batch).

        Raises:
            NotImplementedError: any other message (rlcollect's workers take no other).
        """
        if not (isinstance(message, tuple) and len(message) == 2 and message[1] == "update"):
            raise NotImplementedError(
                f"collector.pipes[{self.worker}].send({short_repr(message)}): rlcollect's workers take "
                "only weight updates, (weights, 'update'), through TorchRL's pipes; use the collector's "
                "own methods (update_policy_weights_, state_dict, ...) for anything else")
        self._collector._update_weights({"policy": message[0]}, [self.worker])
        self._answers.append((None, "updated"))

    def recv(self) -> tuple[Any, str]:
        """The answer to the oldest update not read yet: ``(None, "updated")``.

        Raises:
            RuntimeError: nothing was sent (TorchRL's pipe would block for ever).
        """
        if not self._answers:
            raise RuntimeError(f"collector.pipes[{self.worker}].recv(): no update was sent through this "
                               "pipe, so no answer will come")
        return self._answers.popleft()

    def poll(self, timeout: float | None = 0.0) -> bool:
        """Whether an answer waits (answers come at once: nothing to wait for)."""
        return bool(self._answers)


def worker_pipes(collector: Any) -> list[WorkerPipe]:
    """``collector.pipes``: one :class:`WorkerPipe` per worker, made once (each keeps its answers)."""
    pipes: list[WorkerPipe] = collector.__dict__.setdefault(
        "_torchrl_pipes", [WorkerPipe(collector, worker) for worker in range(collector.num_workers)])
    return pipes
