"""Phase 1 of safe unpickling: loading an untrusted pickle with an allow-list and bounds.

The stream runs on a pure-Python unpickler (:class:`BoundedUnpickler`; a caller may
run it in a worker thread: the interpreter hands the GIL back to the event loop every
few milliseconds, which the C unpickler never does). Only plain containers and values,
built-in exception types and spectool's own exceptions may be named; the container
constructors accept only arguments already materialised in the stream
(``bytearray(10**10)`` or ``set(range(10**12))`` are refused instead of built). Dicts,
sets and frozensets are *not* built while loading: their items are collected in
:class:`Pending` placeholders, so no attacker-shaped key is hashed yet. Bounds checked
as each object is made: the objects made and references taken (``max_nodes``) and the
nesting of tuples and frozensets, the only containers that hash their items
(``max_depth``). The whole procedure (shape check, rebuild) is
:func:`spectool.execution.safe_unpickle.safe_loads`.
"""

from __future__ import annotations

import _compat_pickle
import builtins
import codecs
import collections
import pickle
import struct
from typing import Any, Callable

__all__ = ["UnsafePickleError", "Pending", "BoundedUnpickler"]


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle names a forbidden constructor or builds a value beyond the bounds."""


# ------------------------------------------------------------ deferred containers
class Pending:
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


def _set(items: Any = ()) -> Pending:
    return Pending("set", list(_materialised(items, "set")))


def _frozenset(items: Any = ()) -> Pending:
    return Pending("frozenset", list(_materialised(items, "frozenset")))


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


def _ordered_dict(items: Any = ()) -> Pending:
    flat: list = []
    for pair in _materialised(items, "OrderedDict"):
        if type(pair) not in (list, tuple) or len(pair) != 2:
            raise UnsafePickleError("OrderedDict() from the worker: items must be pairs")
        flat.extend(pair)
    return Pending("odict", flat)


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
    if not isinstance(state, Pending) or state.kind != "dict":
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

_HASHING = (tuple, Pending)      # what may end up hashed as (part of) a key


class BoundedUnpickler(pickle._Unpickler):  # type: ignore[name-defined]
    """The pure-Python unpickler with an allow-list, deferred dicts and sets, and
    bounds checked as objects are made."""

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, file: Any, max_nodes: int, max_depth: int,
                 checkpoint: Callable[[], None] | None) -> None:
        super().__init__(file)
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

    def _make_pending(self, pending: Pending) -> Pending:
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
        self.append(self._make_pending(Pending("dict")))

    def load_dict(self) -> None:
        items = self.pop_mark()
        if len(items) % 2:
            raise UnsafePickleError("DICT with an odd number of items")
        self.append(self._make_pending(Pending("dict", items)))

    def load_empty_set(self) -> None:
        self.append(self._make_pending(Pending("set")))

    def load_frozenset(self) -> None:
        items = self.pop_mark()        # (it switches self.append to the outer stack)
        self.append(self._make_pending(Pending("frozenset", items)))

    def _target(self, kinds: tuple[str, ...], opcode: str) -> Pending:
        target = self.stack[-1]
        if not isinstance(target, Pending) or target.kind not in kinds:
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

    def _sequence(self, opcode: str) -> list | collections.deque:
        """The list or deque on top of the stack, which ``opcode`` appends to."""
        target = self.stack[-1]
        if type(target) is not list and type(target) is not collections.deque:
            raise UnsafePickleError(f"{opcode} on a {type(target).__name__} from the worker")
        return target

    def load_appends(self) -> None:
        items = self.pop_mark()
        self._sequence("APPENDS").extend(items)

    def load_append(self) -> None:
        value = self.stack.pop()
        self._sequence("APPEND").append(value)

    def load_reduce(self) -> None:
        args = self.stack.pop()
        func = self.stack[-1]
        if type(args) is not tuple:
            raise UnsafePickleError("REDUCE with arguments that are not a tuple")
        value = func(*args)
        if isinstance(value, Pending):      # set(), frozenset(), OrderedDict()
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


def _tuple_n(n: int) -> Callable[[BoundedUnpickler], None]:
    def load(self: BoundedUnpickler) -> None:
        items = self.stack[-n:]
        del self.stack[-n:]
        self._push_tuple(items)
    load.__name__ = f"load_tuple{n}"
    return load


def _counting(original: Callable[[Any], None]) -> Callable[[BoundedUnpickler], None]:
    """A memo read counts as a node: references are how a small stream grows a tree."""
    def load(self: BoundedUnpickler) -> None:
        self._count()
        original(self)
    load.__name__ = original.__name__
    return load


_D = BoundedUnpickler.dispatch
for _op, _fn in {
    pickle.TUPLE: BoundedUnpickler.load_tuple, pickle.TUPLE1: _tuple_n(1),
    pickle.TUPLE2: _tuple_n(2), pickle.TUPLE3: _tuple_n(3),
    pickle.EMPTY_TUPLE: BoundedUnpickler.load_empty_tuple,
    pickle.EMPTY_LIST: BoundedUnpickler.load_empty_list,
    pickle.LIST: BoundedUnpickler.load_list,
    pickle.EMPTY_DICT: BoundedUnpickler.load_empty_dictionary,
    pickle.DICT: BoundedUnpickler.load_dict,
    pickle.EMPTY_SET: BoundedUnpickler.load_empty_set,
    pickle.FROZENSET: BoundedUnpickler.load_frozenset,
    pickle.SETITEM: BoundedUnpickler.load_setitem,
    pickle.SETITEMS: BoundedUnpickler.load_setitems,
    pickle.ADDITEMS: BoundedUnpickler.load_additems,
    pickle.BUILD: BoundedUnpickler.load_build,
    pickle.BINUNICODE: BoundedUnpickler.load_binunicode,
    pickle.BINUNICODE8: BoundedUnpickler.load_binunicode8,
    pickle.APPENDS: BoundedUnpickler.load_appends,
    pickle.APPEND: BoundedUnpickler.load_append,
    pickle.REDUCE: BoundedUnpickler.load_reduce,
    pickle.NEWOBJ: BoundedUnpickler.load_newobj,
    pickle.NEWOBJ_EX: BoundedUnpickler.load_newobj_ex,
    pickle.OBJ: BoundedUnpickler.load_obj,
    pickle.INST: BoundedUnpickler.load_inst,
}.items():
    _D[_op[0]] = _fn
for _op in (pickle.GET, pickle.BINGET, pickle.LONG_BINGET):
    _D[_op[0]] = _counting(_D[_op[0]])
del _D, _op, _fn
