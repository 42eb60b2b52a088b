"""Bad arguments raise at construction, with a message naming the argument, value and what is allowed."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from tensordict.nn import TensorDictModule

from rlcollect import Collector
from tests.envs_for_tests import TiltPolicy, make_dict_env


class SpaceEnv(gym.Env[Any, Any]):
    def __init__(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        return self.observation_space.sample(), 0.0, False, False, {}


@pytest.mark.parametrize("kwargs,error,message", [
    ({"frames_per_batch": 0}, ValueError, "frames_per_batch must be a positive int, got 0"),
    ({"frames_per_batch": -3}, ValueError, "frames_per_batch must be a positive int, got -3"),
    ({"frames_per_batch": "10"}, TypeError, "frames_per_batch must be a positive int, got '10'"),
    ({"frames_per_batch": 10, "total_frames": 0}, ValueError,
     "total_frames must be a positive int or -1 (no end), got 0"),
    ({"frames_per_batch": 10, "num_envs": 0}, ValueError, "num_envs must be a positive int, got 0"),
    ({"frames_per_batch": 10, "init_random_frames": -2}, ValueError,
     "init_random_frames must be an int >= 0 (or -1 / None: none), got -2"),
    ({"frames_per_batch": 10, "exploration_type": "greedy"}, ValueError,
     "exploration_type='greedy' is not one of"),
    ({"frames_per_batch": 10, "policy_device": "cuda"}, ValueError,
     "policy_device='cuda' but CUDA is not available"),
    ({"frames_per_batch": 10, "env_device": "meta"}, ValueError,
     "env_device='meta': Gymnasium envs run on the CPU only"),
    ({"frames_per_batch": 10, "postproc": 3}, TypeError, "postproc must be callable or None, got int"),
    ({"frames_per_batch": 10, "create_env_kwargs": [1]}, TypeError, "create_env_kwargs must be a dict"),
])
def test_bad_arguments(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    if kwargs.get("policy_device") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA, so policy_device='cuda' is valid here")
    with pytest.raises(error) as info:
        Collector("CartPole-v1", **kwargs)
    assert message in str(info.value)


def test_unknown_env_id() -> None:
    with pytest.raises(ValueError, match="create_env_fn='NoSuchEnv-v0' is not a registered Gymnasium env id"):
        Collector("NoSuchEnv-v0", frames_per_batch=10)


def test_env_factory_returning_something_else() -> None:
    with pytest.raises(TypeError, match="create_env_fn returned int 3; expected a gymnasium.Env"):
        Collector(lambda: 3, frames_per_batch=10)
    with pytest.raises(TypeError, match="create_env_fn must be an env id, a callable"):
        Collector(3.5, frames_per_batch=10)  # type: ignore[arg-type]


def test_vector_env_with_num_envs() -> None:
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    with pytest.raises(ValueError, match="num_envs=3 with a VectorEnv of 2 envs"):
        Collector(venv, frames_per_batch=10, num_envs=3)


@pytest.mark.parametrize("policy,message", [
    (lambda obs: torch.zeros(obs.shape[0], 1, dtype=torch.long),
     r"got shape \(1, 1\) dtype torch.int64, expected shape \(1,\) with an integer or bool dtype"),
    (lambda obs: torch.full((obs.shape[0],), 0.5),
     r"got shape \(1,\) dtype torch.float32, expected shape \(1,\) with an integer or bool dtype"),
    (lambda obs: [0], r"the policy returned list; expected a tensor \(or a numpy array\) of shape \(1,\)"),
    (lambda obs: (torch.zeros(obs.shape[0], dtype=torch.long), obs.sum(-1)),
     r"returned tuple.* several outputs.*TensorDictModule\(policy, in_keys=\['observation'\]"),
    (lambda obs: {"action": torch.zeros(obs.shape[0], dtype=torch.long)}, r"returned dict.* several outputs"),
    (lambda obs: np.zeros((obs.shape[0], 1), dtype=np.int64),
     r"got shape \(1, 1\) dtype torch.int64, expected shape \(1,\)"),  # numpy: checked as a tensor
])
def test_policy_output_that_does_not_fit(policy: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Collector("CartPole-v1", policy, frames_per_batch=10)


def test_continuous_policy_with_wrong_shape() -> None:
    message = r"got shape \(2, 3\) dtype torch.float32, expected shape \(2, 1\)"
    with pytest.raises(ValueError, match=message):
        Collector("Pendulum-v1", lambda obs: obs, frames_per_batch=10, num_envs=2)


def test_tensordict_policy_without_action() -> None:
    policy = TensorDictModule(lambda x: x.sum(-1), in_keys=["observation"], out_keys=["value"])
    with pytest.raises(ValueError, match=r"no 'action' key"):
        Collector("CartPole-v1", policy, frames_per_batch=10)


def test_tensor_policy_on_dict_observations() -> None:
    message = "observation space .* is a Dict: use a tensordict.nn.TensorDictModule"
    with pytest.raises(TypeError, match=message):
        Collector(make_dict_env, TiltPolicy(), frames_per_batch=10)


def test_policy_not_callable() -> None:
    message = "policy must be None, an nn.Module, a TensorDictModule or a callable; got int"
    with pytest.raises(TypeError, match=message):
        Collector("CartPole-v1", 5, frames_per_batch=10)


def test_policy_class_instead_of_an_instance() -> None:
    with pytest.raises(TypeError, match=r"got the class TiltPolicy: pass an instance, TiltPolicy\(...\)"):
        Collector("CartPole-v1", TiltPolicy, frames_per_batch=10)


def test_an_error_of_the_policys_first_call_says_what_it_was_called_on() -> None:
    """The policy's own error, unchanged, with a note: the call the collector made and on what; an
    error of rlcollect's own checks (a misfit action) needs none."""
    with pytest.raises(RuntimeError, match="cannot be multiplied") as raised:
        Collector("CartPole-v1", torch.nn.Linear(3, 2), frames_per_batch=10, num_envs=2)
    assert raised.value.__notes__ == [
        "Raised by the policy's first call, which the collector makes when it is built to check the "
        "actions: on observations of shape (2, 4) float32."]

    def by_entries(pos: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine") as raised:
        Collector(make_dict_env, by_entries, frames_per_batch=10, num_envs=3)
    assert raised.value.__notes__[0].endswith(
        "on the observation entries count (3,) int64, pos (3, 2) float32.")
    with pytest.raises(ValueError, match="does not fit") as misfit:
        Collector("CartPole-v1", lambda obs: torch.zeros(obs.shape[0], 2), frames_per_batch=10)
    assert not getattr(misfit.value, "__notes__", [])


@pytest.mark.parametrize("observation_space,action_space,message", [
    (spaces.Tuple([spaces.Discrete(2)]), spaces.Discrete(2), "space Tuple.* is not supported"),
    (spaces.Box(-1, 1, (2,)), spaces.Dict({"a": spaces.Discrete(2)}),
     r"action space Dict.* is a Dict: .* Collect it as a TorchRL env, .*GymWrapper\(make_env\(\)\)"),
    (spaces.Dict({"action": spaces.Discrete(2)}), spaces.Discrete(2), "Dict key 'action' clashes"),
    (spaces.Box(-1, 1, (2,)), spaces.Tuple([spaces.Discrete(2), spaces.Discrete(3)]),
     r"action space Tuple.* is a Tuple: .*TransformAction.*a MultiDiscrete for a Tuple of Discretes"),
])
def test_unsupported_spaces(observation_space: Any, action_space: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        Collector(lambda: SpaceEnv(observation_space, action_space), frames_per_batch=10)


def test_weight_update_errors() -> None:
    collector = Collector("CartPole-v1", TiltPolicy(), frames_per_batch=10)
    with pytest.raises(KeyError, match=r"unknown model id 'critic'; known: \['policy'\]"):
        collector.update_policy_weights_(TiltPolicy(), model_id="critic")
    with pytest.raises(ValueError, match="give the weights once: got policy_or_weights and weights"):
        collector.update_policy_weights_(TiltPolicy(), weights={"weight": torch.zeros(4)})
    with pytest.raises(ValueError, match="weights_dict updates several models at once"):
        collector.update_policy_weights_(weights_dict={"policy": TiltPolicy()}, model_id="policy")
    with pytest.raises(KeyError, match="which the module does not have"):
        collector.update_policy_weights_({"bias": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"worker_ids=\[1\]: worker 1 is out of range for num_workers=1"):
        collector.update_policy_weights_(TiltPolicy(), worker_ids=[1])
    with pytest.raises(ValueError, match="the workers' policy runs on cpu, not meta"):
        collector.update_policy_weights_(TiltPolicy(), worker_ids=torch.device("meta"))
    with pytest.raises(TypeError, match="worker_ids must be ints or devices, got 1.5"):
        collector.update_policy_weights_(TiltPolicy(), worker_ids=[1.5])  # type: ignore[list-item]


def test_weight_update_forms_of_the_reference() -> None:
    """policy_or_weights= as a keyword, policy_weights= deprecated, devices and numpy ints as ids."""
    policy = TiltPolicy()
    collector = Collector("CartPole-v1", policy, frames_per_batch=10)
    collector.update_policy_weights_(policy_or_weights=TiltPolicy(sign=-1.0))
    assert policy.weight[2].item() == -1.0
    with pytest.warns(DeprecationWarning, match="policy_weights=...\\) is deprecated"):
        collector.update_policy_weights_(policy_weights=TiltPolicy(sign=2.0))
    assert policy.weight[2].item() == 2.0
    collector.update_policy_weights_({"weight": torch.ones(4)}, worker_ids=torch.device("cpu"))
    collector.update_policy_weights_(TiltPolicy(), worker_ids=[np.int64(0), "cpu"])
    assert policy.weight[2].item() == 1.0 and collector.stats().policy_version == 4


def test_frames_per_batch_rounded_up_with_warning() -> None:
    message = "frames_per_batch=10 is not a multiple of the 4 envs; collecting 12"
    with pytest.warns(UserWarning, match=message):
        collector = Collector("CartPole-v1", frames_per_batch=10, num_envs=4)
    assert collector.frames_per_batch == 12 and collector.requested_frames_per_batch == 10
    assert np.prod(collector.rollout().shape) == 12
