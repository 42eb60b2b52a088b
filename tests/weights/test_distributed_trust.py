"""DistributedWeightSyncScheme takes weights only from its own side: the store listens on the
address asked, an impostor on the port is refused by name with nothing applied, a receiver with
another secret cannot join, a stranger's writes to the learner's store change nothing, and a
broadcast whose bytes do not match its signature is never applied."""

from __future__ import annotations

import datetime
import ipaddress
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from rlcollect.weights.distributed import DistributedWeightSyncScheme
from rlcollect.weights.distributed_auth import resolve_authkey, signature
from tests.weights.test_distributed import CTX, constant, finish, free_port, get, learner, linear, url, values

SHORT = 8.0  # the schemes' bound on each step where a test expects a step to fail


def with_another_key(port: int, rank: int, out: Any) -> None:
    """A scheme of rank ``rank`` holding another secret: rank 0 is an impostor that took the port
    first (a stranger's process), rank 1 a receiver given the wrong key. Reports each stage."""
    torch.set_num_threads(1)
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=rank, timeout=SHORT,
                                         authkey=b"stranger" * 4)
    try:
        module = linear(7.0)
        if rank == 0:
            scheme.init_on_sender(model_id="policy", model=module)
            out.put(("listening", None))
        else:
            scheme.init_on_receiver(model_id="policy", model=module)
        scheme.connect()
        out.put(("connected", values(module)))
    except Exception as exc:
        out.put((type(exc).__name__, str(exc)))
    finally:
        scheme.shutdown()


@pytest.mark.timeout(120)
def test_an_impostor_on_the_port_is_refused_and_nothing_it_sends_is_applied() -> None:
    port, out = free_port(), CTX.Queue()
    proc = CTX.Process(target=with_another_key, args=(port, 0, out), name="impostor")
    proc.start()
    assert get(out) == ("listening", None)
    module = linear(-1.0)
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=1, timeout=SHORT)
    scheme.init_on_receiver(model_id="policy", model=module)
    try:
        deadline = time.monotonic() + 30
        while True:  # the impostor's store may take a moment to listen
            try:
                scheme.connect()
                break
            except RuntimeError as exc:
                if "could not reach" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        pytest.fail("the receiver connected to an impostor")
    except PermissionError as exc:
        assert f"the process listening at {url(port)} did not prove it holds this group's authkey" in str(exc)
    finally:
        scheme.shutdown()
    assert values(module) == constant(-1.0)  # none of the impostor's 7.0
    kind, _ = get(out)
    assert kind == "RuntimeError"  # the impostor never started a group
    finish(proc)


def learner_with_a_stranger(port: int, out: Any) -> None:
    """Rank 0; between versions 1 and 2 a stranger connects to the store and writes the keys a
    group of an unauthenticated scheme would read (messages, the layout, the answers, gloo's)."""
    torch.set_num_threads(1)
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=0, timeout=30.0)
    try:
        policy = linear(0.5)
        scheme.init_on_sender(model_id="policy", model=policy)
        scheme.connect()
        scheme.send(weights=linear(1.0))
        stranger = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=10))  # type: ignore[attr-defined]
        for key in ("msg/2", "msg/1", "layout", "hello/1", "start", "stopped", "pg/0", "auth/proof/1"):
            stranger.set(key, "7,0")
        scheme.send(weights=linear(2.0))
        scheme.send(weights=linear(3.0))
        out.put(("sent", scheme.version))
        scheme.shutdown()
        out.put(("closed", scheme.version))
    except Exception as exc:
        out.put(("error", repr(exc)))


@pytest.mark.timeout(120)
def test_a_strangers_writes_to_the_store_change_nothing() -> None:
    port, out = free_port(), CTX.Queue()
    proc = CTX.Process(target=learner_with_a_stranger, args=(port, out), name="learner")
    proc.start()
    module = linear(-1.0)
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=1, timeout=30.0)
    try:
        scheme.init_on_receiver(model_id="policy", model=module)
        scheme.connect()
        deadline = time.monotonic() + 60
        while scheme.version < 3 and time.monotonic() < deadline:
            scheme.receive(timeout=0.5)
        assert scheme.version == 3 and values(module) == constant(3.0)
        assert get(out) == ("sent", 3)
        assert get(out) == ("closed", 3)
        finish(proc)
    finally:
        scheme.shutdown()
        if proc.is_alive():
            proc.kill()


def listening_addresses(pid: int) -> dict[str, str]:
    """``{socket inode: local address}`` of the TCP sockets process ``pid`` listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = {}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                raw = fields[1].split(":")[0]
                packed = bytes.fromhex(raw)
                if table == "tcp":
                    found[fields[9]] = str(ipaddress.IPv4Address(packed[::-1]))
                else:
                    words = [packed[i:i + 4][::-1] for i in range(0, 16, 4)]
                    found[fields[9]] = str(ipaddress.IPv6Address(b"".join(words)))
    return found


@pytest.mark.timeout(120)
def test_a_receiver_with_another_key_cannot_join_and_every_socket_is_on_loopback() -> None:
    port, out = free_port(), CTX.Queue()
    proc = CTX.Process(target=with_another_key, args=(port, 1, out), name="receiver")
    proc.start()
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=0, timeout=SHORT)
    scheme.init_on_sender(model_id="policy", model=linear(0.5))
    try:
        with pytest.raises(RuntimeError, match="waited timeout=8.0s for every receiver's answer"):
            scheme.connect()
        kind, message = get(out)
        assert kind == "PermissionError" and "did not prove it holds this group's authkey" in message
        finish(proc)
    finally:
        scheme.shutdown()


@pytest.mark.timeout(120)
def test_the_store_and_gloo_listen_on_the_loopback_interface_only() -> None:
    port, out = free_port(), CTX.Queue()
    proc = CTX.Process(target=learner, args=(port, 2, out), name="learner")
    proc.start()
    scheme = DistributedWeightSyncScheme(url(port), world_size=2, rank=1, timeout=30.0)
    before = listening_addresses(os.getpid())  # what other tests of this process left listening
    try:
        scheme.init_on_receiver(model_id="policy", model=linear(-1.0))
        scheme.connect()
        assert proc.pid is not None
        for pid in (proc.pid, os.getpid()):  # the learner's store and gloo, the receiver's gloo
            addresses = [a for inode, a in listening_addresses(pid).items() if inode not in before]
            assert addresses and all(ipaddress.ip_address(a).is_loopback for a in addresses), (pid, addresses)
        while scheme.version < 3:
            scheme.receive(timeout=1.0)
        assert get(out) == ("sent", 3)
        assert get(out) == ("closed", 3)
        finish(proc)
    finally:
        scheme.shutdown()
        if proc.is_alive():
            proc.kill()


def test_a_signature_covers_every_byte_and_the_message_number() -> None:
    key = b"k" * 32
    tensors = [torch.arange(6.0).reshape(2, 3), torch.tensor([True, False])]
    reference = signature(key, 3, 2, 0, tensors)
    altered = [tensors[0].clone(), tensors[1]]
    altered[0].view(torch.int32)[0, 0] ^= 1  # one bit of one float
    assert signature(key, 3, 2, 0, altered) != reference
    assert signature(key, 4, 2, 0, tensors) != reference  # a replayed message under another number
    assert signature(b"q" * 32, 3, 2, 0, tensors) != reference
    assert signature(key, 3, 2, 0, [t.clone() for t in tensors]) == reference


def test_the_authkey_comes_from_the_argument_the_environment_or_multiprocessing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    monkeypatch.delenv("RLCOLLECT_AUTHKEY", raising=False)
    assert resolve_authkey(None) == bytes(multiprocessing.current_process().authkey)
    monkeypatch.setenv("RLCOLLECT_AUTHKEY", "shared secret")
    assert resolve_authkey(None) == b"shared secret"
    assert resolve_authkey(b"given") == b"given"
    with pytest.raises(ValueError, match="authkey=b'': an empty secret"):
        resolve_authkey(b"")
    with pytest.raises(TypeError, match="authkey must be bytes"):
        resolve_authkey("text")
    assert "given" not in repr(DistributedWeightSyncScheme(authkey=b"given"))
