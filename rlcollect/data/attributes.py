"""Attribute paths, as TorchRL's collectors read them remotely: ``"replay_buffer.write_count"``,
``"_receiver_schemes['policy'].receive"`` (names and ``[literal]`` subscripts).

Examples:
    >>> class Box:
    ...     items = {"a": [1, 2]}
    >>> resolve_path(Box(), "items['a'][1]")
    2
    >>> call_path(Box(), "items.get", ("b", 0))
    0
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["call_path", "resolve_path", "worker_entries"]

_STEP = re.compile(r"\.?([A-Za-z_]\w*)|\[([^\]]+)\]")


def resolve_path(root: Any, path: str) -> Any:
    """``root`` followed along ``path``: attribute names and ``[key]`` subscripts (literals).

    Raises:
        ValueError: ``path`` does not parse.
        AttributeError, KeyError, IndexError: it does not resolve.
    """
    target, position = root, 0
    while position < len(path):
        step = _STEP.match(path, position)
        if step is None:
            raise ValueError(f"cannot parse {path!r} at {path[position:]!r}")
        name, key = step.groups()
        target = getattr(target, name) if name is not None else target[ast.literal_eval(key.strip())]
        position = step.end()
    return target


def call_path(root: Any, path: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None) -> Any:
    """Call the attribute at ``path`` with ``args`` and ``kwargs``, or read it if it is not callable.

    Raises:
        ValueError: arguments given for an attribute that is not callable.
    """
    target = resolve_path(root, path)
    if callable(target):
        return target(*args, **(kwargs or {}))
    if args or kwargs:
        raise ValueError(f"{path} is not callable: it takes no arguments "
                         f"(got {tuple(args)}, {dict(kwargs or {})})")
    return target


def worker_entries(workers: int, args: Sequence[Sequence[Any]] | None,
                   kwargs: Sequence[Mapping[str, Any]] | None
                   ) -> tuple[list[tuple[Any, ...] | None], list[dict[str, Any]]]:
    """A collector's ``call_workers`` arguments as one entry per worker (``None``: read the
    attribute).

    Examples:
        >>> worker_entries(2, None, [{"a": 1}, {}])
        ([(), ()], [{'a': 1}, {}])
    """
    if args is None and kwargs is not None:
        args = [()] * len(kwargs)
    for name, entries in (("argument", args), ("keyword-argument", kwargs)):
        if entries is not None and len(entries) != workers:
            raise ValueError(f"Expected {workers} {name} entries (one per worker), got {len(entries)}")
    return ([None] * workers if args is None else [tuple(a) for a in args],
            [{}] * workers if kwargs is None else [dict(k) for k in kwargs])
