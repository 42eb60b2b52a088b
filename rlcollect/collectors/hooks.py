"""The collector's hooks as attributes: :class:`Hook` (``pre_collect_hook``, ``post_collect_hook``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from rlcollect.collectors.checks import check_callable

__all__ = ["Hook"]


class Hook:
    """A hook attribute of a collector (TorchRL's ``pre_collect_hook`` and ``post_collect_hook``):
    read from the collector's options; set, it is checked, handed to where it runs (the
    collector's ``_set_<name>``) and kept in the options.

    Examples:
        >>> from rlcollect import Collector
        >>> calls = []
        >>> with Collector("CartPole-v1", frames_per_batch=4) as collector:
        ...     collector.pre_collect_hook = lambda: calls.append(1)
        ...     _ = collector.next()
        >>> calls
        [1]
        >>> collector.post_collect_hook = "print"
        Traceback (most recent call last):
        TypeError: post_collect_hook must be callable or None, got str 'print'
    """

    name: str

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, collector: Any, owner: type | None = None) -> Any:
        if collector is None:
            return self
        return None if collector.options is None else getattr(collector.options, self.name)

    def __set__(self, collector: Any, hook: Any) -> None:
        check_callable(self.name, hook)
        getattr(collector, f"_set_{self.name}")(hook)
        collector.options = dataclasses.replace(collector.options, **{self.name: hook})
