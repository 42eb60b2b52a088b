"""Spaces to batch layout: the keys, per-frame shapes and dtypes of every observation and action field."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlcollect.data.layout import (
    RESERVED_KEYS,
    BatchLayout,
    Field,
    action_fields,
    get_nested,
    observation_fields,
    torch_dtype,
)


def as_tuples(fields: list[Field]) -> list[tuple[tuple[str, ...], tuple[int, ...], torch.dtype]]:
    return [(f.key, f.shape, f.dtype) for f in fields]


@pytest.mark.parametrize(
    ("space", "shape", "dtype"),
    [
        (spaces.Box(-1.0, 1.0, (3,), np.float32), (3,), torch.float32),
        (spaces.Box(-1.0, 1.0, (2, 5), np.float64), (2, 5), torch.float64),
        (spaces.Box(0, 255, (4, 6, 3), np.uint8), (4, 6, 3), torch.uint8),
        (spaces.Box(-1.0, 1.0, (), np.float32), (), torch.float32),
        (spaces.Discrete(7), (), torch.int64),
        (spaces.Discrete(7, start=-3), (), torch.int64),
        (spaces.Discrete(7, dtype=np.int32), (), torch.int64),  # ids are always int64
        (spaces.MultiDiscrete([3, 4]), (2,), torch.int64),
        (spaces.MultiDiscrete([[2, 3, 4], [5, 6, 7]]), (2, 3), torch.int64),
        (spaces.MultiDiscrete([3, 4], dtype=np.int32), (2,), torch.int32),
        (spaces.MultiBinary(5), (5,), torch.int8),
        (spaces.MultiBinary([2, 3]), (2, 3), torch.int8),
    ],
)
def test_leaf_observation_space_is_one_observation_field(
    space: spaces.Space, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    assert as_tuples(observation_fields(space)) == [(("observation",), shape, dtype)]


@pytest.mark.parametrize(
    ("space", "shape", "dtype"),
    [
        (spaces.Box(-2.0, 2.0, (1,), np.float32), (1,), torch.float32),
        (spaces.Discrete(2), (), torch.int64),
        (spaces.MultiDiscrete([2, 2, 3]), (3,), torch.int64),
        (spaces.MultiBinary(4), (4,), torch.int8),
    ],
)
def test_action_space_is_one_action_field(
    space: spaces.Space, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    assert as_tuples(action_fields(space)) == [(("action",), shape, dtype)]


def test_dict_observation_has_one_field_per_leaf_in_sorted_key_order() -> None:
    space = spaces.Dict(
        {
            "pos": spaces.Box(-1.0, 1.0, (2,), np.float32),
            "id": spaces.Discrete(4),
            "image": spaces.Box(0, 255, (8, 8, 3), np.uint8),
            "buttons": spaces.MultiBinary(3),
            "mode": spaces.MultiDiscrete([2, 5]),
        }
    )
    assert as_tuples(observation_fields(space)) == [
        (("buttons",), (3,), torch.int8),
        (("id",), (), torch.int64),
        (("image",), (8, 8, 3), torch.uint8),
        (("mode",), (2,), torch.int64),
        (("pos",), (2,), torch.float32),
    ]


def test_nested_dict_observation_gives_nested_keys() -> None:
    space = spaces.Dict(
        {
            "agent": spaces.Dict({"vel": spaces.Box(-1.0, 1.0, (3,), np.float64), "hp": spaces.Discrete(10)}),
            "goal": spaces.Box(-1.0, 1.0, (2,), np.float32),
        }
    )
    assert as_tuples(observation_fields(space)) == [
        (("agent", "hp"), (), torch.int64),
        (("agent", "vel"), (3,), torch.float64),
        (("goal",), (2,), torch.float32),
    ]


def test_dict_keys_keep_a_user_order_given_as_a_list_of_pairs() -> None:
    space = spaces.Dict([("z", spaces.Discrete(2)), ("a", spaces.Discrete(3))])
    assert [f.key for f in observation_fields(space)] == [("z",), ("a",)]


@pytest.mark.parametrize("name", sorted(RESERVED_KEYS))
def test_reserved_top_level_dict_key_is_rejected(name: str) -> None:
    space = spaces.Dict({name: spaces.Discrete(2), "ok": spaces.Discrete(2)})
    with pytest.raises(ValueError, match=f"'{name}' clashes with a batch key"):
        observation_fields(space)


def test_reserved_name_below_the_top_level_is_allowed() -> None:
    space = spaces.Dict({"inner": spaces.Dict({"next": spaces.Discrete(2), "action": spaces.Discrete(3)})})
    assert as_tuples(observation_fields(space)) == [
        (("inner", "action"), (), torch.int64),
        (("inner", "next"), (), torch.int64),
    ]


def test_reserved_keys_are_the_batch_keys() -> None:
    assert frozenset({"action", "next", "collector", "policy_version"}) == RESERVED_KEYS


def test_unsupported_observation_space_names_the_key() -> None:
    space = spaces.Dict({"a": spaces.Dict({"b": spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2)))})})
    with pytest.raises(TypeError, match=r"at key a\.b is not supported"):
        observation_fields(space)
    with pytest.raises(TypeError, match="at key observation is not supported"):
        observation_fields(spaces.Text(5))


def test_a_tuple_space_error_says_how_to_collect_it() -> None:
    import gymnasium as gym

    from rlcollect import Collector

    with pytest.raises(TypeError, match="FlattenObservation") as error:
        Collector("Blackjack-v1", frames_per_batch=8)
    assert "space Tuple(Discrete(32), Discrete(11), Discrete(2)) at key observation" in str(error.value)
    with pytest.raises(TypeError) as text_error:
        observation_fields(spaces.Text(5))
    assert "FlattenObservation" not in str(text_error.value)  # the hint is for a Tuple only
    # the way it names works: Blackjack's three discrete entries, one-hot in a Box of 32 + 11 + 2
    flat = lambda: gym.wrappers.FlattenObservation(gym.make("Blackjack-v1"))  # noqa: E731
    with Collector(flat, frames_per_batch=8, total_frames=8, seed=0) as collector:
        batch = collector.next()
    assert batch["observation"].shape == (1, 8, 45)
    assert torch.equal(batch["observation"].sum(-1), torch.full((1, 8), 3, dtype=batch["observation"].dtype))


def test_dict_or_unsupported_action_space_is_rejected() -> None:
    with pytest.raises(TypeError, match="is a Dict"):
        action_fields(spaces.Dict({"a": spaces.Discrete(2)}))
    with pytest.raises(TypeError, match="is a Tuple: .*TransformAction"):
        action_fields(spaces.Tuple((spaces.Discrete(2),)))
    with pytest.raises(TypeError, match="at key action is not supported"):
        action_fields(spaces.Text(5))


@pytest.mark.parametrize(
    ("np_dtype", "expected"),
    [
        (np.float32, torch.float32),
        (np.float64, torch.float64),
        (np.float16, torch.float16),
        (np.uint8, torch.uint8),
        (np.int8, torch.int8),
        (np.int16, torch.int16),
        (np.int32, torch.int32),
        (np.int64, torch.int64),
        (np.bool_, torch.bool),
        ("float32", torch.float32),
        (np.dtype("int64"), torch.int64),
    ],
)
def test_torch_dtype_matches_numpy_dtype(np_dtype: object, expected: torch.dtype) -> None:
    assert torch_dtype(np_dtype) is expected


def test_get_nested_reads_mappings_and_attributes() -> None:
    obs = {"agent": {"pos": np.array([1.0, 2.0]), "hp": 3}, "goal": 7}
    assert get_nested(obs, ("goal",)) == 7
    assert get_nested(obs, ("agent", "hp")) == 3
    np.testing.assert_array_equal(get_nested(obs, ("agent", "pos")), [1.0, 2.0])
    assert get_nested(obs, ()) is obs
    holder = SimpleNamespace(agent=SimpleNamespace(hp=5))
    assert get_nested(holder, ("agent", "hp")) == 5


def test_field_str_and_layout_defaults() -> None:
    field = Field(("agent", "pos"), (2,), torch.float32)
    assert str(field) == "agent.pos: (2,) torch.float32"
    layout = BatchLayout((field,), Field(("action",), (), torch.int64))
    assert layout.extras == ()
    assert layout.dict_observations is False
    assert layout.observations == (field,)
    assert layout.action == Field(("action",), (), torch.int64)
    with pytest.raises(AttributeError):  # frozen
        layout.extras = (field,)  # type: ignore[misc]
