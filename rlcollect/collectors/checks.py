"""Checks of single collector arguments, each naming the argument, the value and what is allowed.

Examples:
    >>> check_int("num_envs", 4, minimum=1, allowed="a positive int")
    4
    >>> check_seed("seed", None) is None
    True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rlcollect.data.buffers import physical_memory
from rlcollect.data.checks import short_repr
from rlcollect.weights import schemes as schemes_module
from rlcollect.weights.schemes import WeightSyncScheme

__all__ = ["SEED_LIMIT", "START_METHODS", "check_batch_memory", "check_callable", "check_device",
           "check_env", "check_flag", "check_frames", "check_frames_per_batch", "check_int",
           "check_info_keys", "check_obs_dtype", "check_scheme", "check_seconds", "check_seed", "per_worker"]

START_METHODS = ("auto", "spawn", "forkserver", "fork")


#: Seeds are ints in ``[0, 2**63)``: Gymnasium and numpy take any int >= 0, torch one below 2**64,
#: and env ``i`` gets ``seed + i`` (restarted workers a further offset), which must stay below it.
SEED_LIMIT = 2**63
#: Most envs one process steps (``num_envs`` / ``num_envs_per_worker``), and most worker processes or
#: actors: beyond, a typo (``10**9``) would build envs or start processes for hours before failing.
MAX_ENVS_PER_PROCESS = 2**16
MAX_WORKERS = 2**12
#: Bytes every frame of a batch takes besides observations and action: reward (4), three flags (3),
#: trajectory id (8), policy version (8).
FRAME_OVERHEAD_BYTES = 23


def refuse_dataloader_workers(owner: str) -> None:
    """Raise in a ``DataLoader`` worker process (``num_workers`` > 0): each such worker iterates
    its own copy of the collector, so every batch would come once per worker, and weight updates
    sent to the collector would never reach the copies."""
    info = torch.utils.data.get_worker_info()
    if info is not None:
        raise RuntimeError(
            f"{owner} is iterated in DataLoader worker {info.id} of num_workers={info.num_workers}: each "
            "DataLoader worker iterates a copy of the collector, so every batch would come once per "
            "DataLoader worker and weight updates would not reach them. Read it with "
            "DataLoader(collector, batch_size=None, collate_fn=lambda b: b) and num_workers=0 (the "
            "default); MultiSyncCollector or MultiAsyncCollector collect in worker processes")


def check_int(name: str, value: Any, *, minimum: int, allowed: str, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (numpy integers included), else an error naming
    ``name`` and the value (``TypeError`` for a value that is no integer, ``ValueError`` out of range)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be {allowed}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be {allowed} up to {maximum}, got {value!r}")
    return int(value)


def check_seed(name: str, value: Any) -> int | None:
    """A seed: ``None`` or an int in ``[0, 2**63)`` (numpy integers included); see :data:`SEED_LIMIT`."""
    if value is None:
        return None
    return check_int(name, value, minimum=0, maximum=SEED_LIMIT - 1, allowed="None or an int in [0, 2**63)")


def check_flag(name: str, value: Any) -> bool:
    """A bool argument (``numpy.bool_`` included); anything else is a ``TypeError`` naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def check_batch_memory(frames: int, frame_bytes: int, what: str) -> None:
    """Raise ``ValueError`` naming ``what`` (the arguments that decide the size) if ``frames`` frames of
    ``frame_bytes`` bytes each do not fit in this machine's memory."""
    total, memory = frames * frame_bytes, physical_memory()
    if total > memory:
        raise ValueError(f"{what} needs {frames} frames of {frame_bytes} bytes each in memory: "
                         f"{total / 2**30:.1f} GiB, more than this machine's {memory / 2**30:.1f} GiB; "
                         "collect smaller batches")


def check_seconds(name: str, value: Any) -> float:
    """``value`` as a positive, finite number of seconds (numpy numbers included), else an error
    naming ``name`` (``TypeError`` for a value that is no number, ``ValueError`` otherwise)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a positive number of seconds, got {value!r} "
                        f"({type(value).__name__})")
    if not 0 < value < math.inf:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def check_frames(name: str, value: Any) -> int:
    """A frame budget: a positive int, or -1 / ``None`` for no end."""
    if value is None or (isinstance(value, (int, np.integer)) and value == -1):
        return -1
    return check_int(name, value, minimum=1, allowed="a positive int or -1 (no end)")


#: What ``obs_dtype`` may be, by name.
OBS_DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def check_obs_dtype(value: Any) -> torch.dtype | None:
    """``obs_dtype`` as a torch floating dtype: a name, a torch dtype or a numpy dtype (or type)."""
    if value is None:
        return None
    if isinstance(value, str):
        name = value
    elif isinstance(value, torch.dtype):
        name = str(value).removeprefix("torch.")
    else:
        try:
            name = np.dtype(value).name
        except TypeError:
            name = ""
    if name not in OBS_DTYPES:
        names = ", ".join(map(repr, OBS_DTYPES))
        raise ValueError(f"obs_dtype={short_repr(value)} is not one of None, {names} (or the torch / numpy "
                         "dtype): the dtype floating-point observations are stored in")
    return OBS_DTYPES[name]


def check_info_keys(value: Any) -> tuple[str, ...]:
    """``info_keys`` as a tuple of distinct names (``None``: none)."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not all(
            isinstance(key, str) and key for key in value):
        raise TypeError(f"info_keys={short_repr(value)} must be a list of the info's key names, e.g. "
                        "info_keys=['is_success'] (None: none)")
    if len(set(value)) != len(value):
        raise ValueError(f"info_keys={short_repr(value)} names a key twice")
    return tuple(value)


def check_device(name: str, value: Any) -> torch.device | None:
    if isinstance(value, (list, tuple)):  # TorchRL's one device per worker: one for all here
        devices = [check_device(f"{name}[{i}]", entry) for i, entry in enumerate(value)]
        if not devices or any(device != devices[0] for device in devices):
            raise ValueError(f"{name}={short_repr(value)} lists different devices per worker: rlcollect's "
                             f"workers share one {name} (give one device)")
        return devices[0]
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (str, int, np.integer, torch.device)):
        raise TypeError(f"{name} must be None, a torch.device, a device string ('cpu', 'cuda:0') or a CUDA "
                        f"index, got {value!r} ({type(value).__name__})")
    try:
        device = torch.device(value if not isinstance(value, np.integer) else int(value))
    except (RuntimeError, TypeError, ValueError) as error:
        reason = str(error).splitlines()[0][:120]
        raise ValueError(f"{name}={value!r} is not a torch device, e.g. 'cpu' or 'cuda:0' "
                         f"({reason})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}={value!r} but CUDA is not available on this machine")
    return ordinal_device(device)


def ordinal_device(device: torch.device) -> torch.device:
    """``device`` as the tensors on it name theirs (as TorchRL's collectors normalise it): every
    CPU index is ``cpu``, and a CUDA device without an index the current one, so that a module
    already there is recognised and not copied.

    Examples:
        >>> ordinal_device(torch.device("cpu:0")), torch.zeros(1).device
        (device(type='cpu'), device(type='cpu'))
    """
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def check_callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, got {type(value).__name__} {short_repr(value)}")
    return value




def check_env(name: str, value: Any) -> None:
    """An env source: an env id, a callable (env factory) or an env instance (vector / TorchRL)."""
    from rlcollect.envs.factory import check_env_source

    check_env_source(name, value)


def check_scheme(model_id: str, value: Any) -> WeightSyncScheme | None:
    """A weight-sync scheme; TorchRL's schemes become this package's scheme of the same name, and
    TorchRL's RPC and torch.distributed ones ``None`` (the collector's default scheme: rlcollect
    reaches its own workers through its own transport)."""
    if isinstance(value, WeightSyncScheme):
        return value
    ours = getattr(schemes_module, type(value).__name__, None)
    if type(value).__module__.startswith("torchrl."):
        if isinstance(ours, type) and issubclass(ours, WeightSyncScheme):
            return ours(getattr(value, "strategy_str", "tensordict"))
        if type(value).__name__ in ("RPCWeightSyncScheme", "DistributedWeightSyncScheme"):
            return None
    raise TypeError(f"weight_sync_schemes[{model_id!r}] must be a WeightSyncScheme, got "
                    f"{type(value).__name__} {short_repr(value)}")


def per_worker(name: str, value: Any, num_workers: int) -> tuple[Any, ...]:
    if isinstance(value, (list, tuple)):
        if len(value) != num_workers:
            raise ValueError(f"{name} has {len(value)} entries for num_workers={num_workers}")
        return tuple(value)
    return (value,) * num_workers


def check_frames_per_batch(value: Any, num_workers: int, sync: bool) -> int:
    """``frames_per_batch`` as the frames of one batch (see :class:`CollectorOptions`)."""
    if not isinstance(value, (list, tuple)):
        return check_int("frames_per_batch", value, minimum=1, allowed="a positive int")
    allowed = f"a positive int, or a list of {num_workers} equal positive ints (one per worker)"
    per_worker = [check_int(f"frames_per_batch[{i}]", v, minimum=1, allowed=allowed)
                  for i, v in enumerate(value)]
    if len(per_worker) != num_workers:
        raise ValueError("If `frames_per_batch` is provided as a sequence, it should contain exactly one "
                         f"value per worker: got frames_per_batch={list(value)} for {num_workers} workers")
    if len(set(per_worker)) != 1:
        raise ValueError(f"frames_per_batch={list(value)} must be {allowed}: a batch has one length T "
                         "for every env")
    return per_worker[0] * (num_workers if sync else 1)


def batch_steps(frames_per_batch: int, total_frames: int, envs_per_batch: int) -> tuple[int, list[str]]:
    """``T``, the steps of a batch of ``frames_per_batch`` frames over ``envs_per_batch`` envs
    (rounded up), and what was rounded: a batch up to whole steps of every env, ``total_frames`` up
    to whole batches (TorchRL warns of both too).

    Examples:
        >>> steps, notes = batch_steps(300, 1000, 1)
        >>> steps, notes[0].split(": ")[1]
        (300, '1200 frames (4 batches) will be collected')
    """
    steps = -(frames_per_batch // -envs_per_batch)
    batch, notes = steps * envs_per_batch, []
    if batch != frames_per_batch:
        notes.append(f"frames_per_batch={frames_per_batch} is not a multiple of the {envs_per_batch} envs; "
                     f"collecting {batch} frames per batch")
    batches = -(total_frames // -batch)
    if total_frames > 0 and batches * batch != total_frames:
        notes.append(f"total_frames={total_frames} is not a multiple of the {batch} frames of a batch: "
                     f"{batches * batch} frames ({batches} batches) will be collected")
    return steps, notes
