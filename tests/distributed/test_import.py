"""Without Ray, the distributed layer still imports, and building a RayCollector names the extra."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

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
        ({"remote_config": [{"num_cpus": 1}, {"max_task_retries": 1}]}, ValueError, "use max_actor_restarts"),
        ({"remote_config": [{"num_cpus": 1}] * 3}, ValueError,
         "remote_config lists 3 dicts for num_collectors=2: give one per actor, or one dict for all"),
        ({"remote_config": "SPREAD"}, TypeError, "remote_config must be a dict, or a list of dicts"),
        ({"health_timeout": -1}, ValueError, "health_timeout must be a positive number of seconds, got -1"),
        ({"spare_actors": -1}, ValueError, "spare_actors must be an int >= 0"),
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


STALE_POINTER = """
from rlcollect import RayCollector
with RayCollector("CartPole-v1", None, num_collectors=1, frames_per_batch=8, total_frames=8) as collector:
    print([batch.numel() for batch in collector])
"""


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_a_stale_cluster_pointer_does_not_stop_a_local_ray() -> None:
    """A crashed run leaves Ray's pointer to its cluster behind; RayCollector starts its own local Ray
    (with num_cpus) all the same."""
    pytest.importorskip("ray", reason="RayCollector needs ray: pip install rlcollect[ray]")
    tmp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths must fit
    (tmp / "ray").mkdir()
    (tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:6399")  # nothing listens there
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    try:
        done = subprocess.run([sys.executable, "-c", STALE_POINTER], env={**env, "TMPDIR": str(tmp)},
                              capture_output=True, text=True, timeout=100)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert done.returncode == 0 and done.stdout.strip() == "[8]", done.stderr[-2000:]
