"""An env's state as data: captured from its attributes, restored into a live env of the same kind.

A collector's ``state_dict()`` must load with ``torch.load(path, weights_only=True)`` and run no code
when loaded, so the envs' state is never pickled. :func:`capture` walks an env's attributes (its
wrappers', its spaces', its generators') and writes what they hold as plain data: numbers, strings,
bytes, tensors, lists and dicts, each value tagged with its ``"kind"``. :func:`restore` writes that
data back into the attributes of envs built by the loading collector's own factory: the classes
come from the live envs, never from the state, and a state whose classes or layout differ from
theirs is refused before anything changes.

What is not data (a simulator's handle, a lock, a C object) cannot be captured: :func:`capture`
raises :class:`NotData` naming where it was found. Functions, classes and modules an env holds are
code, the same in a freshly built env: they are not captured and not restored.

Examples:
    >>> import gymnasium as gym
    >>> env, twin = gym.make("CartPole-v1"), gym.make("CartPole-v1")
    >>> _ = env.reset(seed=0); _ = twin.reset(seed=1)
    >>> restore(twin, capture(env))
    >>> bool((twin.unwrapped.state == env.unwrapped.state).all())
    True
    >>> [env.step(0)[0].tolist() == twin.step(0)[0].tolist() for _ in range(3)]
    [True, True, True]
"""

from __future__ import annotations

import collections
import enum
import functools
import random
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["NotData", "Refused", "capture", "restore"]

_CODE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type,
         functools.partial, types.MethodWrapperType, types.WrapperDescriptorType)
_PLAIN = (type(None), bool, int, float, complex, str, bytes)
_ARRAY_KINDS = "biufcUSmM"  # numpy dtype kinds that are plain bytes (no objects)
_BIT_GENERATORS = {name: getattr(np.random, name)
                   for name in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")}
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python


class Refused(ValueError):
    """A state that is not :func:`capture`'s, or of other envs (the message names the path)."""


class NotData(TypeError):
    """An env holds a value that is neither data nor an object of Python attributes."""


def capture(obj: Any) -> dict[str, Any]:
    """``obj``'s state as data (see the module's docstring).

    Raises:
        NotData: ``obj`` holds a value that is not data, named by its path (``env.lock``).
    """
    captured: dict[str, Any] = _Capture().value(obj, "env")
    return captured


def restore(obj: Any, state: Any) -> None:
    """Write ``state`` (from :func:`capture`) into ``obj`` and what it holds, all or nothing.

    Raises:
        ValueError: the state is not :func:`capture`'s, or was taken of another kind of env
            (the first difference named by its path); ``obj`` is then unchanged.
    """
    actions: list[Callable[[], object]] = []
    _Restore(actions).value(obj, state, "env")
    for action in actions:
        action()


def _array(value: np.ndarray[Any, Any] | np.generic, path: str) -> dict[str, Any]:
    if value.dtype.kind not in _ARRAY_KINDS:
        raise NotData(f"{path} is a numpy value of dtype {value.dtype} (objects, not data)")
    return {"kind": "array" if isinstance(value, np.ndarray) else "scalar", "dtype": value.dtype.str,
            "shape": list(np.shape(value)), "data": np.ascontiguousarray(value).tobytes()}


def _is_python_object(value: Any) -> bool:
    """An instance of classes written in Python whose state is its ``__dict__``."""
    return hasattr(value, "__dict__") and all(cls.__flags__ & _HEAPTYPE for cls in type(value).__mro__[:-1])


def _class_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _refill(live: Any, values: Any) -> None:
    """Replace a deque's items or a dict's entries, in place (whoever holds it sees them)."""
    live.clear()
    (live.update if isinstance(live, dict) else live.extend)(values)


class _Capture:
    def __init__(self) -> None:
        self.seen: dict[int, str] = {}  # id -> the path it was first met at (shared and cyclic refs)
        self.keep: list[Any] = []  # what ``seen`` names stays alive while the walk runs

    def value(self, value: Any, path: str) -> Any:
        if isinstance(value, np.generic):  # before the plain kinds: np.float64 is a float
            return _array(value, path)
        if isinstance(value, _PLAIN):
            return value
        if isinstance(value, (*_CODE, enum.Enum)):
            return {"kind": "code"}
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, np.dtype):
            return {"kind": "dtype", "str": value.str}
        first = self.seen.get(id(value))
        if first is not None:
            return {"kind": "same", "path": first}
        self.seen[id(value)] = path
        self.keep.append(value)
        return self.shared(value, path)

    def shared(self, value: Any, path: str) -> Any:
        if isinstance(value, np.ndarray):
            return _array(value, path)
        if isinstance(value, np.random.Generator):
            name = type(value.bit_generator).__name__
            if name not in _BIT_GENERATORS:
                raise NotData(f"{path} is a numpy Generator over {name} (not one of "
                              f"{sorted(_BIT_GENERATORS)})")
            return {"kind": "generator", "bit_generator": name,
                    "state": self.value(value.bit_generator.state, f"{path}.bit_generator.state")}
        if isinstance(value, np.random.RandomState):
            return {"kind": "random_state",
                    "state": self.value(value.get_state(legacy=False), f"{path}.state")}
        if isinstance(value, random.Random):
            version, internal, gauss = value.getstate()
            return {"kind": "random", "state": [version, list(internal), gauss]}
        if isinstance(value, torch.Generator):
            return {"kind": "torch_generator", "state": value.get_state()}
        if isinstance(value, collections.deque):
            return {"kind": "deque", "maxlen": value.maxlen,
                    "items": [self.value(item, f"{path}[{i}]") for i, item in enumerate(value)]}
        if isinstance(value, (list, tuple)):
            return {"kind": "list" if isinstance(value, list) else "tuple",
                    "items": [self.value(item, f"{path}[{i}]") for i, item in enumerate(value)]}
        if isinstance(value, dict):
            keys = list(value)
            if not all(isinstance(key, (str, int)) for key in keys):
                raise NotData(f"{path} is a dict with keys other than strings and ints")
            return {"kind": "dict", "keys": keys,
                    "values": [self.value(value[key], f"{path}[{key!r}]") for key in keys]}
        if _is_python_object(value):
            return {"kind": "object", "class": _class_name(value),
                    "attrs": {name: self.value(item, f"{path}.{name}") for name, item in vars(value).items()}}
        raise NotData(f"{path} is a {_class_name(value)}, which is not data (numbers, strings, arrays, "
                      "tensors, generators, containers of them or Python objects holding them)")


class _Restore:
    """Plans the writes of a restore (phase one, nothing changes) into ``actions``."""

    def __init__(self, actions: list[Callable[[], object]]) -> None:
        self.actions = actions
        self.at: dict[str, Any] = {}  # path -> the live value restored there ("same" refers to it)

    def value(self, live: Any, state: Any, path: str) -> Any:
        """The value to hold at ``path`` once restored (``live`` itself where written in place)."""
        if isinstance(state, (*_PLAIN, torch.Tensor)):
            return state.clone() if isinstance(state, torch.Tensor) else state
        if not isinstance(state, dict) or not isinstance(state.get("kind"), str):
            raise Refused(f"{path}: {type(state).__name__} is not an env state's value (plain data or "
                             "a mapping with a 'kind')")
        kind = state["kind"]
        if kind == "code":
            return live
        if kind == "same":
            if state.get("path") not in self.at:
                raise Refused(f"{path} refers to {state.get('path')!r}, which the state does not hold "
                                 "before it")
            return self.at[state["path"]]
        method = getattr(self, f"_{kind}", None)
        if method is None:
            raise Refused(f"{path}: kind {kind!r} is not one an env state holds")
        try:
            restored = method(live, state, path)
        except Refused:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as error:
            raise Refused(f"{path}: not a {kind!r} value as capture() writes it ({type(error).__name__}: "
                          f"{error})") from None
        self.at[path] = restored
        return restored

    def _dtype(self, live: Any, state: dict[str, Any], path: str) -> Any:
        dtype = np.dtype(str(state["str"]))
        if dtype.kind not in _ARRAY_KINDS:
            raise Refused(f"{path}: dtype {dtype} is not data")
        return dtype

    def _array(self, live: Any, state: dict[str, Any], path: str) -> Any:
        dtype = self._dtype(live, {"str": state["dtype"]}, path)
        array = np.frombuffer(state["data"], dtype=dtype).reshape([int(n) for n in state["shape"]]).copy()
        if isinstance(live, np.ndarray) and live.shape == array.shape and live.dtype == dtype \
                and live.flags.writeable:
            self.actions.append(lambda: np.copyto(live, array))  # in place: views of it stay views
            return live
        return array

    def _scalar(self, live: Any, state: dict[str, Any], path: str) -> Any:
        return self._array(None, state, path)[()]

    def _generator(self, live: Any, state: dict[str, Any], path: str) -> Any:
        name = state["bit_generator"]
        if name not in _BIT_GENERATORS:
            raise Refused(f"{path}: bit generator {name!r} is not one of {sorted(_BIT_GENERATORS)}")
        data = self.value(None, state["state"], f"{path}.bit_generator.state")
        fresh = np.random.Generator(_BIT_GENERATORS[name]())
        try:
            fresh.bit_generator.state = data  # checked on a new object: nothing live changes yet
        except (TypeError, ValueError, KeyError) as error:
            raise Refused(f"{path}: not a {name} state ({error})") from None
        if isinstance(live, np.random.Generator) and type(live.bit_generator).__name__ == name:
            self.actions.append(lambda: setattr(live.bit_generator, "state", data))
            return live
        return fresh

    def _random_state(self, live: Any, state: dict[str, Any], path: str) -> Any:
        data = self.value(None, state["state"], f"{path}.state")
        np.random.RandomState().set_state(data)  # checked on a scratch copy first
        target = live if isinstance(live, np.random.RandomState) else np.random.RandomState()
        self.actions.append(lambda: target.set_state(data))
        return target

    def _random(self, live: Any, state: dict[str, Any], path: str) -> Any:
        version, internal, gauss = state["state"]
        random.Random().setstate((version, tuple(internal), gauss))  # checked on a scratch copy first
        target = live if isinstance(live, random.Random) else random.Random()
        self.actions.append(lambda: target.setstate((version, tuple(internal), gauss)))
        return target

    def _torch_generator(self, live: Any, state: dict[str, Any], path: str) -> Any:
        torch.Generator().set_state(state["state"])  # checked on a scratch generator first
        target = live if isinstance(live, torch.Generator) else torch.Generator()
        self.actions.append(lambda: target.set_state(state["state"]))
        return target

    def _items(self, live: Any, state: dict[str, Any], path: str) -> list[Any]:
        items = state["items"]
        same = isinstance(live, (list, tuple, collections.deque)) and len(live) == len(items)
        return [self.value(live[i] if same else None, item, f"{path}[{i}]") for i, item in enumerate(items)]

    def _list(self, live: Any, state: dict[str, Any], path: str) -> Any:
        items = self._items(live, state, path)
        if isinstance(live, list):
            self.actions.append(lambda: live.__setitem__(slice(None), items))
            return live
        return items

    def _tuple(self, live: Any, state: dict[str, Any], path: str) -> Any:
        return tuple(self._items(live, state, path))

    def _deque(self, live: Any, state: dict[str, Any], path: str) -> Any:
        items = self._items(live, state, path)
        if isinstance(live, collections.deque) and live.maxlen == state["maxlen"]:
            self.actions.append(functools.partial(_refill, live, items))
            return live
        return collections.deque(items, maxlen=state["maxlen"])

    def _dict(self, live: Any, state: dict[str, Any], path: str) -> Any:
        keys, values = list(state["keys"]), list(state["values"])
        held = live if isinstance(live, dict) else {}
        restored = {key: self.value(held.get(key), value, f"{path}[{key!r}]")
                    for key, value in zip(keys, values, strict=True)}
        if isinstance(live, dict):
            self.actions.append(functools.partial(_refill, live, restored))
            return live
        return restored

    def _object(self, live: Any, state: dict[str, Any], path: str) -> Any:
        if not _is_python_object(live) or _class_name(live) != state["class"]:
            raise Refused(f"{path} is a {_class_name(live)} here and a {state['class']} in the state: "
                             "the state was taken of other envs")
        self.at[path] = live  # an attribute may refer back to the object that holds it
        attrs = vars(live)
        for name, value in dict(state["attrs"]).items():
            restored = self.value(attrs.get(name), value, f"{path}.{name}")
            if restored is not attrs.get(name):
                self.actions.append(functools.partial(setattr, live, name, restored))
        return live
