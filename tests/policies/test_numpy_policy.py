"""A policy that returns numpy arrays (Stable-Baselines3's ``model.predict``, a hand-written numpy
policy) collects the same batches as the same policy returning tensors, in every collector; its
actions are checked as a tensor policy's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from rlcollect import AsyncBatchedCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from rlcollect.data.checks import BadDataError

pytestmark = pytest.mark.timeout(120)


def tilt(obs: torch.Tensor) -> torch.Tensor:
    return (obs[:, 2] > 0).long()


def tilt_numpy(obs: torch.Tensor) -> np.ndarray:
    return (obs.numpy()[:, 2] > 0).astype(np.int64)  # as SB3's model.predict(obs)[0] returns


def push_numpy(obs: torch.Tensor) -> np.ndarray:
    return np.clip(obs.numpy()[:, :1], -2.0, 2.0)  # float32 [N, 1]


def push(obs: torch.Tensor) -> torch.Tensor:
    return obs[:, :1].clamp(-2.0, 2.0)


def build(kind: str, env: str, policy: Any) -> Any:
    common: dict[str, Any] = {"frames_per_batch": 16, "total_frames": 48, "seed": 3}
    if kind in ("async", "batched"):  # one batch per worker, whichever comes first
        common.update(frames_per_batch=8, total_frames=16)
    if kind == "single":
        return Collector(env, policy, num_envs=2, **common)
    if kind == "batched":
        return AsyncBatchedCollector(env, policy, num_envs=2, envs_per_worker=1, **common)
    workers = {"sync": MultiSyncCollector, "async": MultiAsyncCollector}[kind]
    return workers(env, policy, num_workers=2, **common)


def batches(kind: str, env: str, policy: Any) -> list[Any]:
    with build(kind, env, policy) as collector:
        out = [batch.clone() for batch in collector]
    if kind in ("async", "batched"):  # in arrival order: sorted by env for the comparison
        out.sort(key=lambda b: (float(b["observation"][0, 0, 0]), float(b["observation"][0, 0, 1])))
    return out


@pytest.mark.parametrize("kind", ["single", "sync", "async", "batched"])
def test_numpy_actions_equal_tensor_actions(kind: str) -> None:
    for env, tensor_policy, numpy_policy, dtype in [("CartPole-v1", tilt, tilt_numpy, torch.int64),
                                                    ("Pendulum-v1", push, push_numpy, torch.float32)]:
        expected, got = batches(kind, env, tensor_policy), batches(kind, env, numpy_policy)
        assert len(got) == len(expected) == (2 if kind in ("async", "batched") else 3)
        for a, b in zip(expected, got, strict=True):
            assert b["action"].dtype == dtype
            assert (a == b).all(), f"{env}: the numpy policy's batch differs"


@pytest.mark.filterwarnings("ignore:.*(not within the observation space|reward is a NaN):UserWarning")
def test_numpy_actions_are_checked() -> None:  # (Gymnasium's env checker warns of the NaN it causes)
    def not_finite(obs: torch.Tensor) -> np.ndarray:
        return np.full((len(obs), 1), np.nan, dtype=np.float32)

    with Collector("Pendulum-v1", not_finite, frames_per_batch=8, total_frames=8) as collector, \
            pytest.raises(BadDataError, match="action"):
        next(iter(collector))


def test_numpy_views_torch_cannot_share() -> None:
    """A reversed view (negative strides) and a read-only array are copied, not refused or warned of."""
    def reversed_view(obs: torch.Tensor) -> np.ndarray:
        return tilt_numpy(obs)[::-1][::-1][::-1]  # a negative-stride view of the reversed actions

    def read_only(obs: torch.Tensor) -> np.ndarray:
        return np.broadcast_to(np.int64(1), (len(obs),))

    with Collector("CartPole-v1", reversed_view, num_envs=2, frames_per_batch=8, total_frames=8, seed=0) as c:
        batch = next(iter(c))
    expected = tilt_numpy(batch["observation"][:, 0])[::-1].copy()  # env 0 acts on env 1's observation
    assert torch.equal(batch["action"][:, 0], torch.from_numpy(expected))
    with Collector("CartPole-v1", read_only, num_envs=2, frames_per_batch=8, total_frames=8, seed=0) as c:
        assert (next(iter(c))["action"] == 1).all()
