"""Replay buffers for collected experience: flat transitions in memory, shared memory or on disk.

The bottom layer of rlcollect: it depends on torch, tensordict and numpy only. Any object with an
``extend(batch)`` method is a sink for the collectors; :class:`ReplayBuffer` is ours.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from rlcollect.replay import ReplayBuffer
    >>> rb = ReplayBuffer(1000, sampler="slice", slice_len=4, batch_size=8, seed=0)
    >>> done = torch.zeros(1, 10, 1, dtype=torch.bool)
    >>> batch = TensorDict({"observation": torch.arange(10.0).view(1, 10), ("next", "done"): done}, [1, 10])
    >>> _ = rb.extend(batch)
    >>> rb.sample().reshape(-1, 4)["observation"].diff(dim=1)  # consecutive frames of one trajectory
    tensor([[1., 1., 1.],
            [1., 1., 1.]])
"""

from rlcollect.replay.buffer import ReplayBuffer, ReplayConfig, flatten_batch

__all__ = ["ReplayBuffer", "ReplayConfig", "flatten_batch"]
