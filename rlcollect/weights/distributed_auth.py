"""Who may speak on a :class:`~rlcollect.weights.distributed.DistributedWeightSyncScheme`'s port.

``torch.distributed``'s store answers anyone who reaches its port, and gloo's sockets carry
whatever arrives, so the scheme adds what they lack (as ``multiprocessing`` does with its
authkey):

- **One secret per group**, the ``authkey`` (:func:`resolve_authkey`): given, else
  ``$RLCOLLECT_AUTHKEY``, else the ``multiprocessing`` authkey of the process that built the
  scheme (inherited by the processes it starts, and carried by a pickled scheme).
- **Challenge and proof**: each receiver sends the learner a fresh nonce and applies nothing
  before the learner answers it with :func:`proof`; the learner starts the group only once each
  receiver has answered the learner's own nonce the same way. An impostor holding the port is
  refused by name.
- **A private namespace**: every key of the group (messages, layout, gloo's rendezvous) lives
  under a prefix derived from the secret (:func:`namespace`), so a stranger's writes to the store
  never reach them.
- **Signed broadcasts**: each message carries a MAC over its number, version, flag and the bytes
  of its tensors (:func:`signature`); a receiver publishes a broadcast only when the MAC of what
  it received matches.
- **The interface asked**: the store listens on the address of ``init_method`` only
  (:func:`open_store`), and gloo on the loopback interface when that address is a loopback one
  (:func:`process_group`).

Examples:
    >>> key = b"k" * 32
    >>> nonce = fresh_nonce()
    >>> proof(key, "learner", 1, nonce, "layout") == proof(key, "learner", 1, nonce, "layout")
    True
    >>> proof(b"other", "learner", 1, nonce, "layout") == proof(key, "learner", 1, nonce, "layout")
    False
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import ipaddress
import multiprocessing
import os
import secrets
import socket
from typing import Any, cast

import torch
import torch.distributed as dist

__all__ = ["ENV_AUTHKEY", "fresh_nonce", "is_loopback", "listening_socket", "namespace", "open_store",
           "process_group", "proof", "resolve_authkey", "same", "signature"]

#: The environment variable that gives every process of a group the same authkey (bytes, UTF-8).
ENV_AUTHKEY = "RLCOLLECT_AUTHKEY"


def resolve_authkey(authkey: Any) -> bytes:
    """The group's secret: ``authkey`` (non-empty bytes), else ``$RLCOLLECT_AUTHKEY``, else this
    process's ``multiprocessing`` authkey.

    Raises:
        TypeError: ``authkey`` is not bytes (or ``None``).
        ValueError: it is empty.
    """
    if authkey is None:
        from_env = os.environ.get(ENV_AUTHKEY)
        return from_env.encode() if from_env else bytes(multiprocessing.current_process().authkey)
    if not isinstance(authkey, (bytes, bytearray)):
        raise TypeError(f"authkey must be bytes (the secret every process of the group shares), got "
                        f"{type(authkey).__name__}")
    if not authkey:
        raise ValueError("authkey=b'': an empty secret authenticates nobody; give at least 16 random bytes "
                         "(os.urandom(32)) or leave it None")
    return bytes(authkey)


def fresh_nonce() -> str:
    return secrets.token_hex(16)


def proof(key: bytes, role: str, rank: int, nonce: str, text: str) -> str:
    """The MAC by which ``role`` (``"learner"`` or ``"receiver"``) answers ``rank``'s ``nonce``,
    binding ``text`` (the layout, or the receiver's answer) to it."""
    return hmac.new(key, f"{role}|{rank}|{nonce}|{text}".encode(), hashlib.sha256).hexdigest()


def namespace(key: bytes) -> str:
    """The store prefix of the group's keys (nobody without the secret can name them)."""
    return "rlc-" + hmac.new(key, b"namespace", hashlib.sha256).hexdigest()[:32]


def signature(key: bytes, n: int, version: int, flag: int, tensors: list[torch.Tensor]) -> str:
    """The MAC of message ``n``: its version, flag and every byte of its tensors, in order."""
    mac = hashlib.blake2b(key=hashlib.sha256(key).digest(), digest_size=32)
    mac.update(f"{n}|{version}|{flag}|{len(tensors)}".encode())
    for tensor in tensors:
        data = tensor.detach()
        if data.device.type != "cpu":
            data = data.cpu()
        mac.update(cast(Any, data.contiguous().reshape(-1).view(torch.uint8).numpy()))  # a buffer, no copy
    return mac.hexdigest()


def same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface (``localhost``, ``127.x``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``'s interface only (not every interface, as the store's own
    would), for the store to take over.

    Raises:
        OSError: the address is taken or not this machine's (the caller names the scheme).
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(128)
    except OSError:
        listener.close()
        raise
    return listener


def open_store(host: str, port: int, world_size: int | None, timeout: float) -> Any:
    """The group's ``TCPStore``: hosted on ``host``'s interface only (``world_size`` given: the
    learner's), or a client of the one at ``host:port`` (``None``: a receiver's)."""
    delta = datetime.timedelta(seconds=timeout)
    if world_size is None:
        return dist.TCPStore(host, port, None, False, delta)  # type: ignore[attr-defined]
    listener = listening_socket(host, port)
    try:
        store = dist.TCPStore(host, port, world_size, True, delta, wait_for_workers=False,  # type: ignore[attr-defined]
                              master_listen_fd=listener.fileno())
    except BaseException:
        listener.close()
        raise
    listener.detach()  # the store owns the socket now, and closes it
    return store


def process_group(store: Any, rank: int, world_size: int, backend: str, host: str, timeout: float) -> Any:
    """A private process group over ``store`` (a user's default group is untouched): gloo on the
    loopback interface when ``host`` is a loopback address (every rank is on this machine), else
    on torch's choice of interface (``GLOO_SOCKET_IFNAME``); or NCCL between GPUs."""
    delta = datetime.timedelta(seconds=timeout)
    if backend == "gloo":
        if not is_loopback(host):
            return dist.ProcessGroupGloo(store, rank, world_size, delta)
        options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
        options._timeout = delta
        options._devices = [dist.ProcessGroupGloo.create_device(
            hostname="127.0.0.1" if host == "localhost" else host)]
        return dist.ProcessGroupGloo(store, rank, world_size, options)
    nccl: Any = getattr(dist, "ProcessGroupNCCL")  # noqa: B009 (absent from CPU builds)
    options = nccl.Options()
    options.is_high_priority_stream = False
    options._timeout = delta
    return nccl(store, rank, world_size, options)
