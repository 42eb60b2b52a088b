"""Policy adapters: what each writes into the batch buffers, the dry-step checks, exploration types."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, TensorDictModule
from tensordict.nn.probabilistic import interaction_type as current_interaction_type

from rlcollect.data.buffers import BatchBuffers
from rlcollect.data.layout import BatchLayout, Field, OneHotSpace, action_fields, observation_fields
from rlcollect.policies import (
    ModulePolicy,
    PolicyAdapter,
    RandomPolicy,
    TensorDictPolicy,
    interaction_type,
    make_policy,
)

N, T = 3, 4
BOX_OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)


def buffers_for(
    obs_space: spaces.Space, act_space: spaces.Space, extras: tuple[Field, ...] = ()
) -> BatchBuffers:
    layout = BatchLayout(
        tuple(observation_fields(obs_space)),
        action_fields(act_space)[0],
        extras,
        dict_observations=isinstance(obs_space, spaces.Dict),
    )
    return BatchBuffers.allocate(layout, N, T)


def fill_obs(buffers: BatchBuffers, seed: int = 0) -> None:
    """Distinct observations in every slot (floats in [-1, 1), ints in [0, 5))."""
    gen = torch.Generator().manual_seed(seed)
    for tensor in buffers.obs_ext.values():
        if tensor.is_floating_point():
            tensor.copy_(torch.rand(tensor.shape, generator=gen) * 2 - 1)
        else:
            tensor.copy_(torch.randint(0, 5, tensor.shape, generator=gen))


# -- RandomPolicy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(-2.0, 3.0, (2,), np.float32),
        spaces.Box(np.array([0.0, -5.0]), np.array([0.1, -4.0]), dtype=np.float64),
        spaces.Discrete(5, start=2),
        spaces.MultiDiscrete([3, 7]),
        spaces.MultiBinary(3),
    ],
)
def test_random_policy_writes_in_bounds_actions(space: spaces.Space) -> None:
    policy = RandomPolicy(space, num_envs=N, seed=0)
    buffers = buffers_for(BOX_OBS, space)
    policy.bind(buffers)
    for t in range(T):
        policy.act(t)
    actions = buffers.batch["action"]
    field = action_fields(space)[0]
    assert actions.shape == (N, T, *field.shape)
    assert actions.dtype == field.dtype
    values = actions.numpy().reshape(N * T, *field.shape)
    assert all(space.contains(np.asarray(v, dtype=space.dtype)) for v in values)
    if isinstance(space, spaces.Discrete):
        assert set(values.tolist()) <= set(range(2, 7))
        assert len(set(values.tolist())) > 1
    elif isinstance(space, spaces.Box):
        assert np.all(values >= space.low) and np.all(values <= space.high)
        assert len(np.unique(values)) == values.size  # continuous samples do not repeat
    elif isinstance(space, spaces.MultiDiscrete):
        assert np.all(values >= 0) and np.all(values < space.nvec)
    else:
        assert set(np.unique(values).tolist()) <= {0, 1}
    sample = policy.sample()
    assert np.asarray(sample).shape == (N, *field.shape)


def run_random(policy: RandomPolicy, space: spaces.Space) -> np.ndarray:
    buffers = buffers_for(BOX_OBS, space)
    policy.bind(buffers)
    for t in range(T):
        policy.act(t)
    return buffers.action_np.copy()


@pytest.mark.parametrize("space", [spaces.Discrete(1000), spaces.Box(-1.0, 1.0, (3,), np.float32)])
def test_random_policy_is_seeded_reproducibly(space: spaces.Space) -> None:
    first = run_random(RandomPolicy(space, N, seed=7), space)
    again = run_random(RandomPolicy(space, N, seed=7), space)
    other = run_random(RandomPolicy(space, N, seed=8), space)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    # each step draws new actions: the columns differ
    assert not np.array_equal(first[:, 0], first[:, 1])

    policy = RandomPolicy(space, N, seed=123)
    run_random(policy, space)
    policy.seed(7)  # reseeding restarts the seeded sequence
    np.testing.assert_array_equal(run_random(policy, space), first)

    policy = RandomPolicy(space, N, seed=3)
    run_random(policy, space)
    state = policy.state_dict()
    expected = run_random(policy, space)
    restored = RandomPolicy(space, N, seed=99)
    restored.load_state_dict(state)
    np.testing.assert_array_equal(run_random(restored, space), expected)


# -- ModulePolicy ------------------------------------------------------------------------------


class SignPolicy(torch.nn.Module):
    """Discrete(2) action: 1 where obs . w > 0; returns ``dtype`` (int64 by default)."""

    def __init__(self, dtype: torch.dtype = torch.int64) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 0.0]))
        self.dtype = dtype

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs @ self.w > 0).to(self.dtype)


@pytest.mark.parametrize("returned", [torch.int64, torch.int32, torch.bool])
def test_module_policy_writes_discrete_actions(returned: torch.dtype) -> None:
    module = SignPolicy(returned)
    policy = make_policy(module, BOX_OBS, spaces.Discrete(2), N)
    assert isinstance(policy, ModulePolicy)
    assert policy.module is module  # already on the device it runs on: not copied
    assert policy.extras == ()
    buffers = buffers_for(BOX_OBS, spaces.Discrete(2))
    fill_obs(buffers)
    policy.bind(buffers)
    policy.act(2)
    obs = buffers.obs_ext[("observation",)]
    expected = torch.zeros(N, T, dtype=torch.int64)
    expected[:, 2] = (obs[:, 2] @ torch.tensor([1.0, -2.0, 0.5, 0.0]) > 0).long()
    assert buffers.batch["action"].dtype == torch.int64
    assert torch.equal(buffers.batch["action"], expected)  # only column 2 was written
    for t in range(T):
        policy.act(t)
        expected[:, t] = (obs[:, t] @ torch.tensor([1.0, -2.0, 0.5, 0.0]) > 0).long()
    assert torch.equal(buffers.batch["action"], expected)
    assert 0 < int(expected.sum()) < N * T  # both actions occur


def test_module_policy_writes_box_actions_as_float32() -> None:
    act_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def policy_fn(obs: torch.Tensor) -> torch.Tensor:  # float64 output, cast on write
        return torch.stack([obs[:, 0] * obs[:, 1], obs.sum(-1) / 4], -1).double()

    policy = make_policy(policy_fn, BOX_OBS, act_space, N)
    assert isinstance(policy, ModulePolicy)
    assert policy.module is None  # a plain callable
    buffers = buffers_for(BOX_OBS, act_space)
    fill_obs(buffers, seed=1)
    policy.bind(buffers)
    for t in range(T):
        policy.act(t)
    obs = buffers.obs_ext[("observation",)][:, :T]
    expected = torch.stack([obs[..., 0] * obs[..., 1], obs.sum(-1) / 4], -1)
    assert buffers.batch["action"].shape == (N, T, 2)
    assert buffers.batch["action"].dtype == torch.float32
    torch.testing.assert_close(buffers.batch["action"], expected)


def test_module_policy_writes_multidiscrete_actions() -> None:
    act_space = spaces.MultiDiscrete([5, 5])
    obs_space = spaces.MultiDiscrete([5, 5, 5])

    def policy_fn(obs: torch.Tensor) -> torch.Tensor:
        return torch.stack([obs[:, 0], (obs[:, 1] + obs[:, 2]) % 5], -1)

    policy = make_policy(policy_fn, obs_space, act_space, N)
    buffers = buffers_for(obs_space, act_space)
    fill_obs(buffers, seed=2)
    policy.bind(buffers)
    for t in range(T):
        policy.act(t)
    obs = buffers.obs_ext[("observation",)][:, :T]
    expected = torch.stack([obs[..., 0], (obs[..., 1] + obs[..., 2]) % 5], -1)
    assert buffers.batch["action"].shape == (N, T, 2)
    assert buffers.batch["action"].dtype == torch.int64
    assert torch.equal(buffers.batch["action"], expected)


def test_bind_keeps_views_per_buffers() -> None:
    policy = make_policy(lambda obs: obs[:, 0].long(), spaces.MultiDiscrete([9]), spaces.Discrete(9), N)
    first = buffers_for(spaces.MultiDiscrete([9]), spaces.Discrete(9))
    second = buffers_for(spaces.MultiDiscrete([9]), spaces.Discrete(9))
    first.obs_ext[("observation",)].fill_(3)
    second.obs_ext[("observation",)].fill_(6)
    for buffers in (first, second, first):  # a worker alternating between slots
        policy.bind(buffers)
        policy.act(1)
    policy.bind(second)
    policy.act(0)
    assert first.batch["action"].tolist() == [[0, 3, 0, 0]] * N
    assert second.batch["action"].tolist() == [[6, 6, 0, 0]] * N


def test_module_policy_rejects_dict_observations() -> None:
    obs_space = spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), np.float32)})
    with pytest.raises(TypeError, match="is a Dict: use a tensordict.nn.TensorDictModule"):
        make_policy(lambda obs: obs, obs_space, spaces.Discrete(2), N)


def test_not_callable_policy_is_rejected() -> None:
    with pytest.raises(TypeError, match="got int"):
        make_policy(3, BOX_OBS, spaces.Discrete(2), N)


@pytest.mark.parametrize(
    ("output", "act_space", "fragments"),
    [
        (  # shape: [N, 1] for a Discrete action
            lambda obs: torch.zeros(obs.shape[0], 1, dtype=torch.int64),
            spaces.Discrete(2),
            ["got shape (3, 1) dtype torch.int64", "expected shape (3,) with an integer or bool dtype"],
        ),
        (  # dtype: floats with fractions for a Discrete action (whole numbers are taken)
            lambda obs: torch.full((obs.shape[0],), 0.5),
            spaces.Discrete(2),
            ["got shape (3,) dtype torch.float32", "expected shape (3,) with an integer or bool dtype"],
        ),
        (  # shape, with integers (which a float Box action takes)
            lambda obs: torch.zeros(obs.shape[0], 3, dtype=torch.int32),
            spaces.Box(-1.0, 1.0, (2,), np.float32),
            ["got shape (3, 3) dtype torch.int32",
             "expected shape (3, 2) with a floating (or integer) dtype"],
        ),
        (  # MultiBinary takes integers or bools
            lambda obs: torch.zeros(obs.shape[0], 4, dtype=torch.bool),
            spaces.MultiBinary(3),
            ["got shape (3, 4) dtype torch.bool", "expected shape (3, 3) with an integer or bool dtype"],
        ),
    ],
)
def test_dry_step_error_names_both_shapes_and_dtypes(
    output: Any, act_space: spaces.Space, fragments: list[str]
) -> None:
    with pytest.raises(ValueError) as error:
        make_policy(output, BOX_OBS, act_space, N)
    message = str(error.value)
    assert "does not fit action space" in message
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    ("output", "act_space", "hint"),
    [
        (lambda obs: torch.zeros(obs.shape[0], 2), spaces.Discrete(2),
         "2 floats per env look like logits or probabilities over the actions; return the chosen ones"),
        (lambda obs: torch.zeros(obs.shape[0], 1, dtype=torch.int64), spaces.Discrete(2),
         "drop the trailing dimension of size 1 (.squeeze(-1))"),
        (lambda obs: torch.zeros(obs.shape[0], 2, 1), spaces.Box(-1.0, 1.0, (2,), np.float32),
         "drop the trailing dimension of size 1"),
        (lambda obs: torch.zeros((), dtype=torch.int64), spaces.Discrete(2),
         "one action for 3 envs; the policy gets the observations of every env at once ([3, *obs])"),
        (lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64), OneHotSpace((2,), np.int64),
         "one action index per env for a one-hot action; return torch.nn.functional.one_hot(action, 2)"),
    ],
)
def test_dry_step_error_says_what_the_usual_mistake_looks_like(
    output: Any, act_space: spaces.Space, hint: str
) -> None:
    with pytest.raises(ValueError, match="does not fit action space") as error:
        make_policy(output, BOX_OBS, act_space, N)
    assert hint in str(error.value)


def test_dry_step_error_gives_no_hint_where_none_applies() -> None:
    with pytest.raises(ValueError) as error:  # 3 floats per env for 2 actions: not logits
        make_policy(lambda obs: torch.zeros(obs.shape[0], 3), BOX_OBS, spaces.Discrete(2), N)
    assert str(error.value).endswith("expected shape (3,) with an integer or bool dtype (or floats holding "
                                     "whole numbers)")


def test_dry_step_rejects_a_non_tensor_output() -> None:
    with pytest.raises(ValueError, match=r"returned list; expected a tensor \(or a numpy array\) of shape"):
        make_policy(lambda obs: [0, 0, 0], BOX_OBS, spaces.Discrete(2), N)
    adapter = make_policy(lambda obs: np.zeros(3, dtype=np.int64), BOX_OBS, spaces.Discrete(2), N)
    assert adapter.action_dtype == torch.int64  # numpy actions taken as they are, then checked
    with pytest.raises(ValueError, match=r"got shape \(3, 1\) dtype torch.int64, expected shape \(3,\)"):
        make_policy(lambda obs: np.zeros((3, 1), dtype=np.int64), BOX_OBS, spaces.Discrete(2), N)


# -- TensorDictPolicy ---------------------------------------------------------------------------


def actor_fn(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    action = (obs.sum(-1) > 0).long()
    log_prob = -obs.abs().sum(-1)
    hidden = torch.cat([obs, 2 * obs], -1).double()
    return action, log_prob, hidden


def test_tensordict_policy_writes_action_and_extras() -> None:
    module = TensorDictModule(
        actor_fn, in_keys=["observation"], out_keys=["action", "sample_log_prob", ("aux", "hidden")]
    )
    policy = make_policy(module, BOX_OBS, spaces.Discrete(2), N)
    assert isinstance(policy, TensorDictPolicy)
    assert policy.module is module
    assert policy.extras == (
        Field(("sample_log_prob",), (), torch.float32),
        Field(("aux", "hidden"), (8,), torch.float64),
    )
    buffers = buffers_for(BOX_OBS, spaces.Discrete(2), policy.extras)
    assert buffers.batch["sample_log_prob"].shape == (N, T)
    assert buffers.batch["aux", "hidden"].shape == (N, T, 8)
    fill_obs(buffers, seed=4)
    policy.bind(buffers)
    for t in range(T):
        policy.act(t)
    obs = buffers.obs_ext[("observation",)][:, :T]
    action, log_prob, hidden = actor_fn(obs)
    assert buffers.batch["action"].dtype == torch.int64
    assert torch.equal(buffers.batch["action"], action)
    torch.testing.assert_close(buffers.batch["sample_log_prob"], log_prob)
    assert buffers.batch["aux", "hidden"].dtype == torch.float64
    torch.testing.assert_close(buffers.batch["aux", "hidden"], hidden)


def test_tensordict_policy_reads_dict_observations() -> None:
    obs_space = spaces.Dict(
        {"agent": spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), np.float32)}), "count": spaces.Discrete(5)}
    )

    def fn(pos: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return ((pos[..., 0] > 0) ^ (count % 2 == 0)).long()

    module = TensorDictModule(fn, in_keys=[("agent", "pos"), "count"], out_keys=["action"])
    policy = make_policy(module, obs_space, spaces.Discrete(2), N)
    assert isinstance(policy, TensorDictPolicy)
    assert policy.extras == ()  # the observation keys the module passes through are not extras
    buffers = buffers_for(obs_space, spaces.Discrete(2))
    fill_obs(buffers, seed=5)
    policy.bind(buffers)
    for t in range(T):
        policy.act(t)
    pos = buffers.obs_ext[("agent", "pos")][:, :T]
    count = buffers.obs_ext[("count",)][:, :T]
    assert torch.equal(buffers.batch["action"], fn(pos, count))
    assert torch.equal(buffers.batch["agent", "pos"], pos)  # inputs untouched


class KeyedPolicy:
    """Not a TensorDictModule, but it has in_keys / out_keys: treated as a TensorDict policy."""

    in_keys = ["observation"]
    out_keys = ["action", "value"]

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        obs = td.get("observation")
        td.set("action", obs[:, :2] * 0.5)
        td.set("value", obs.sum(-1, keepdim=True))
        return td


def test_object_with_in_keys_and_out_keys_is_a_tensordict_policy() -> None:
    act_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    policy = make_policy(KeyedPolicy(), BOX_OBS, act_space, N)
    assert isinstance(policy, TensorDictPolicy)
    assert policy.module is None
    assert policy.extras == (Field(("value",), (1,), torch.float32),)
    buffers = buffers_for(BOX_OBS, act_space, policy.extras)
    fill_obs(buffers, seed=6)
    policy.bind(buffers)
    for t in range(T):
        policy.act(t)
    obs = buffers.obs_ext[("observation",)][:, :T]
    torch.testing.assert_close(buffers.batch["action"], obs[..., :2] * 0.5)
    torch.testing.assert_close(buffers.batch["value"], obs.sum(-1, keepdim=True))


def test_tensordict_policy_without_action_is_rejected() -> None:
    module = TensorDictModule(lambda obs: obs.sum(-1), in_keys=["observation"], out_keys=["logits"])
    with pytest.raises(ValueError, match=r"wrote keys .*'logits'.* but no 'action' key"):
        make_policy(module, BOX_OBS, spaces.Discrete(2), N)


@pytest.mark.parametrize(("written", "owner"), [
    (("next", "reward"), "env's step"), (("next", "done"), "env's step"),
    (("next", "info", "x"), "env's step"),
    (("collector", "traj_ids"), "collector"), ("policy_version", "collector"),
])
def test_tensordict_policy_writing_a_key_the_batch_fills_is_refused(written: Any, owner: str) -> None:
    """The batch could hold only one of the two values: the policy's (a reward it shaped, say)
    would be lost without a word."""
    def act(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (obs[:, 0] > 0).long(), obs[:, :1] * 0 + 7

    module = TensorDictModule(act, in_keys=["observation"], out_keys=["action", written])
    name = written if isinstance(written, str) else ".".join(written)
    with pytest.raises(ValueError, match=rf"writes '{name}', which the batch holds as the {owner} wrote it"):
        make_policy(module, BOX_OBS, spaces.Discrete(2), N)


def test_tensordict_policy_with_a_bad_action_names_shapes_and_dtypes() -> None:
    module = TensorDictModule(lambda obs: obs[:, :1], in_keys=["observation"], out_keys=["action"])
    with pytest.raises(ValueError) as error:
        make_policy(module, BOX_OBS, spaces.Discrete(2), N)
    assert "got shape (3, 1) dtype torch.float32" in str(error.value)
    assert "expected shape (3,) with an integer or bool dtype" in str(error.value)


# -- exploration type --------------------------------------------------------------------------


class ForeignExploration(enum.Enum):
    """Like TorchRL's ExplorationType: another enum whose values are the same names."""

    RANDOM = "random"
    DETERMINISTIC = "deterministic"
    MODE = "mode"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (InteractionType.MEAN, InteractionType.MEAN),
        ("random", InteractionType.RANDOM),
        ("MODE", InteractionType.MODE),
        ("Deterministic", InteractionType.DETERMINISTIC),
        ("median", InteractionType.MEDIAN),
        ("mean", InteractionType.MEAN),
        (ForeignExploration.DETERMINISTIC, InteractionType.DETERMINISTIC),
        (ForeignExploration.MODE, InteractionType.MODE),
        (ForeignExploration.RANDOM, InteractionType.RANDOM),
    ],
)
def test_interaction_type_mapping(value: Any, expected: InteractionType) -> None:
    assert interaction_type(value) is expected


@pytest.mark.parametrize("value", ["greedy", "", 3, None])
def test_interaction_type_rejects_other_values(value: Any) -> None:
    with pytest.raises(ValueError) as error:
        interaction_type(value)
    message = str(error.value)
    assert f"exploration_type={value!r}" in message
    assert "['deterministic', 'mean', 'median', 'mode', 'random']" in message


@pytest.mark.parametrize("exploration", [InteractionType.MODE, InteractionType.RANDOM, InteractionType.MEAN])
def test_dry_step_runs_under_the_exploration_type(exploration: InteractionType) -> None:
    seen: list[InteractionType | None] = []

    def module_fn(obs: torch.Tensor) -> torch.Tensor:
        seen.append(current_interaction_type())
        return torch.zeros(obs.shape[0], dtype=torch.int64)

    def td_fn(obs: torch.Tensor) -> torch.Tensor:
        seen.append(current_interaction_type())
        return torch.zeros(obs.shape[0], dtype=torch.int64)

    make_policy(module_fn, BOX_OBS, spaces.Discrete(2), N, exploration_type=exploration)
    td_module = TensorDictModule(td_fn, in_keys=["observation"], out_keys=["action"])
    make_policy(td_module, BOX_OBS, spaces.Discrete(2), N, exploration_type=exploration)
    assert seen == [exploration, exploration]


def test_adapters_are_policy_adapters() -> None:
    module = TensorDictModule(
        lambda obs: obs.sum(-1).gt(0).long(), in_keys=["observation"], out_keys=["action"]
    )
    adapters = [
        RandomPolicy(spaces.Discrete(2), N),
        make_policy(SignPolicy(), BOX_OBS, spaces.Discrete(2), N),
        make_policy(module, BOX_OBS, spaces.Discrete(2), N),
    ]
    assert [type(a) for a in adapters] == [RandomPolicy, ModulePolicy, TensorDictPolicy]
    assert all(isinstance(a, PolicyAdapter) for a in adapters)


def test_dry_step_samples_observations_from_the_space() -> None:
    """The dry step feeds [N, *obs] tensors of the layout's dtypes, inside the space."""
    obs_space = spaces.Dict({"img": spaces.Box(0, 255, (2, 2), np.uint8), "n": spaces.Discrete(3)})
    inputs: list[TensorDictBase] = []

    def fn(td: TensorDictBase) -> TensorDictBase:
        inputs.append(td.clone())
        td.set("action", torch.zeros(td.batch_size[0], dtype=torch.int64))
        return td

    fn.in_keys = ["img", "n"]  # type: ignore[attr-defined]
    fn.out_keys = ["action"]  # type: ignore[attr-defined]
    make_policy(fn, obs_space, spaces.Discrete(2), N)
    (dry,) = inputs
    assert isinstance(dry, TensorDict)
    assert dry.batch_size == torch.Size([N])
    assert dry["img"].shape == (N, 2, 2) and dry["img"].dtype == torch.uint8
    assert dry["n"].shape == (N,) and dry["n"].dtype == torch.int64
    assert set(dry["n"].tolist()) <= {0, 1, 2}


def test_integer_actions_for_a_float_box_are_stored_as_floats() -> None:
    """As in TorchRL: an int64 action fits a float Box exactly; the batch holds it as float32."""
    from rlcollect import Collector

    ones = lambda obs: torch.ones(obs.shape[0], 1, dtype=torch.int64)  # noqa: E731
    with Collector("Pendulum-v1", ones, frames_per_batch=4, total_frames=4, seed=0) as collector:
        batch = next(iter(collector))
    assert batch["action"].dtype == torch.float32 and (batch["action"] == 1.0).all()


def test_whole_number_float_actions_are_stored_as_integers() -> None:
    """As in TorchRL: 1.0 for a Discrete action is the integer 1, stored exactly; 1.5 is refused,
    at the dry step and at any later step."""
    from rlcollect import Collector
    from rlcollect.data.checks import BadDataError

    ones = lambda obs: torch.ones(obs.shape[0])  # noqa: E731
    with Collector("CartPole-v1", ones, frames_per_batch=4, total_frames=4, seed=0) as collector:
        batch = next(iter(collector))
    assert batch["action"].dtype == torch.int64 and (batch["action"] == 1).all()
    with pytest.raises(ValueError, match="with an integer or bool dtype"):
        make_policy(lambda obs: torch.full((obs.shape[0],), 1.5), BOX_OBS, spaces.Discrete(2), N)
    calls = []

    def late(obs: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return torch.full((obs.shape[0],), 1.0 if len(calls) < 4 else 1.5)

    with pytest.raises(BadDataError, match="non-integer values"), \
            Collector("CartPole-v1", late, frames_per_batch=8, total_frames=8, seed=0) as collector:
        next(iter(collector))


def test_a_callable_whose_one_argument_is_a_tensordict_is_called_on_tensordicts() -> None:
    """TorchRL's rule: one argument named ``td`` / ``tensordict`` or annotated ``TensorDictBase``;
    in place or out of place (returning a new TensorDict with the action)."""
    from tensordict import TensorDictBase  # noqa: F401 (the annotation below names it)

    def in_place(td):  # type: ignore[no-untyped-def]
        return td.set("action", (td["observation"][:, 2] > 0).long())

    def out_of_place(tensordict):  # type: ignore[no-untyped-def]
        return tensordict.empty().set("action", (tensordict["observation"][:, 2] > 0).long())

    def annotated(data: TensorDictBase) -> TensorDictBase:
        return data.set("action", (data["observation"][:, 2] > 0).long())

    obs = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, -1.0, 0.0], [0.0, 0.0, 2.0, 0.0]])
    for policy in (in_place, out_of_place, annotated):
        adapter = make_policy(policy, BOX_OBS, spaces.Discrete(2), N)
        assert isinstance(adapter, TensorDictPolicy), policy.__name__
        (action,) = adapter.outputs({("observation",): obs})
        assert action.tolist() == [1, 0, 1]
    assert isinstance(make_policy(lambda obs: (obs[:, 2] > 0).long(), BOX_OBS, spaces.Discrete(2), N),
                      ModulePolicy)


def test_a_module_returning_a_tuple_writes_output1_and_on() -> None:
    """As TorchRL's collectors wrap it: ``forward(self, observation)`` returning a tuple writes
    the action and ``output1``, ``output2``, ...; one returning the action is called as it is."""
    def observation_actor(observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return actor_fn(observation)

    policy = make_policy(observation_actor, BOX_OBS, spaces.Discrete(2), N)
    assert isinstance(policy, TensorDictPolicy)
    assert [field.key for field in policy.extras] == [("output1",), ("output2",)]
    buffers = buffers_for(BOX_OBS, spaces.Discrete(2), policy.extras)
    fill_obs(buffers, seed=5)
    policy.bind(buffers)
    for t in range(T):
        policy.act(t)
    action, log_prob, hidden = actor_fn(buffers.obs_ext[("observation",)][:, :T])
    assert torch.equal(buffers.batch["action"], action)
    torch.testing.assert_close(buffers.batch["output1"], log_prob)
    torch.testing.assert_close(buffers.batch["output2"], hidden)

    def greedy(observation: torch.Tensor) -> torch.Tensor:
        return (observation.sum(-1) > 0).long()

    assert isinstance(make_policy(greedy, BOX_OBS, spaces.Discrete(2), N), ModulePolicy)


def test_a_callable_needing_arguments_the_observation_lacks_is_refused() -> None:
    def needs_more(observation: torch.Tensor, other_stuff: torch.Tensor) -> torch.Tensor:
        return observation.sum(-1).long()

    with pytest.raises(TypeError, match=r"Arguments to policy.forward .* requires \['observation', "
                                        r"'other_stuff'\], the observation has \['observation'\]"):
        make_policy(needs_more, BOX_OBS, spaces.Discrete(2), N)
