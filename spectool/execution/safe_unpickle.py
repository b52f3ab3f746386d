"""Bounded, allow-listed unpickling of what an untrusted worker sends to the host.

A pickle is a program: ``REDUCE`` calls any callable the stream names with arguments
the stream builds. A hostile cell controls the pickles its worker sends (it shares the
worker's process and can replace its serializer), so the host rebuilds them with
:func:`safe_loads`, in three phases:

1. **Load, with nothing hashed.** The stream runs on a pure-Python unpickler (so a
   caller may run it in a worker thread: the interpreter hands the GIL back to the
   event loop every few milliseconds, which the C unpickler never does). Only plain
   containers and values, built-in exception types and spectool's own exceptions may
   be named; the container constructors accept only arguments already materialised in
   the stream (``bytearray(10**10)`` or ``set(range(10**12))`` are refused instead of
   built). Dicts, sets and frozensets are *not* built while loading: their items are
   collected in placeholders, so no attacker-shaped key is hashed yet (hashing a
   300,000-deep tuple crashes C code that recurses without a guard; thousands of
   integers with one hash make insertion quadratic). Bounds checked as each object is
   made: the objects made and references taken (``max_nodes``) and the nesting of
   tuples and frozensets, the only containers that hash their items (``max_depth``).
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

import _compat_pickle
import builtins
import collections
import codecs
import pickle
import struct
from struct import error as struct_error
from typing import Any, Callable

__all__ = ["safe_loads", "UnsafePickleError", "check_shape"]

# equal-hash probes allowed while rebuilding one value's dicts and sets (sum over their
# colliding groups of size**2): ~15 ms of insertion work at worst
MAX_COLLISION_WORK = 1 << 20


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle names a forbidden constructor or builds a value beyond the bounds."""


# ------------------------------------------------------------ deferred containers
class _Pending:
    """Items of a dict, set or frozenset, collected while loading (nothing hashed)."""

    __slots__ = ("kind", "items")

    def __init__(self, kind: str, items: list | None = None) -> None:
        self.kind = kind               # "dict" | "odict" | "set" | "frozenset"
        self.items = [] if items is None else items   # dicts: [k, v, k, v, ...]


def _materialised(value: Any, what: str) -> Any:
    if type(value) not in (list, tuple):
        raise UnsafePickleError(f"{what}() from the worker accepts only a list or tuple, "
                                f"not {type(value).__name__}")
    return value


def _set(items: Any = ()) -> _Pending:
    return _Pending("set", list(_materialised(items, "set")))


def _frozenset(items: Any = ()) -> _Pending:
    return _Pending("frozenset", list(_materialised(items, "frozenset")))


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


def _ordered_dict(items: Any = ()) -> _Pending:
    flat: list = []
    for pair in _materialised(items, "OrderedDict"):
        if type(pair) not in (list, tuple) or len(pair) != 2:
            raise UnsafePickleError("OrderedDict() from the worker: items must be pairs")
        flat.extend(pair)
    return _Pending("odict", flat)


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


def _str_keyed(state: Any, what: str) -> dict:
    """An attribute dict from the stream (exception state): str keys only."""
    if state is None:
        return {}
    if not isinstance(state, _Pending) or state.kind != "dict":
        raise UnsafePickleError(f"{what}: the state must be a dict")
    keys = state.items[0::2]
    if any(type(k) is not str for k in keys):
        raise UnsafePickleError(f"{what}: attribute names must be str")
    return dict(zip(keys, state.items[1::2]))


def _spectool_rebuild(cls: Any, args: Any, state: Any) -> BaseException:
    from .. import errors
    if not (isinstance(cls, type) and issubclass(cls, BaseException)
            and getattr(errors, cls.__name__, None) is cls):
        raise UnsafePickleError("spectool.errors._rebuild only rebuilds spectool's exceptions")
    if type(args) is not tuple:
        raise UnsafePickleError("spectool.errors._rebuild: malformed arguments")
    return errors._rebuild(cls, args, _str_keyed(state, "spectool.errors._rebuild"))


# ------------------------------------------------------------ phase 1: loading
_PIECE = 1 << 20     # large strings are read and decoded in pieces of this size


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


_HASHING = (tuple, _Pending)      # what may end up hashed as (part of) a key


class _BoundedUnpickler(pickle._Unpickler):  # type: ignore[name-defined]
    """The pure-Python unpickler with an allow-list, deferred dicts and sets, and
    bounds checked as objects are made."""

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, data: bytes, max_nodes: int, max_depth: int,
                 checkpoint: Callable[[], None] | None) -> None:
        super().__init__(_ChunkReader(data))
        self.max_nodes = max_nodes
        self.max_depth = max_depth
        self.made = 0
        # id -> (tuple or frozenset placeholder, its hash depth); holding the object
        # keeps its id from being reused while loading
        self.depths: dict[int, tuple[Any, int]] = {}
        self.checkpoint = checkpoint
        self.pending = 0               # placeholders made: nothing to rebuild without one

    # -- allow-list ---------------------------------------------------------------
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
            from .. import errors
            if name == "_rebuild":
                return _spectool_rebuild
            obj = getattr(errors, name, None)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                return obj
        raise UnsafePickleError(f"not allowed from the worker: {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("persistent ids are not allowed from the worker")

    # -- bounds -------------------------------------------------------------------
    def _count(self, n: int = 1) -> None:
        self.made += n
        if self.made > self.max_nodes:
            raise UnsafePickleError(f"value from the worker has more than {self.max_nodes} "
                                    "nodes")
        if self.checkpoint is not None and self.made & 0x3FFF == 0:
            self.checkpoint()

    def _hash_depth(self, items: Any) -> int:
        depth = 0
        for item in items:
            if isinstance(item, _HASHING):
                known = self.depths.get(id(item))
                if known is not None and known[1] > depth:
                    depth = known[1]
        depth += 1
        if depth > self.max_depth:
            raise UnsafePickleError(f"value from the worker is nested deeper than "
                                    f"{self.max_depth}")
        return depth

    def _push_tuple(self, items: Any) -> None:
        value = tuple(items)
        self._count()
        if value:
            self.depths[id(value)] = (value, self._hash_depth(value))
        self.append(value)

    def _make_pending(self, pending: _Pending) -> _Pending:
        self._count()
        self.pending += 1
        if pending.kind == "frozenset":
            self.depths[id(pending)] = (pending, self._hash_depth(pending.items))
        return pending

    # -- opcodes that build containers ----------------------------------------------
    def load_tuple(self) -> None:
        self._push_tuple(self.pop_mark())

    def _text(self, n: int) -> None:
        """UTF-8 text of ``n`` bytes, read and decoded piece by piece (the interpreter
        may switch threads between pieces; only the final join is one long step)."""
        if n <= _PIECE:
            self.append(str(self.read(n), "utf-8", "surrogatepass"))
            return
        decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        parts = []
        while n > 0:
            piece = self.read(min(n, _PIECE))
            if not piece:
                raise UnsafePickleError("pickle from the worker ends inside a string")
            parts.append(decoder.decode(piece))
            n -= len(piece)
        parts.append(decoder.decode(b"", final=True))
        self.append("".join(parts))

    def load_binunicode(self) -> None:
        (n,) = struct.unpack("<I", self.read(4))
        self._text(n)

    def load_binunicode8(self) -> None:
        (n,) = struct.unpack("<Q", self.read(8))
        self._text(n)

    def load_empty_tuple(self) -> None:
        self._count()
        self.append(())

    def load_empty_list(self) -> None:
        self._count()
        self.append([])

    def load_list(self) -> None:
        items = self.pop_mark()
        self._count()
        self.append(items)

    def load_empty_dictionary(self) -> None:
        self.append(self._make_pending(_Pending("dict")))

    def load_dict(self) -> None:
        items = self.pop_mark()
        if len(items) % 2:
            raise UnsafePickleError("DICT with an odd number of items")
        self.append(self._make_pending(_Pending("dict", items)))

    def load_empty_set(self) -> None:
        self.append(self._make_pending(_Pending("set")))

    def load_frozenset(self) -> None:
        items = self.pop_mark()        # (it switches self.append to the outer stack)
        self.append(self._make_pending(_Pending("frozenset", items)))

    def _target(self, kinds: tuple[str, ...], opcode: str) -> _Pending:
        target = self.stack[-1]
        if not isinstance(target, _Pending) or target.kind not in kinds:
            raise UnsafePickleError(f"{opcode} on a {type(target).__name__} from the worker")
        return target

    def load_setitem(self) -> None:
        value = self.stack.pop()
        key = self.stack.pop()
        self._target(("dict", "odict"), "SETITEM").items += (key, value)

    def load_setitems(self) -> None:
        items = self.pop_mark()
        if len(items) % 2:
            raise UnsafePickleError("SETITEMS with an odd number of items")
        self._target(("dict", "odict"), "SETITEMS").items += items

    def load_additems(self) -> None:
        items = self.pop_mark()
        self._target(("set",), "ADDITEMS").items += items

    def load_build(self) -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        if not isinstance(inst, BaseException):
            raise UnsafePickleError(f"BUILD on a {type(inst).__name__} from the worker")
        inst.__setstate__(_str_keyed(state, "exception state"))

    def load_appends(self) -> None:
        items = self.pop_mark()
        target = self.stack[-1]
        if type(target) is not list and type(target) is not collections.deque:
            raise UnsafePickleError(f"APPENDS on a {type(target).__name__} from the worker")
        target.extend(items)

    def load_append(self) -> None:
        value = self.stack.pop()
        target = self.stack[-1]
        if type(target) is not list and type(target) is not collections.deque:
            raise UnsafePickleError(f"APPEND on a {type(target).__name__} from the worker")
        target.append(value)

    def load_reduce(self) -> None:
        args = self.stack.pop()
        func = self.stack[-1]
        if type(args) is not tuple:
            raise UnsafePickleError("REDUCE with arguments that are not a tuple")
        value = func(*args)
        if isinstance(value, _Pending):      # set(), frozenset(), OrderedDict()
            self._make_pending(value)
        else:
            self._count()
        self.stack[-1] = value

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        if not (isinstance(cls, type) and issubclass(cls, BaseException)) \
                or type(args) is not tuple:
            raise UnsafePickleError("NEWOBJ is allowed from the worker for exceptions only")
        self._count()
        self.append(cls.__new__(cls, *args))

    def load_obj(self) -> None:
        raise UnsafePickleError("OBJ is not allowed from the worker")

    def load_inst(self) -> None:
        raise UnsafePickleError("INST is not allowed from the worker")

    def load_newobj_ex(self) -> None:
        raise UnsafePickleError("NEWOBJ_EX is not allowed from the worker")


def _tuple_n(n: int) -> Callable[[_BoundedUnpickler], None]:
    def load(self: _BoundedUnpickler) -> None:
        items = self.stack[-n:]
        del self.stack[-n:]
        self._push_tuple(items)
    load.__name__ = f"load_tuple{n}"
    return load


def _counting(original: Callable[[Any], None]) -> Callable[[_BoundedUnpickler], None]:
    """A memo read counts as a node: references are how a small stream grows a tree."""
    def load(self: _BoundedUnpickler) -> None:
        self._count()
        original(self)
    load.__name__ = original.__name__
    return load


_D = _BoundedUnpickler.dispatch
for _op, _fn in {
    pickle.TUPLE: _BoundedUnpickler.load_tuple, pickle.TUPLE1: _tuple_n(1),
    pickle.TUPLE2: _tuple_n(2), pickle.TUPLE3: _tuple_n(3),
    pickle.EMPTY_TUPLE: _BoundedUnpickler.load_empty_tuple,
    pickle.EMPTY_LIST: _BoundedUnpickler.load_empty_list,
    pickle.LIST: _BoundedUnpickler.load_list,
    pickle.EMPTY_DICT: _BoundedUnpickler.load_empty_dictionary,
    pickle.DICT: _BoundedUnpickler.load_dict,
    pickle.EMPTY_SET: _BoundedUnpickler.load_empty_set,
    pickle.FROZENSET: _BoundedUnpickler.load_frozenset,
    pickle.SETITEM: _BoundedUnpickler.load_setitem,
    pickle.SETITEMS: _BoundedUnpickler.load_setitems,
    pickle.ADDITEMS: _BoundedUnpickler.load_additems,
    pickle.BUILD: _BoundedUnpickler.load_build,
    pickle.BINUNICODE: _BoundedUnpickler.load_binunicode,
    pickle.BINUNICODE8: _BoundedUnpickler.load_binunicode8,
    pickle.APPENDS: _BoundedUnpickler.load_appends,
    pickle.APPEND: _BoundedUnpickler.load_append,
    pickle.REDUCE: _BoundedUnpickler.load_reduce,
    pickle.NEWOBJ: _BoundedUnpickler.load_newobj,
    pickle.NEWOBJ_EX: _BoundedUnpickler.load_newobj_ex,
    pickle.OBJ: _BoundedUnpickler.load_obj,
    pickle.INST: _BoundedUnpickler.load_inst,
}.items():
    _D[_op[0]] = _fn
for _op in (pickle.GET, pickle.BINGET, pickle.LONG_BINGET):
    _D[_op[0]] = _counting(_D[_op[0]])
del _D, _op, _fn


# ------------------------------------------------------------ phase 2: shape
_LEAVES = (str, bytes, bytearray, int, float, bool, complex, type(None), range, slice)


def _children(obj: Any) -> Any:
    """The parts of a non-leaf value, or None for a leaf; refuses unknown types."""
    if isinstance(obj, _LEAVES):
        return None
    if type(obj) in (list, tuple, collections.deque):
        return obj
    if type(obj) is _Pending:
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
        if kind is _Pending:
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
        loader = _BoundedUnpickler(data, limit, max_depth, checkpoint)
        value = loader.load()
        check_shape(value, max_nodes=limit, max_depth=max_depth)
        return _Rebuilder(max_collisions).run(value) if loader.pending else value
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            KeyError, IndexError, OverflowError, UnicodeDecodeError, struct_error) as exc:
        raise UnsafePickleError(f"malformed pickle from the worker: "
                                f"{type(exc).__name__}: {exc}"[:300]) from None
