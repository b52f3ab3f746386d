"""Bounded, allow-listed unpickling of what an untrusted worker sends to the host.

A pickle is a program: ``REDUCE`` calls any callable the stream names with arguments
the stream builds. A hostile cell controls the pickles its worker sends (it shares the
worker's process and can replace its serializer), so the host rebuilds them with
:func:`safe_loads`, in three phases:

1. **Load, with nothing hashed** (:mod:`spectool.execution.pickle_loader`): a
   pure-Python unpickler that names only allow-listed constructors, builds nothing
   from arguments not already in the stream and collects the items of dicts, sets
   and frozensets in placeholders, so no attacker-shaped key is hashed yet (hashing a
   300,000-deep tuple crashes C code that recurses without a guard; thousands of
   integers with one hash make insertion quadratic). Objects made and references
   taken (``max_nodes``) and the hashing depth (``max_depth``) are bounded as it goes.
2. **Check the shape.** The loaded value is walked iteratively, counting nodes with
   multiplicity (a small DAG whose *tree* is exponential is refused: the host would
   freeze comparing, copying or printing it), with the depth bound, refusing cycles.
3. **Rebuild dicts and sets** bottom-up, shared references kept. Before inserting the
   keys of one container they are hashed once (each key's depth is bounded, so this is
   safe) and the colliding groups are counted: the work of equal-hash probes (the sum
   of the squared group sizes) is charged to a budget for the whole value
   (``max_collisions``) and the value is refused past it, before any insertion.

Anything refused raises :class:`UnsafePickleError`; the caller bounds the stream's
length (every object costs at least one byte of stream).
"""

from __future__ import annotations

import collections
import pickle
from struct import error as struct_error
from typing import Any, Callable

from .pickle_loader import BoundedUnpickler, Pending, UnsafePickleError

__all__ = ["safe_loads", "UnsafePickleError", "check_shape"]

# equal-hash probes allowed while rebuilding one value's dicts and sets (sum over their
# colliding groups of size**2): ~15 ms of insertion work at worst
MAX_COLLISION_WORK = 1 << 20


# ------------------------------------------------------------ the payload as it arrived
class _ChunkReader:
    """A file over the payload as it arrived (a list of chunks): never one copy of the
    whole payload, and no single read much larger than what the opcode asks for."""

    def __init__(self, chunks: Any) -> None:
        if isinstance(chunks, (bytes, bytearray, memoryview)):
            chunks = [chunks]
        self.chunks = [c if type(c) is bytes else bytes(c) for c in chunks if len(c)]
        self.index = 0
        self.pos = 0

    def _take(self, n: int, stop: bytes | None = None) -> bytes:
        parts = []
        while n > 0 and self.index < len(self.chunks):
            chunk = self.chunks[self.index]
            end = min(len(chunk), self.pos + n)
            if stop is not None:                     # readline (protocol 0): no copy to search
                at = chunk.find(stop, self.pos, end)
                if at >= 0:
                    end = at + 1
                    n = 0
            parts.append(chunk[self.pos:end])
            n -= end - self.pos
            self.pos = end
            if self.pos == len(chunk):
                self.index, self.pos = self.index + 1, 0
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read(self, n: int = -1) -> bytes:
        return self._take(n if n >= 0 else 1 << 62)

    def readinto(self, buf: Any) -> int:
        data = self.read(len(buf))
        buf[:len(data)] = data
        return len(data)

    def readline(self) -> bytes:
        return self._take(1 << 62, b"\n")


# ------------------------------------------------------------ phase 2: shape
_LEAVES = (str, bytes, bytearray, int, float, bool, complex, type(None), range, slice)


def _children(obj: Any) -> Any:
    """The parts of a non-leaf value, or None for a leaf; refuses unknown types."""
    if isinstance(obj, _LEAVES):
        return None
    if type(obj) in (list, tuple, collections.deque):
        return obj
    if type(obj) is Pending:
        return obj.items
    if isinstance(obj, dict):
        return [x for kv in obj.items() for x in kv]
    if isinstance(obj, (set, frozenset)):
        return obj
    if isinstance(obj, BaseException):
        return [obj.args, getattr(obj, "__dict__", {})]
    raise UnsafePickleError(f"unexpected type from the worker: {type(obj).__name__}")


def check_shape(value: Any, *, max_nodes: int, max_depth: int) -> None:
    """Refuse values whose tree (nodes counted with multiplicity) or depth is too big.

    Iterative: O(min(tree size, max_nodes)) time and stack, whatever the value."""
    nodes = 1
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        obj, depth = stack.pop()
        children = _children(obj)
        if children is None:
            continue
        nodes += len(children)
        if nodes > max_nodes:
            raise UnsafePickleError(f"value from the worker has more than {max_nodes} "
                                    "nodes (counting shared references), or a cycle")
        if depth >= max_depth and children:
            raise UnsafePickleError(f"value from the worker is nested deeper than {max_depth}")
        stack.extend([(child, depth + 1) for child in children
                      if not isinstance(child, _LEAVES)])


# ------------------------------------------------------------ phase 3: rebuild
class _Rebuilder:
    """Turns placeholders into dicts and sets, bottom-up, sharing kept (the value is
    acyclic and bounded: :func:`check_shape` ran first)."""

    def __init__(self, max_collisions: int) -> None:
        self.done: dict[int, Any] = {}
        self.keep: list[Any] = []          # originals stay alive: their ids stay unique
        self.budget = max_collisions

    def get(self, obj: Any) -> Any:
        return self.done.get(id(obj), obj)

    def run(self, root: Any) -> Any:
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            obj, expanded = stack.pop()
            if id(obj) in self.done:
                continue
            children = _children(obj)
            if children is None:
                continue
            if not expanded:
                stack.append((obj, True))
                stack.extend((c, False) for c in children
                             if id(c) not in self.done and not isinstance(c, _LEAVES))
                continue
            self.keep.append(obj)
            self.done[id(obj)] = self.rebuilt(obj)
        return self.get(root)

    def rebuilt(self, obj: Any) -> Any:
        get = self.get
        kind = type(obj)
        if kind is list or kind is collections.deque:
            for i, item in enumerate(obj):
                new = get(item)
                if new is not item:
                    obj[i] = new
            return obj
        if kind is tuple:
            new_items = tuple(get(x) for x in obj)
            return obj if all(a is b for a, b in zip(new_items, obj)) else new_items
        if kind is Pending:
            items = [get(x) for x in obj.items]
            if obj.kind in ("dict", "odict"):
                keys = items[0::2]
                self.charge(keys)
                pairs = zip(keys, items[1::2])
                return collections.OrderedDict(pairs) if obj.kind == "odict" else dict(pairs)
            self.charge(items)
            return set(items) if obj.kind == "set" else frozenset(items)
        if isinstance(obj, dict):              # exception state (str keys, built already)
            for key, value in obj.items():
                new = get(value)
                if new is not value:
                    obj[key] = new
            return obj
        if isinstance(obj, BaseException):
            args = get(obj.args)
            if args is not obj.args:
                obj.args = args
            state = getattr(obj, "__dict__", None)
            if state:
                self.rebuilt(state)
            return obj
        return obj

    def charge(self, keys: list) -> None:
        """Hash the keys once and charge their collisions, before any insertion."""
        if len(keys) < 2:
            for key in keys:
                self.hash(key)
            return
        counts = collections.Counter(self.hash(key) for key in keys)
        if len(counts) == len(keys):
            return
        self.budget -= sum(c * c for c in counts.values() if c > 1)
        if self.budget < 0:
            raise UnsafePickleError("keys from the worker collide in their hashes "
                                    "beyond the bound (quadratic insertion refused)")

    @staticmethod
    def hash(key: Any) -> int:
        try:
            return hash(key)
        except TypeError:
            raise UnsafePickleError(f"unhashable key from the worker: "
                                    f"{type(key).__name__}") from None


def safe_loads(data: Any, *, max_nodes: int | None = None, max_depth: int = 1000,
               max_collisions: int = MAX_COLLISION_WORK,
               checkpoint: Callable[[], None] | None = None) -> Any:
    """Unpickle ``data`` (bytes, or a list of the chunks it arrived in) from an
    untrusted worker (see the module docstring).

    ``max_nodes`` defaults to 4 per stream byte + 1000. ``checkpoint`` is called every
    few thousand objects (``anyio.from_thread.check_cancelled`` when loading in a
    worker thread: a cancelled turn stops the load)."""
    size = (len(data) if isinstance(data, (bytes, bytearray, memoryview))
            else sum(len(c) for c in data))
    limit = max_nodes if max_nodes is not None else 4 * size + 1000
    try:
        loader = BoundedUnpickler(_ChunkReader(data), limit, max_depth, checkpoint)
        value = loader.load()
        check_shape(value, max_nodes=limit, max_depth=max_depth)
        return _Rebuilder(max_collisions).run(value) if loader.pending else value
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            KeyError, IndexError, OverflowError, UnicodeDecodeError, struct_error) as exc:
        raise UnsafePickleError(f"malformed pickle from the worker: "
                                f"{type(exc).__name__}: {exc}"[:300]) from None
