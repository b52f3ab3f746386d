"""Bounded, allow-listed unpickling of what an untrusted worker sends to the host.

A pickle is a program: ``REDUCE`` calls any callable the stream names with arguments
the stream builds. A hostile cell controls the pickles its worker sends (it shares the
worker's process), so the host rebuilds them with :func:`safe_loads`:

- **Constructors.** Only plain containers and values, built-in exception types and
  spectool's own exceptions may be named. The container constructors are wrapped so
  they only accept arguments that are already materialised in the stream (a list or
  tuple, bytes): ``bytearray(10**10)``, ``set(range(10**12))`` or
  ``deque(range(10**12))`` (a small pickle whose ``__reduce__`` builds a huge object)
  are refused instead of being built.
- **Sizes.** Everything else the stream can build costs at least one byte of stream
  per object, and the caller bounds the stream's length. Shared references can still
  make a small DAG whose *tree* is exponential (``a = [b, b]``, ``b = [c, c]``, ...),
  which would freeze the host when it later compares, copies or prints the value, and
  deep nesting can crash C code that recurses without a guard (hashing a deeply
  nested tuple). After loading, the value is walked iteratively, counting nodes with
  multiplicity: more than ``max_nodes`` (default: 4 per stream byte + 1000) or a
  depth above ``max_depth`` (default 1000), or a cycle, refuses it.
"""

from __future__ import annotations

import _compat_pickle
import builtins
import collections
import io
import pickle
from typing import Any

__all__ = ["safe_loads", "UnsafePickleError"]


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle names a forbidden constructor or builds a value beyond the bounds."""


def _materialised(value: Any, what: str) -> Any:
    if type(value) not in (list, tuple):
        raise UnsafePickleError(f"{what}() from the worker accepts only a list or tuple, "
                                f"not {type(value).__name__}")
    return value


def _set(items: Any = ()) -> set:
    return set(_materialised(items, "set"))


def _frozenset(items: Any = ()) -> frozenset:
    return frozenset(_materialised(items, "frozenset"))


def _bytearray(data: Any = b"", encoding: Any = None) -> bytearray:
    if type(data) is str and type(encoding) is str:   # protocol <= 2 spells bytes this way
        return bytearray(data, encoding)
    if type(data) not in (bytes, bytearray) or encoding is not None:
        raise UnsafePickleError("bytearray() from the worker accepts only bytes")
    return bytearray(data)


def _complex(real: Any = 0, imag: Any = 0) -> complex:
    if type(real) not in (int, float) or type(imag) not in (int, float):
        raise UnsafePickleError("complex() from the worker accepts only numbers")
    return complex(real, imag)


def _deque(items: Any = (), maxlen: Any = None) -> collections.deque:
    if maxlen is not None and type(maxlen) is not int:
        raise UnsafePickleError("deque() from the worker: maxlen must be an int")
    return collections.deque(_materialised(items, "deque"), maxlen)


def _ordered_dict(items: Any = ()) -> collections.OrderedDict:
    return collections.OrderedDict(_materialised(items, "OrderedDict"))


def _latin1(text: Any, encoding: Any = "latin1") -> bytes:
    """_codecs.encode as protocol <= 2 uses it for bytes: the text is in the stream."""
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError("_codecs.encode() from the worker: only latin1 text")
    return text.encode("latin1")


# lazy or constant-size objects may be built as named
_PLAIN = {"slice": slice, "range": range}
_WRAPPED = {("builtins", "set"): _set, ("builtins", "frozenset"): _frozenset,
            ("builtins", "bytearray"): _bytearray, ("builtins", "complex"): _complex,
            ("collections", "deque"): _deque, ("collections", "OrderedDict"): _ordered_dict,
            ("_codecs", "encode"): _latin1}


def _spectool_rebuild(cls: Any, args: Any, state: Any) -> BaseException:
    from . import errors
    if not (isinstance(cls, type) and issubclass(cls, BaseException)
            and getattr(errors, cls.__name__, None) is cls):
        raise UnsafePickleError("spectool.errors._rebuild only rebuilds spectool's exceptions")
    if type(args) is not tuple or type(state) is not dict:
        raise UnsafePickleError("spectool.errors._rebuild: malformed arguments")
    return errors._rebuild(cls, args, state)


class _AllowListUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        # protocols 0-2 spell names the Python 2 way (as pickle's own find_class maps them)
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        if (module, name) in _WRAPPED:
            return _WRAPPED[(module, name)]
        if module == "builtins":
            if name in _PLAIN:
                return _PLAIN[name]
            obj = getattr(builtins, name, None)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                return obj
        elif module == "spectool.errors":
            from . import errors
            if name == "_rebuild":
                return _spectool_rebuild
            obj = getattr(errors, name, None)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                return obj
        raise UnsafePickleError(f"not allowed from the worker: {module}.{name}")


_LEAVES = (str, bytes, bytearray, int, float, bool, complex, type(None), range, slice)


def check_shape(value: Any, *, max_nodes: int, max_depth: int) -> None:
    """Refuse values whose tree (nodes counted with multiplicity) or depth is too big.

    Iterative: O(min(tree size, max_nodes)) time and stack, whatever the value.
    """
    nodes = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        obj, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise UnsafePickleError(f"value from the worker has more than {max_nodes} "
                                    "nodes (counting shared references), or a cycle")
        if depth > max_depth:
            raise UnsafePickleError(f"value from the worker is nested deeper than {max_depth}")
        if isinstance(obj, _LEAVES):
            continue
        if isinstance(obj, dict):
            children: Any = [x for kv in obj.items() for x in kv]
        elif isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
            children = obj
        elif isinstance(obj, BaseException):
            children = [obj.args, getattr(obj, "__dict__", {})]
        else:
            raise UnsafePickleError(f"unexpected type from the worker: {type(obj).__name__}")
        stack.extend((child, depth + 1) for child in children)


def safe_loads(data: bytes, *, max_nodes: int | None = None, max_depth: int = 1000) -> Any:
    """Unpickle ``data`` from an untrusted worker (see the module docstring)."""
    value = _AllowListUnpickler(io.BytesIO(data)).load()
    limit = max_nodes if max_nodes is not None else 4 * len(data) + 1000
    check_shape(value, max_nodes=limit, max_depth=max_depth)
    return value
