"""torch's intra-op threads against the collector's own work: one warning, once per process.

torch runs a matrix product on one thread per core by default. A collector that steps its envs and
runs a small policy in your process (:class:`~rlcollect.Collector`) wants those cores too, and so
does your learner: on 2 cores with one other busy process, the README's quick start ran at 62k to
67k frames/s at one thread against 13k to 14k at torch's default. The worker processes of the
multi-process collectors set one thread each themselves; your process's setting is yours, so
rlcollect does not change it: it says so once, when such a collector is built while torch runs
several threads and the policy runs on the CPU.

Examples:
    >>> import warnings
    >>> import torch
    >>> previous = torch.get_num_threads()
    >>> torch.set_num_threads(1)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error")  # nothing to say at one thread
    ...     warn_if_threads_compete(torch.nn.Linear(4, 2), policy_device=None)
    >>> torch.set_num_threads(previous)
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from rlcollect.common.callers import outside_stacklevel

__all__ = ["ThreadsWarning", "warn_if_threads_compete"]

_warned = False


class ThreadsWarning(UserWarning):
    """torch runs several intra-op threads in a process whose collector runs a CPU policy:
    ``warnings.filterwarnings("ignore", category=rlcollect.ThreadsWarning)`` keeps them quietly
    (a large policy, or a learner that needs the threads more than the collector)."""


def _on_cpu(policy: Any, policy_device: Any) -> bool:
    """Whether the policy's forward pass runs on the CPU (a module's parameters, else the
    collector's ``policy_device``)."""
    if policy_device is not None and torch.device(policy_device).type != "cpu":
        return False
    if isinstance(policy, nn.Module):
        return all(parameter.device.type == "cpu" for parameter in policy.parameters())
    return True


def warn_if_threads_compete(policy: Any, *, policy_device: Any) -> None:
    """Warn once per process (:class:`ThreadsWarning`, naming ``torch.set_num_threads``) when torch
    runs more than one intra-op thread here and ``policy`` (not ``None``: random actions run no
    torch) runs on the CPU in this process."""
    global _warned
    threads = torch.get_num_threads()
    if _warned or threads <= 1 or policy is None or not _on_cpu(policy, policy_device):
        return
    _warned = True
    warnings.warn(
        f"torch runs {threads} intra-op threads in this process (torch.get_num_threads()), and this "
        "collector steps its envs and runs its policy here: they compete for the cores, and with "
        "any other load a small policy collects several times slower (on 2 cores beside one busy "
        "process, 62k-67k frames/s at one thread against 13k-14k at torch's default). Call "
        "torch.set_num_threads(1) at the top of your script, before building the collector; to "
        "keep the threads (a large policy), filter rlcollect.ThreadsWarning",
        ThreadsWarning, stacklevel=outside_stacklevel())
