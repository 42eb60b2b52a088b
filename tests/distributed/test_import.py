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
import os
from rlcollect import RayCollector
from ray._private.authentication.authentication_utils import is_token_auth_enabled
with RayCollector("CartPole-v1", None, num_collectors=1, frames_per_batch=8, total_frames=8) as collector:
    print([batch.numel() for batch in collector], os.environ.get("RAY_AUTH_MODE"), is_token_auth_enabled())
"""


def _run_local_ray(script: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh process whose Ray temp folder is new, and holds a stale pointer to
    a cluster that no longer runs (a crashed run leaves one)."""
    tmp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths must fit
    (tmp / "ray").mkdir()
    (tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:6399")  # nothing listens there
    env = {key: value for key, value in os.environ.items() if key not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    try:
        return subprocess.run([sys.executable, "-c", script], env={**env, "TMPDIR": str(tmp), **env_vars},
                              capture_output=True, text=True, timeout=100)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_a_stale_cluster_pointer_does_not_stop_a_local_ray() -> None:
    """A crashed run leaves Ray's pointer to its cluster behind; RayCollector starts its own local Ray
    (with num_cpus) all the same."""
    pytest.importorskip("ray", reason="RayCollector needs ray: pip install rlcollect[ray]")
    done = _run_local_ray(STALE_POINTER)
    assert done.returncode == 0 and done.stdout.split()[0] == "[8]", done.stderr[-2000:]
    # the local cluster it started asks every client for Ray's token (Ray 2.52+), unasked
    assert done.stdout.split()[1:] == ["token", "True"], done.stdout
    assert "without authentication" not in done.stderr


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_a_local_ray_without_authentication_is_said() -> None:
    """RAY_AUTH_MODE=disabled is the user's choice, kept; the collector says what it exposes."""
    pytest.importorskip("ray", reason="RayCollector needs ray: pip install rlcollect[ray]")
    done = _run_local_ray(STALE_POINTER, RAY_AUTH_MODE="disabled")
    assert done.returncode == 0 and done.stdout.split() == ["[8]", "disabled", "False"], done.stderr[-2000:]
    assert "RuntimeWarning: RayCollector starts a local Ray cluster without authentication " \
           "(RAY_AUTH_MODE=disabled)" in done.stderr, done.stderr[-2000:]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("mode", "has", "said"), [
    ("token", (), None),
    (None, ("setup", "default"), None),  # Ray 2.59+: a local ray.init() asks for tokens itself
    (None, ("setup",), "this Ray, older than 2.59, turns it on only with RAY_AUTH_MODE=token"),
    (None, (), "this Ray, older than 2.52, has no token authentication"),
    ("disabled", ("setup", "default"), "RAY_AUTH_MODE=disabled"),
])
def test_a_local_ray_without_tokens_is_named_for_every_ray(
    monkeypatch: pytest.MonkeyPatch, mode: str | None, has: tuple[str, ...], said: str | None
) -> None:
    """What each Ray would do for a local cluster, without starting one (the case above starts it)."""
    import warnings

    import rlcollect.workers.ray_local as ray_local

    if mode is None:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", mode)
    monkeypatch.setattr(ray_local, "_ray_has",
                        lambda module, name="": ("default" if name else "setup") in has)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ray_local.check_local_ray_authentication()
    messages = [str(warning.message) for warning in caught]
    if said is None:
        assert messages == []
    else:
        assert len(messages) == 1 and f"without authentication ({said})" in messages[0], messages
        assert caught[0].category is RuntimeWarning and "RAY_AUTH_MODE=token" in messages[0]


#: Ray 2.60's texts of a dead actor (recorded: an actor SIGKILLed, one ray.kill'ed, one whose
#: constructor raised)
KILLED = ("The actor died unexpectedly before finishing this task.\n\tclass_name: A\n"
          "\tactor_id: a1e5\n\tpid: 24041\n\tip: 192.0.2.2\n"
          "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
          "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of "
          "file. Some common causes include: (1) the process was killed by the OOM killer, (2) ...")
RAY_KILLED = ("The actor died unexpectedly before finishing this task.\n\tclass_name: A\n"
              "\tpid: 24398\nThe actor is dead because its worker process has died. Worker exit "
              "type: INTENDED_SYSTEM_EXIT Worker exit detail: Worker exits because the actor is "
              "killed. The actor is dead because it was killed by `ray.kill`.")
INIT_RAISED = ("The actor died because of an error raised in its creation task, "
               "\x1b[36mray::B.__init__()\x1b[39m (pid=24397, ip=192.0.2.2)\n"
               '  File "/tmp/x.py", line 11, in __init__\n    raise ValueError("boom")\n'
               "ValueError: boom")


@pytest.mark.parametrize(("text", "said"), [
    (KILLED, "The actor is dead because its worker process has died. Worker exit type: "
             "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error "
             "code 2. End of file."),
    (RAY_KILLED, "The actor is dead because it was killed by `ray.kill`."),
    (INIT_RAISED, "ValueError: boom"),
])
def test_why_an_actor_died_is_said_in_one_line(text: str, said: str) -> None:
    """An actor's death names Ray's reason (it used to show Ray's first line only, the same for
    every death), on one line, without Ray's list of common causes."""
    from rlcollect.workers.ray_transport import why_died

    line = why_died(text)
    assert said in line and "\n" not in line and "Some common causes" not in line, line
    assert line.startswith(text.split("\n")[0].replace("\x1b[36m", "").replace("\x1b[39m", "")[:40])
