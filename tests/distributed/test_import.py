"""Without Ray, the distributed layer still imports, and building a RayCollector names the extra."""

from __future__ import annotations

import sys

import pytest

from rlcollect.distributed import RayCollector


@pytest.mark.timeout(30)
def test_missing_ray_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # "import ray" now raises ImportError
    with pytest.raises(ImportError, match=r"pip install rlcollect\[ray\]"):
        RayCollector("CartPole-v1", num_collectors=1, frames_per_batch=8)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_collectors": 0}, ValueError, "num_collectors must be a positive int"),
        ({"frames_per_batch": -1}, ValueError, "frames_per_batch must be a positive int"),
        ({"collector_class": dict}, TypeError, "collector_class must be Collector"),
        ({"collector_kwargs": {"seed": 1}}, ValueError, r"collector_kwargs must not set \['seed'\]"),
        ({"remote_config": {"max_restarts": 5}}, ValueError, "use max_actor_restarts"),
        ({"max_actor_restarts": -1}, ValueError, "max_actor_restarts must be an int >= 0"),
        ({"sync": False, "prefetch": True}, ValueError, "prefetch=True applies to synchronous"),
        ({"replay_buffer": object()}, TypeError, "replay_buffer must have an extend"),
        ({"collector_kwargs": {"num_envs": (i for i in range(2))}}, TypeError, "num_envs must be a positive"),
        ({"policy": lambda obs: obs, "collector_kwargs": {"models": {"m": (i for i in range(2))}}}, TypeError,
         r"models\['m'\] must be an nn.Module, got generator"),
    ],
)
def test_bad_arguments_are_refused_before_ray_starts(
    kwargs: dict[str, object], error: type[Exception], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # the checks come first: Ray is never needed
    arguments: dict[str, object] = {"num_collectors": 2, "frames_per_batch": 8, **kwargs}
    with pytest.raises(error, match=match):
        RayCollector("CartPole-v1", **arguments)  # type: ignore[arg-type]
