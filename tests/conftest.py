"""Fixtures several test packages share, and the rules of running tests side by side.

The default run uses pytest-xdist (``-n auto``: one worker per core, at most four): most cases wait
on child processes they start. The runs apart (``-m ray`` and the like) run one case at a time. A
case marked ``alone`` runs while no other case runs: it looks at what the whole machine holds
(``/dev/shm``) or times work against the clock, which another worker's case would change.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlcollect.workers.transport import PRELOAD
from tests.preloaded import Preloaded

# TorchRL's vendored collector tests run apart (python -m tests.torchrl_suite.run), not in the default run
collect_ignore = [] if os.environ.get("RLCOLLECT_TORCHRL_SUITE") else ["torchrl_suite"]

#: pytest-xdist workers at most for ``-n auto``: more would only slow the cases that start processes
MAX_WORKERS = 4

#: The markers of the runs apart, which run one case at a time: a shared Ray cluster, faults timed
#: against health checks, training that uses every core, the wheel build
APART = ("ray", "reliability", "learning", "packaging", "soak")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per core, at most :data:`MAX_WORKERS`; none (one case at a time, in
    this process) for a run apart (``-m ray`` and the like)."""
    expression = config.option.markexpr or ""
    if any(re.search(rf"(?<!not )\b{marker}\b", expression) for marker in APART):
        return 0
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """One local Ray (2 CPUs) for the test run: the first module that asks starts it, the modules
    after it find it running (a Ray start costs about 4.5 s here), and the run's end shuts it down.
    A module that needs a cluster of its own (``tests/distributed/test_cluster.py``) shuts it down
    first, and the next module that asks starts it again. The collectors use it and leave it
    running; each test stops the actors it started."""
    ray = pytest.importorskip("ray", reason="RayCollector needs ray: pip install rlcollect[ray]")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield


@pytest.fixture(scope="session")
def preloaded() -> Iterator[Preloaded]:
    """Runs scripts as a new interpreter would, forked from one that has imported torch, tensordict,
    Gymnasium and rlcollect (:mod:`tests.preloaded`): one helper per test process."""
    with Preloaded() as python:
        yield python


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The shared local Ray (:func:`ray_session`), if one runs, ends with the run."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests on a local Ray (the ``ray_session`` fixture) carry the ``ray`` marker: they run apart."""
    for item in items:
        if "ray_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(autouse=True)
def _turn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under pytest-xdist, a case marked ``alone`` waits until no other case runs, and the others
    wait while it runs: a shared lock for every case, an exclusive one for ``alone`` cases, taken
    through a gate so that an ``alone`` case waiting is not overtaken forever."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    folder = Path(tmp_path_factory.getbasetemp()).parent  # the same for every worker of the run
    alone = request.node.get_closest_marker("alone") is not None
    with open(folder / "turn.gate", "a") as gate, open(folder / "turn.room", "a") as room:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)


#: What TorchRL's own processes find imported (the forkserver below): what rlcollect's workers
#: preload, and TorchRL
TORCHRL_PRELOAD = [*PRELOAD, "torchrl"]


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread in every test process (each xdist worker too), as the README tells a
    script that collects to set: the in-process collectors run beside the other workers' cases,
    and they warn once at torch's default (``rlcollect.ThreadsWarning``).

    And the default start method is ``forkserver``: TorchRL's own processes (its ``ParallelEnv``'s
    and collectors' workers, which the interop tests run beside rlcollect's) start by the default
    method, ``spawn`` unless set, and each imported torch, tensordict and TorchRL again (5 s of CPU).
    rlcollect's collectors choose theirs themselves (``start_method``) and do not read it. TorchRL's
    own suite (``tests/torchrl_suite``) runs as TorchRL left it."""
    import multiprocessing

    import torch

    torch.set_num_threads(1)
    unset = multiprocessing.get_start_method(allow_none=True) is None
    if unset and not os.environ.get("RLCOLLECT_TORCHRL_SUITE"):
        multiprocessing.set_start_method("forkserver")
        multiprocessing.set_forkserver_preload(TORCHRL_PRELOAD)
