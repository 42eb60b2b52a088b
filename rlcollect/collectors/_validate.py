"""Argument checks shared by the collectors' constructors: one clear error per bad argument."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["check_callable", "check_device", "check_env_device", "check_frames", "check_positive_int"]


def check_positive_int(name: str, value: Any) -> int:
    """``value`` as an int > 0, else ``ValueError`` / ``TypeError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


def check_frames(name: str, value: Any, *, allow_endless: bool = False) -> int:
    """A frame count: >= 0, or -1 for "no end" when ``allow_endless``."""
    if value is None and allow_endless:
        return -1
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if allow_endless and value == -1:
        return -1
    if value < 0 or (allow_endless and value == 0):
        allowed = "a positive int or -1 (no end)" if allow_endless else "an int >= 0"
        raise ValueError(f"{name} must be {allowed}, got {value}")
    return value


def check_device(name: str, value: Any) -> torch.device | None:
    """``None`` or a usable ``torch.device``."""
    if value is None:
        return None
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"{name}={value!r} is not a torch device ({error})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}={value!r} but CUDA is not available on this machine")
    return device


def check_callable(name: str, value: Any) -> Callable[..., Any] | None:
    """``None`` or a callable."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, got {type(value).__name__}")
    return value


def check_env_device(value: Any) -> torch.device | None:
    """``None`` or the CPU: Gymnasium envs produce numpy arrays on the CPU."""
    device = check_device("env_device", value)
    if device is not None and device.type != "cpu":
        raise ValueError(f"env_device={value!r}: Gymnasium envs run on the CPU only")
    return device
