"""RayCollector across the nodes of a simulated Ray cluster (``ray.cluster_utils.Cluster``: a head
without CPUs and worker nodes of one CPU each, all on this machine), two actors, ``sync=False``.

One run meets every fault in turn: an actor SIGKILLed, an env that breaks and then a replacement
whose env fails to build, a node removed, a node that goes silent (its raylet and the actor
stopped); then, with one actor, a spare taking over and a node whose raylet is killed. After each
one the test checks what the user sees: the failed actor's replacement delivers again, on the
node the docs promise (its own node while that is alive, else one with room), the healthy actor's
batches kept coming meanwhile, and every restart was counted. At the end no frame is lost or
repeated within any env: each observation carries its env's step counter. The times measured are
printed (``-s``); the bounds asserted are loose (a loaded 2-core machine).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

ray = pytest.importorskip("ray", reason="RayCollector needs ray: pip install rlcollect[ray]")
from ray.cluster_utils import Cluster  # noqa: E402

from rlcollect.distributed import RayCollector  # noqa: E402
from tests.envs_for_tests import CountingEnv, EnvBroke  # noqa: E402

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head without CPUs and three worker nodes of one CPU each; Ray connected to it (the run's
    shared local Ray, if one runs, shut down first)."""
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(3):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def _take(path: Path) -> bool:
    """Whether ``path`` existed (it is removed): a fault asked for once."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


class FaultyEnv(CountingEnv):
    """A :class:`CountingEnv` whose faults are asked for through files in ``folder``, each taken
    once: ``break-<uid>`` makes env ``uid`` raise at its next step, ``fail-build`` makes the next
    env built raise."""

    def __init__(self, folder: str) -> None:
        if _take(Path(folder) / "fail-build"):
            raise OSError("the replacement's env could not be built")
        super().__init__(episode_length=50)
        self.folder = folder

    def step(self, action: int) -> Any:
        if _take(Path(self.folder) / f"break-{self.uid}"):
            raise EnvBroke(f"env {self.uid} broke")
        return super().step(action)


class Run:
    """Batches as they arrive: (time, actor, the env's [steps, 2] observations)."""

    def __init__(self, collector: RayCollector, caught: list[warnings.WarningMessage]) -> None:
        self.batches = iter(collector)
        self.caught = caught
        self.arrivals: list[tuple[float, int, torch.Tensor]] = []
        self.warned: list[tuple[float, str]] = []  # (when it was first seen, the warning)

    def until(self, done: Callable[[], bool], limit: float = 90.0) -> float:
        """Take batches until ``done()``; the seconds it took."""
        began = time.monotonic()
        while not done():
            assert time.monotonic() - began < limit, f"not done within {limit} s: {self.warned}"
            batch = next(self.batches)
            actor = int(batch["collector", "traj_ids"][0, 0]) % 2
            self.arrivals.append((time.monotonic(), actor, batch["observation"][0].clone()))
            self.warned += [(time.monotonic(), str(w.message)) for w in self.caught[len(self.warned):]]
        return time.monotonic() - began

    def uid(self, actor: int) -> int:
        """The env uid of ``actor``'s latest batch (a replacement's envs have new ones)."""
        return next(int(obs[0, 0]) for _, a, obs in reversed(self.arrivals) if a == actor)

    def replaced(self, actor: int) -> Callable[[], bool]:
        before = self.uid(actor)
        return lambda: self.uid(actor) != before

    def longest_gap(self, actor: int, since: float) -> tuple[float, int]:
        """The longest wait between ``actor``'s batches since ``since``, and how many came."""
        times = [since] + [t for t, a, _ in self.arrivals if a == actor and t > since]
        return max(b - a for a, b in itertools.pairwise(times)), len(times) - 1

    def warned_since(self, since: float, text: str) -> list[tuple[float, str]]:
        return [(t, message) for t, message in self.warned if t >= since and text in message]


def node_of(cluster: Cluster, node_id: str) -> Any:
    return next(node for node in cluster.worker_nodes if node.node_id == node_id)


def assert_steps_follow(arrivals: list[tuple[float, int, torch.Tensor]]) -> None:
    """Within every env, the frames delivered count up by one from its first step: no frame lost
    or repeated (a failed actor's envs end where its last delivered batch ends)."""
    obs = torch.cat([o for _, _, o in arrivals])
    for uid in obs[:, 0].unique():
        steps = obs[obs[:, 0] == uid, 1]
        assert steps[0] == 0 and bool((steps.diff() == 1).all()), (int(uid), steps.tolist())


@pytest.mark.timeout(360)
def test_faults_across_the_nodes_of_a_cluster(cluster: Cluster, tmp_path: Path) -> None:
    env = functools.partial(FaultyEnv, folder=str(tmp_path))
    figures: dict[str, str] = {}
    with RayCollector(env, None, num_collectors=2, frames_per_batch=20, sync=False, seed=0,
                      max_actor_restarts=10) as collector, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = Run(collector, caught)
        run.until(lambda: {a for _, a, _ in run.arrivals} == {0, 1})
        homes = collector.actor_nodes
        assert len(set(homes)) == 2

        # an actor's process SIGKILLed: its replacement starts on its own node
        began, replaced = time.monotonic(), run.replaced(0)
        os.kill(collector.actor_pids[0], signal.SIGKILL)
        figures["actor SIGKILLed: back after"] = f"{run.until(replaced):.2f} s"
        figures["  healthy actor's longest gap, batches"] = str(run.longest_gap(1, began))
        assert collector.actor_nodes[0] == homes[0] and collector.stats().workers[0].restarts == 1

        # an env breaks, then the replacement's env fails to build: two restarts, one after the other
        began, replaced = time.monotonic(), run.replaced(1)
        (tmp_path / "fail-build").touch()
        (tmp_path / f"break-{run.uid(1)}").touch()
        figures["env broke, replacement failed to build: back after"] = f"{run.until(replaced):.2f} s"
        figures["  healthy actor's longest gap, batches"] += f"; {run.longest_gap(0, began)}"
        assert collector.stats().workers[1].restarts == 2 and collector.actor_nodes[1] == homes[1]
        assert "the replacement's env could not be built" in run.warned_since(began, "restart 2 of")[0][1]

        # actor 1's node removed: its replacement starts on the node with room
        spare = next(node.node_id for node in cluster.worker_nodes if node.node_id not in homes)
        began, replaced = time.monotonic(), run.replaced(1)
        cluster.remove_node(node_of(cluster, homes[1]))
        figures["node removed: back after"] = f"{run.until(replaced):.2f} s"
        figures["  healthy actor's longest gap, batches"] += f"; {run.longest_gap(0, began)}"
        assert collector.actor_nodes[1] == spare and collector.stats().workers[1].restarts == 3
        # placed at once on the node with room, where it holds its CPU while it starts: it never
        # waited for resources, whatever the cluster's free CPUs read meanwhile
        assert not run.warned_since(began, "waits for resources"), run.warned_since(began, "")

        # actor 0's node goes silent (its raylet and the actor stop, nothing dies): found by the
        # health check (default health_timeout=10 s), named, replaced on a node that joined
        joined = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        silent = node_of(cluster, homes[0])
        raylet = silent.all_processes["raylet"][0].process.pid
        began, replaced = time.monotonic(), run.replaced(0)
        for pid in (raylet, collector.actor_pids[0]):
            os.kill(pid, signal.SIGSTOP)
        try:
            back = run.until(replaced)
        finally:
            os.kill(raylet, signal.SIGCONT)
        (found, message), = run.warned_since(began, "health check")
        figures["node silent: found after"] = f"{found - began:.2f} s"
        figures["  back after"] = f"{back:.2f} s"
        figures["  healthy actor's longest gap, batches"] += f"; {run.longest_gap(1, began)}"
        assert "actor 0 failed (its Ray actor answered no health check for health_timeout=10 s" in message
        assert homes[0][:8] in message and found - began < 15
        assert collector.actor_nodes[0] == joined.node_id and collector.stats().restarts == 5
    print("\n".join(f"{what}: {value}" for what, value in figures.items()))
    assert_steps_follow(run.arrivals)


@contextlib.contextmanager
def one_actor(cluster: Cluster, tmp_path: Path, nodes: int,
              **kwargs: Any) -> Iterator[tuple[RayCollector, Run]]:
    """One actor collecting (its first batch in), ``nodes`` more worker nodes of one CPU first
    (room, whatever the tests before left)."""
    for _ in range(nodes):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    env = functools.partial(FaultyEnv, folder=str(tmp_path))
    with RayCollector(env, None, num_collectors=1, frames_per_batch=20, sync=False, seed=0,
                      **kwargs) as collector, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = Run(collector, caught)
        run.until(lambda: bool(run.arrivals))
        yield collector, run


@pytest.mark.timeout(200)
def test_a_spare_actor_replaces_one_lost_with_its_node(cluster: Cluster, tmp_path: Path) -> None:
    """spare_actors=1: when the actor's node is removed, the spare (up, on another node) is its
    replacement at once: no interpreter to start, no imports."""
    with one_actor(cluster, tmp_path, 2, spare_actors=1) as (collector, run):
        spares = collector._pool.transport._spares  # type: ignore[attr-defined]
        run.until(lambda: bool(spares) and bool(ray.wait([spares[0][1]], timeout=0)[0]))
        spare = spares[0][0]
        replaced = run.replaced(0)
        cluster.remove_node(node_of(cluster, collector.actor_nodes[0]))
        back = run.until(replaced)
        assert collector.actors[0] is spare and collector.stats().restarts == 1
    print(f"node removed, the spare took over: back after {back:.2f} s")
    assert_steps_follow(run.arrivals)


@pytest.mark.timeout(200)
def test_a_node_whose_raylet_dies_is_found_and_its_actor_replaced(cluster: Cluster, tmp_path: Path) -> None:
    """A node's raylet SIGKILLed under the actor (the node dies with no warning): the actor, whose
    process Ray leaves running until it declares the node dead, keeps delivering meanwhile; then
    its failure is named with its node and it is replaced on a node with room. Collection never
    waits longer than the health-check bound, and no frame is lost or repeated."""
    with one_actor(cluster, tmp_path, 1, health_timeout=10.0) as (collector, run):
        home = node_of(cluster, collector.actor_nodes[0])
        raylet = home.all_processes["raylet"][0].process.pid
        began, replaced = time.monotonic(), run.replaced(0)
        os.kill(raylet, signal.SIGKILL)
        back = run.until(replaced, limit=60.0)
        (found, message), = run.warned_since(began, "actor 0 failed")
        gap, batches = run.longest_gap(0, began)
        assert collector.actor_nodes[0] != home.node_id and collector.stats().restarts == 1
    print(f"raylet killed: failure named after {found - began:.2f} s, back after {back:.2f} s, "
          f"longest gap {gap:.2f} s ({batches} batches)")
    assert home.node_id[:8] in message and "lost from the cluster" in message
    assert gap < 10.0
    assert_steps_follow(run.arrivals)
    cluster.remove_node(home, allow_graceful=False)
