"""DistributedWeightSyncScheme: a learner process broadcasts weights to receivers (gloo). The
processes start from rlcollect's forkserver (fresh processes, as with spawn, without importing torch
again for each)."""

from __future__ import annotations

import pickle
import queue
import socket
import threading
import time
from typing import Any

import pytest
import torch

from rlcollect.weights.distributed import DistributedWeightSyncScheme
from rlcollect.workers.transport import start_context

CTX = start_context("forkserver")
TIMEOUT = 30.0  # the schemes' own bound on each step


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def url(port: int) -> str:
    return f"tcp://127.0.0.1:{port}"


def linear(value: float, in_features: int = 4) -> torch.nn.Linear:
    module = torch.nn.Linear(in_features, 2)
    with torch.no_grad():
        module.weight.fill_(value)
        module.bias.fill_(value)
    return module


def values(module: torch.nn.Module) -> list[float]:
    """Every weight of ``module``, flattened (weight then bias)."""
    return [v for p in module.parameters() for v in p.detach().flatten().tolist()]


def constant(value: float, in_features: int = 4) -> list[float]:
    return [value] * (2 * in_features + 2)


# -- process targets (module level: pickled by name) ------------------------------------------------
def learner(port: int, world_size: int, out: Any) -> None:
    """Rank 0: initial weights 0.5, then versions 1, 2, 3 filled with 1.0, 2.0, 3.0 (three forms)."""
    torch.set_num_threads(1)
    try:
        policy = linear(0.5)
        scheme = DistributedWeightSyncScheme(url(port), world_size=world_size, rank=0, timeout=TIMEOUT)
        scheme.init_on_sender(model_id="policy", model=policy)
        scheme.connect()
        with torch.no_grad():
            policy.weight.fill_(1.0)
            policy.bias.fill_(1.0)
        scheme.send()  # the model itself
        scheme.send(weights=linear(2.0))  # another module
        scheme.send(weights={"weight": torch.full((2, 4), 3.0), "bias": torch.full((2,), 3.0)})  # a dict
        out.put(("sent", scheme.version))
        scheme.shutdown()
        scheme.shutdown()  # idempotent
        out.put(("closed", scheme.version))
    except Exception as exc:  # reported to the test
        out.put(("error", repr(exc)))


def receiver(port: int, world_size: int, scheme: DistributedWeightSyncScheme, out: Any) -> None:
    """A receiver rank: report the initial weights, the final version and the final weights."""
    torch.set_num_threads(1)
    try:
        module = linear(-1.0)
        scheme.init_on_receiver(model_id="policy", model=module)
        scheme.connect()
        initial = values(module)
        deadline = time.monotonic() + 60
        while scheme.version < 3 and time.monotonic() < deadline:
            scheme.receive(timeout=0.5)
        out.put((scheme.rank, initial, scheme.version, values(module)))
        scheme.shutdown()
    except Exception as exc:
        out.put((scheme.rank, "error", repr(exc), None))


def learner_expecting_a_departure(port: int, go: Any, out: Any) -> None:
    """Rank 0: connect, wait for the receiver to shut down, then try to send."""
    torch.set_num_threads(1)
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=0, timeout=TIMEOUT)
    try:
        scheme.init_on_sender(model_id="policy", model=linear(0.5))
        scheme.connect()
        go.get(timeout=60)
        started = time.monotonic()
        try:
            scheme.send()
            out.put(("sent", None))
        except RuntimeError as exc:
            out.put(("refused", str(exc), time.monotonic() - started))
    except Exception as exc:
        out.put(("error", repr(exc)))
    finally:
        scheme.shutdown()


def learner_with_another_model(port: int, out: Any) -> None:
    torch.set_num_threads(1)
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=0, timeout=TIMEOUT)
    try:
        scheme.init_on_sender(model_id="policy", model=linear(0.5, in_features=3))
        scheme.connect()
        out.put(("connected", None))
    except Exception as exc:
        out.put((type(exc).__name__, str(exc)))
    finally:
        scheme.shutdown()


def get(out: Any, timeout: float = 60.0) -> Any:
    try:
        return out.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"no report from the child process within {timeout}s")


def finish(*procs: Any) -> None:
    for proc in procs:
        proc.join(timeout=20)
        if proc.is_alive():
            proc.kill()
            proc.join()
            pytest.fail(f"{proc.name} did not exit")
        assert proc.exitcode == 0, f"{proc.name} exited with {proc.exitcode}"


def receiving_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("DistributedWeightSyncScheme")]


# -- tests --------------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_receiver_gets_the_initial_weights_then_the_newest_version() -> None:
    port, out = free_port(), CTX.Queue()
    proc = CTX.Process(target=learner, args=(port, 2, out), name="learner")
    proc.start()
    module = linear(-1.0)
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=1, timeout=TIMEOUT)
    try:
        scheme.init_on_receiver(model_id="policy", model=module)
        with pytest.raises(RuntimeError, match=r"receive\(\) needs connect\(\) first"):
            scheme.receive()
        scheme.connect()
        # the initial synchronisation applied the learner's initial weights (version 0)
        assert scheme.synchronized_on_receiver and scheme.version == 0
        assert values(module) == constant(0.5)
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while scheme.version < 3 and time.monotonic() < deadline:
            got = scheme.receive(timeout=1.0)
            if got is not None:
                seen.append(scheme.version)
                assert got["weight"].flatten().tolist() == values(module)[:8]  # what was applied
        assert scheme.version == 3 and values(module) == constant(3.0)
        assert seen == sorted(set(seen)) and seen[-1] == 3  # newer and newer (a slow reader may skip some)
        assert scheme.receive() is None  # nothing newer
        assert get(out) == ("sent", 3)
        assert get(out) == ("closed", 3)
        finish(proc)
    finally:
        scheme.shutdown()
        if proc.is_alive():
            proc.kill()


@pytest.mark.timeout(120)
def test_two_receivers_get_the_same_final_weights() -> None:
    port, out = free_port(), CTX.Queue()
    procs = [
        CTX.Process(target=receiver, name=f"receiver-{rank}",
                    args=(port, 3, DistributedWeightSyncScheme(url(port), world_size=3, rank=rank,
                                                               timeout=TIMEOUT), out))
        for rank in (1, 2)
    ]  # not yet initialised schemes travel to the started processes
    for proc in procs:
        proc.start()
    policy = linear(0.5)
    scheme = DistributedWeightSyncScheme(url(port), world_size=3, rank=0, timeout=TIMEOUT)
    try:
        scheme.init_on_sender(model_id="policy", model=policy)
        for value in (1.0, 2.0, 3.0):
            with torch.no_grad():
                policy.weight.fill_(value)
                policy.bias.fill_(value)
            scheme.send()  # the first one connects (and broadcasts version 0: already 1.0)
        assert scheme.version == 3
        assert not torch.distributed.is_initialized()  # a private group: the default one is untouched
        reports = sorted(get(out) for _ in procs)
        assert [r[0] for r in reports] == [1, 2], reports
        for _, initial, version, final in reports:
            assert initial == constant(1.0)  # the weights when the learner connected
            assert version == 3 and final == constant(3.0)
    finally:
        scheme.shutdown()
        for proc in procs:
            if proc.is_alive():
                proc.join(timeout=20)
    finish(*procs)


def test_bad_arguments_name_themselves() -> None:
    bad: list[tuple[dict[str, Any], str]] = [
        ({"init_method": "127.0.0.1:29500"}, "init_method='127.0.0.1:29500'"),
        ({"init_method": "env://"}, "init_method='env://'"),
        ({"init_method": "tcp://127.0.0.1:port"}, "init_method="),
        ({"init_method": "tcp://127.0.0.1"}, "init_method="),
        ({"world_size": 1}, "world_size=1"),
        ({"world_size": 2.0}, "world_size=2.0"),
        ({"rank": 2}, r"rank=2: an int in \[0, world_size=2\)"),
        ({"rank": -1}, "rank=-1"),
        ({"backend": "mpi"}, r"backend='mpi' is not one of \('gloo', 'nccl'\)"),
        ({"timeout": 0}, "timeout=0"),
        ({"timeout": -1.0}, "timeout=-1.0"),
        ({"strategy": "pickle"}, "strategy='pickle'"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            DistributedWeightSyncScheme(**kwargs)


def test_misuse_is_refused_before_anything_moves() -> None:
    port = free_port()
    sender = DistributedWeightSyncScheme(url(port), rank=0)
    assert pickle.loads(pickle.dumps(sender)).rank == 0  # not yet initialised: picklable
    sender.init_on_sender(model_id="policy", model=linear(0.5))
    with pytest.raises(ValueError, match=r"worker_ids=\[0\].*broadcasts to every receiver"):
        sender.send(worker_ids=[0])
    with pytest.raises(ValueError, match=r"'weight' has shape \(2, 3\), the module's has \(2, 4\)"):
        sender.send(weights=linear(1.0, in_features=3))
    with pytest.raises(KeyError, match=r"lack \['bias'\]"):
        sender.send(weights={"weight": torch.zeros(2, 4)})
    assert sender.version == 0 and sender._store is None  # nothing connected, nothing sent
    with pytest.raises(RuntimeError, match="both sender and receiver"):
        sender.init_on_receiver(model_id="policy", model=linear(0.0))
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(sender)
    sender.shutdown()
    sender.shutdown()

    learner_rank = DistributedWeightSyncScheme(url(port), rank=0)
    with pytest.raises(ValueError, match="rank=0 is the sender"):
        learner_rank.init_on_receiver(model_id="policy", model=linear(0.0))
    assert not learner_rank.initialized_on_receiver  # refused before anything changed
    with pytest.raises(ValueError, match="rank=1: the sender"):
        DistributedWeightSyncScheme(url(port), rank=1).init_on_sender(model_id="policy", model=linear(0.0))
    with pytest.raises(RuntimeError, match="needs init_on_sender"):
        DistributedWeightSyncScheme(url(port), rank=1).connect()
    with pytest.raises(ValueError, match="not by a collector"):
        DistributedWeightSyncScheme(url(port)).init_on_sender(model_id="policy", context=object(),
                                                              model=linear(0.0))


@pytest.mark.timeout(120)
def test_different_models_are_refused_on_both_sides() -> None:
    port, out = free_port(), CTX.Queue()
    proc = CTX.Process(target=learner_with_another_model, args=(port, out), name="learner")
    proc.start()
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=1, timeout=TIMEOUT)
    scheme.init_on_receiver(model_id="policy", model=linear(0.0))
    try:
        with pytest.raises(ValueError, match=r"rank 1: the learner's model and this receiver's differ: "
                                             r"'weight': learner \(2, 3\) torch.float32, here \(2, 4\)"):
            scheme.connect()
        kind, message = get(out)
        assert kind == "ValueError" and "'weight': learner (2, 3)" in message
        finish(proc)
    finally:
        scheme.shutdown()
        if proc.is_alive():
            proc.kill()


@pytest.mark.timeout(120)
def test_shutdown_of_the_learner_ends_the_receiving_thread() -> None:
    port, out = free_port(), CTX.Queue()
    proc = CTX.Process(target=learner, args=(port, 2, out), name="learner")
    proc.start()
    module = linear(-1.0)
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=1, timeout=TIMEOUT)
    try:
        scheme.init_on_receiver(model_id="policy", model=module)
        scheme.connect()
        assert scheme.receiving and len(receiving_threads()) == 1
        assert get(out)[0] == "sent" and get(out)[0] == "closed"  # the learner broadcast its stop
        deadline = time.monotonic() + 5
        while scheme.receiving and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not scheme.receiving and receiving_threads() == []
        scheme.receive()  # the newest complete version still arrives after the stop
        assert scheme.version == 3 and values(module) == constant(3.0)
        assert scheme.receive(timeout=0.2) is None
        finish(proc)
        assert proc not in CTX.active_children()  # reaped (workers other tests leaked are not ours)
    finally:
        scheme.shutdown()
        if proc.is_alive():
            proc.kill()


@pytest.mark.timeout(120)
def test_a_receiver_that_shut_down_makes_the_learner_refuse_to_send() -> None:
    port, go, out = free_port(), CTX.Queue(), CTX.Queue()
    proc = CTX.Process(target=learner_expecting_a_departure, args=(port, go, out), name="learner")
    proc.start()
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=1, timeout=TIMEOUT)
    try:
        scheme.init_on_receiver(model_id="policy", model=linear(-1.0))
        scheme.connect()
        started = time.monotonic()
        scheme.shutdown()
        assert time.monotonic() - started < 5 and not scheme.receiving
        scheme.shutdown()
        assert scheme.receive() is None  # shut down: nothing more
        go.put("send")
        kind, message, took = get(out)
        assert kind == "refused" and "receiver rank 1 left the group" in message and took < 5
        finish(proc)
    finally:
        scheme.shutdown()
        if proc.is_alive():
            proc.kill()


def tilting_learner(port: int, go: Any, out: Any) -> None:
    """Rank 0 with a TiltPolicy: at each request on ``go``, flip the policy's sign and send."""
    from tests.envs_for_tests import TiltPolicy

    torch.set_num_threads(1)
    policy = TiltPolicy(sign=-1.0)  # the collector starts with sign +1: the initial sync flips it
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=0, timeout=TIMEOUT)
    scheme.init_on_sender(model_id="policy", model=policy)
    scheme.connect()
    sign = -1.0
    while go.get(timeout=60) == "flip":
        sign = -sign
        with torch.no_grad():
            policy.weight.copy_(TiltPolicy(sign=sign).weight)
        scheme.send()
        out.put(scheme.version)
    scheme.shutdown()


@pytest.mark.timeout(180)
def test_a_learner_process_feeds_a_collector_and_its_worker_processes() -> None:
    """A learner outside the collector's process tree -> a MultiSyncCollector registered as receiver
    -> its worker processes: each batch starts with the newest weights received, and every frame's
    action is the one its stamped version chose."""
    from rlcollect import MultiSyncCollector
    from tests.envs_for_tests import TiltPolicy, make_cartpole

    def sign_of(version: int) -> float:  # the learner starts at sign -1 and flips at each send
        return -1.0 if version % 2 == 1 else 1.0

    port, go, out = free_port(), CTX.Queue(), CTX.Queue()
    proc = CTX.Process(target=tilting_learner, args=(port, go, out), name="learner")
    proc.start()
    try:
        with MultiSyncCollector(make_cartpole, TiltPolicy(sign=1.0), num_workers=2, frames_per_batch=16,
                                seed=0) as collector:
            scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=1, timeout=TIMEOUT)
            collector.register_scheme_receiver({"policy": scheme})
            assert collector.cascade_execute("_receiver_schemes['policy'].version") == 0
            versions_seen = set()
            for flip in range(3):
                if flip:
                    go.put("flip")
                    assert get(out) == flip
                deadline = time.monotonic() + 30
                while True:  # the broadcast arrives within a few batches
                    batch = collector.next()
                    assert batch is not None
                    version = int(batch["policy_version"][0, 0])
                    assert (batch["policy_version"] == version).all()
                    weight = TiltPolicy(sign=sign_of(version)).weight.detach()
                    chosen = (batch["observation"] @ weight > 0).long()
                    assert torch.equal(batch["action"], chosen), f"version {version}"
                    versions_seen.add(version)
                    if version == flip + 1 or time.monotonic() > deadline:
                        break
                assert version == flip + 1  # the initial sync is version 1 here, each send one more
            assert versions_seen == {1, 2, 3}
        go.put("stop")
        finish(proc)
    finally:
        if proc.is_alive():
            proc.kill()
