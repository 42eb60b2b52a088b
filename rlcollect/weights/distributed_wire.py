"""What travels between a :class:`~rlcollect.weights.distributed.DistributedWeightSyncScheme`
learner and its receivers: message keys in the store, the layout check, the staging buffers and
the tensors on the wire.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import torch
from tensordict import TensorDictBase

__all__ = ["ACK_WAIT", "BACKENDS", "DATA", "KEEP", "POLL_MAX", "POLL_MIN", "STOP", "Buffers", "address",
           "compare", "is_int", "key_name", "left", "message", "on_wire", "take"]

BACKENDS = ("gloo", "nccl")
DATA, STOP = 0, 1
POLL_MIN, POLL_MAX = 0.002, 0.02  # seconds between two looks at the store (doubling while idle)
KEEP = 64  # message keys kept in the store behind the newest (a receiver is at most one behind)
ACK_WAIT = 5.0  # at most this long (and at most ``timeout``) for the receivers to confirm a stop


class Buffers:
    """A staging copy of the weights and its tensors in broadcast order."""

    def __init__(self, reference: TensorDictBase, order: list[tuple[str, Any]], device: torch.device) -> None:
        self.td = reference.apply(lambda t: torch.zeros_like(t, device=device))
        self.tensors = [on_wire(self.td.get(key)) for _, key in order]


def take(pg: Any, value: str, staging: Buffers, device: torch.device) -> tuple[int, int]:
    """Join the broadcast announced by ``value`` (a store message): the header, then the tensors
    into ``staging`` unless it is a stop. Returns ``(version, flag)``."""
    if value.startswith("left "):
        raise RuntimeError(left(value))
    version, flag = (int(part) for part in value.split(",")[:2])  # then the message's MAC
    header = torch.zeros(2, dtype=torch.int64, device=device)
    pg.broadcast(header, 0).wait()
    if header.tolist() != [version, flag]:
        raise RuntimeError(f"the broadcast header {header.tolist()} differs from the announced "
                           f"[{version}, {flag}]: "
                           "the group is out of step")
    if flag == DATA:
        works = [pg.broadcast(t, 0) for t in staging.tensors]
        for work in works:
            work.wait()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return version, flag


def compare(theirs: list[list[Any]], mine: list[list[Any]], rank: int) -> str | None:
    if theirs == mine:
        return None
    known = {row[0]: row for row in theirs}
    here = {row[0]: row for row in mine}
    diffs = [f"{name!r} missing here" for name in sorted(set(known) - set(here))]
    diffs += [f"{name!r} missing on the learner" for name in sorted(set(here) - set(known))]
    diffs += [f"{name!r}: learner {tuple(known[name][1])} {known[name][2]}, here {tuple(row[1])} {row[2]}"
              for name, row in sorted(here.items()) if name in known and known[name] != row]
    return f"rank {rank}: the learner's model and this receiver's differ: {'; '.join(diffs)}"


def left(value: str) -> str:
    return (f"receiver rank {value.removeprefix('left ')} left the group (its scheme was shut down): the "
            "learner cannot broadcast to a group that lost a rank")


def message(n: int) -> str:
    return f"msg/{n}"


def key_name(key: Any) -> str:
    return key if isinstance(key, str) else ".".join(key)


def on_wire(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as a collective sees it (complex numbers as pairs of reals, sharing storage)."""
    return torch.view_as_real(tensor) if tensor.is_complex() else tensor


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def address(init_method: Any) -> tuple[str, int]:
    allowed = "a string 'tcp://host:port' with a port in 1..65535"
    if not isinstance(init_method, str):
        raise ValueError(f"init_method={init_method!r}: {allowed}")
    try:
        parts = urlsplit(init_method)
        scheme, host, port, path = parts.scheme, parts.hostname, parts.port, parts.path
    except ValueError:  # a port that is not a number
        raise ValueError(f"init_method={init_method!r}: {allowed}") from None
    if scheme != "tcp" or not host or port is None or not 0 < port < 65536 or path not in ("", "/"):
        raise ValueError(f"init_method={init_method!r}: {allowed}")
    return host, port
