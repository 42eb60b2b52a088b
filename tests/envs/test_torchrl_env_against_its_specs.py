"""A TorchRL env whose returned data disagree with its own specs: a ``BadDataError`` naming the
entry, the step, the shape returned and the shape the spec declares (it was torch's own shape
error from inside the copy), in rlcollect's collectors and in the wing's."""

from __future__ import annotations

from typing import Any

import pytest
import torch

torchrl = pytest.importorskip("torchrl", reason="the torchrl extra is not installed")

from tensordict import TensorDict  # noqa: E402
from torchrl.data import Categorical, Composite, Unbounded  # noqa: E402
from torchrl.envs import EnvBase  # noqa: E402

import rlcollect.torchrl as wing  # noqa: E402
from rlcollect import Collector  # noqa: E402
from rlcollect.data.checks import BadDataError  # noqa: E402

pytestmark = pytest.mark.timeout(60)
BAD_FROM = 3  # the env's step (from 1) whose output breaks its spec: batch step 2


class OffSpec(EnvBase):
    """Observation [3], reward [1] by its specs; from step ``BAD_FROM`` the ``entry`` it returns
    takes ``shape`` instead; the observation holds the step count. (A reward off its spec is
    TorchRL's own step's error, before the collector sees it.)"""

    def __init__(self, entry: str = "", shape: tuple[int, ...] = ()) -> None:
        super().__init__(batch_size=[])
        self.entry, self.bad_shape, self.t = entry, shape, 0
        self.observation_spec = Composite(observation=Unbounded((3,)))
        self.action_spec = Categorical(2)
        self.reward_spec = Unbounded((1,))

    def _value(self, entry: str, shape: tuple[int, ...]) -> torch.Tensor:
        if entry == self.entry and self.t >= BAD_FROM:
            shape = self.bad_shape
        return torch.full(shape, float(self.t))

    def _reset(self, tensordict: Any) -> TensorDict:
        self.t = 0
        return TensorDict({"observation": self._value("observation", (3,)),
                           "done": torch.zeros(1, dtype=torch.bool),
                           "terminated": torch.zeros(1, dtype=torch.bool)}, [])

    def _step(self, tensordict: Any) -> TensorDict:
        self.t += 1
        return TensorDict({"observation": self._value("observation", (3,)),
                           "reward": self._value("reward", (1,)),
                           "done": torch.zeros(1, dtype=torch.bool),
                           "terminated": torch.zeros(1, dtype=torch.bool)}, [])

    def _set_seed(self, seed: int | None) -> None:
        return


@pytest.mark.parametrize("collector_class", [Collector, wing.Collector], ids=["rlcollect", "wing"])
@pytest.mark.parametrize(("entry", "shape", "pattern"), [
    ("observation", (4,), r"the entry 'observation' at step 2 of batch 0 has shape \(4,\), but the env's "
                          r"observation_spec declares \(3,\)"),
    ("observation", (1, 3), r"the entry 'observation' at step 2 .*has shape \(1, 3\).*declares \(3,\)"),
])
def test_data_off_the_specs_is_named(collector_class: Any, entry: str, shape: tuple[int, ...],
                                     pattern: str) -> None:
    collector = collector_class(lambda: OffSpec(entry, shape), None, frames_per_batch=8, total_frames=8)
    with pytest.raises(BadDataError, match=pattern), collector:
        collector.next()


def test_data_that_fits_its_specs_is_stored_as_returned() -> None:
    """The reference: the same env within its specs, every step's observation stored."""
    with Collector(OffSpec, None, frames_per_batch=8, total_frames=8) as collector:
        batch = collector.next()
    steps = torch.arange(8, dtype=torch.float32)
    assert batch["observation"].shape == (1, 8, 3)
    assert torch.equal(batch["observation"][0, :, 0], steps)
    assert torch.equal(batch["next", "observation"][0, :, 0], steps + 1)
    assert torch.equal(batch["next", "reward"][0, :, 0], steps + 1)
