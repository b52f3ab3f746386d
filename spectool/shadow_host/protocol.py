"""The message protocol between the host and a shadow worker process (pure, no I/O).

The shadow evaluates untrusted, unfinished model code, so it runs in a worker
process (``spectool.shadow_host.worker``) and talks to the host only through the messages
below. Every message is one *frame*: a 4-byte big-endian length, then the payload.
One worker serves many turns at once, each under its own *lease*
(:data:`LEASE_BYTES` random bytes the host chose for the turn): every command is sent
as ``(lease, message)`` and every reply's payload starts with the lease of the turn it
belongs to (:data:`NO_LEASE` for ``ready``). The worker keeps one interpreter and one
namespace per lease; the host routes each reply to its turn by lease and drops a frame
of a lease no turn holds, so a frame a worker left in the channel after an earlier
turn is never read as another turn's.

Host -> worker (*commands*; the worker trusts its host): pickled ``(lease, message)``
pairs of plain data built by the host itself (``PlainCopier`` copies and sanitised
exceptions), so pickling them runs no user code::

    ("begin", tools, limits, cpu_seconds)  new interpreter and namespace for the turn
                                           of this lease (limits: the fields of a
                                           shadow ``Limits``, or None)
    ("names", {name: value})               REPL variables the cell mentions (snapshot)
    ("statement", source)                  run one closed statement
    ("resume", value, error)               the outcome of the call the statement waits on
    ("tail", tail)                         peek the open tail
    ("ahead", statements, tail, unknown)   peek statements queued behind a waiting one
    ("refresh",)                           look ahead again (a speculation finished)
    ("reply", payload)                     the answer to a worker request
    ("end",)                               the turn is over: drop its interpreter and
                                           namespace (also while one of its requests
                                           waits for a reply: that request is abandoned)

Worker -> host (*replies*): never unpickled. They are decoded by :func:`decode_reply`,
a bounded decoder of plain data (None, bool, int, float, str, list, tuple, dict with
str keys: exactly what ``keys.canonical`` accepts; anything else crosses as
:data:`NOT_PLAIN`) and then checked by :func:`parse_reply` against the message shapes::

    ("launch", tool, args, kwargs, origin)      request -> reply: handle id | None
    ("observe", tool, args, kwargs)             request -> reply: handle id | None
    ("lookahead_outcome", tool, args, kwargs, occurrence)
                                                request -> reply: (value, error) | None
    ("lookahead", bets)                         one-way
    ("wait", handle_id, looking)                final: the statement waits on a handle
    ("done",)                                   final: statement finished
    ("looking", bool)                           final: refresh finished
    ("bets", bets)                              final: a peek's bets
    ("error", text)                             final: the interpreter failed
    ("ready",)                                  once, when the worker starts serving

    bet = (tool, args, kwargs)

Wire format of a reply payload: ``[u32 header length][header][text]``. The header is
ASCII JSON holding the *structure* only (no JSON strings at all); every str of the
message is a slice of ``text`` (UTF-8 with lone surrogates passed through). Encoding
of a node: int / float / bool / null as JSON (a NaN is not plain: its sign and
identity would not survive); str ``[0, i]`` (the i-th slice); list
``[1, ...]``; tuple ``[2, ...]``; dict ``[3, k, v, ...]``; not plain ``[4]``. Last
element of the header: the slices' lengths in characters.

Why this shape: the decoder's cost must be bounded *before* it runs, or a hostile
worker could stall the host's event loop. A header without strings has at most
``count(",") + count("[") + 1`` nodes, counted in C before parsing; the header is at
most :data:`MAX_HEADER_BYTES`; the text is decoded by one C call. So a reply costs at
most ~MAX_NODES Python steps plus linear C work on at most :data:`MAX_REPLY_BYTES`.
Sizes, node count, depth, integer digits and message shapes are all checked; any
violation raises :class:`ProtocolError` (the host then kills that worker).
"""

from __future__ import annotations

import json
import pickle
import struct

__all__ = [
    "ProtocolError", "NotPlain", "NOT_PLAIN", "MAX_REPLY_BYTES", "MAX_HEADER_BYTES",
    "MAX_NODES", "MAX_DEPTH", "MAX_COMMAND_BYTES", "LENGTH", "frame", "encode_command",
    "decode_command", "encode_reply", "decode_reply", "parse_reply", "ReplyTooLarge",
    "is_request", "is_final", "LEASE_BYTES", "NO_LEASE", "lease_frame", "split_lease",
]

LENGTH = struct.Struct(">I")          # frame length prefix
MAX_REPLY_BYTES = 8 << 20             # one worker -> host frame (2x the store's
                                      # default argument bytes in flight)
MAX_HEADER_BYTES = 256 << 10          # its structure part
MAX_NODES = 32_768                    # nodes in one reply
MAX_DEPTH = 72                        # keys.MAX_DEPTH (64) + the message envelope
MAX_COMMAND_BYTES = 1 << 30           # one host -> worker frame (namespace snapshots)
MAX_INT_DIGITS = 1_300                # ~4300 bits; larger ints cross as NOT_PLAIN
MAX_TEXT_CHARS = 1_000                # an "error" reply's text
MAX_NAME_CHARS = 200                  # a tool name

_REQUESTS = {"launch", "observe", "lookahead_outcome"}
_FINALS = {"wait", "done", "looking", "bets", "error"}
_ORIGINS = ("statement", "tail")


class ProtocolError(Exception):
    """A frame or message that breaks the protocol (the worker is then killed)."""


class ReplyTooLarge(Exception):
    """Worker side: a reply would exceed the protocol's bounds."""


class NotPlain:
    """Stands for a value that is not plain data (the store declines such calls)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not plain data>"


NOT_PLAIN = NotPlain()


LEASE_BYTES = 16                      # a reply's lease nonce
NO_LEASE = bytes(LEASE_BYTES)         # "ready", sent before any lease


def frame(payload: bytes) -> bytes:
    return LENGTH.pack(len(payload)) + payload


def lease_frame(lease: bytes, reply_frame: bytes) -> bytes:
    """A reply frame (from :func:`encode_reply`) bound to a lease (worker side)."""
    body = memoryview(reply_frame)[LENGTH.size:]
    return LENGTH.pack(LEASE_BYTES + len(body)) + lease + body


def split_lease(payload: bytes) -> tuple[bytes, memoryview]:
    """A reply frame's payload -> (its lease, the reply payload for decode_reply,
    without a copy)."""
    if len(payload) < LEASE_BYTES:
        raise ProtocolError("reply frame without its lease")
    return bytes(payload[:LEASE_BYTES]), memoryview(payload)[LEASE_BYTES:]


# ---------------------------------------------------------------- host -> worker
def encode_command(msg: tuple, lease: bytes = NO_LEASE) -> bytes:
    """A command frame for the turn of ``lease``. ``msg`` must hold plain data only
    (the host's own copies)."""
    return frame(pickle.dumps((lease, msg), protocol=pickle.HIGHEST_PROTOCOL))


def decode_command(payload: bytes) -> tuple[bytes, tuple]:
    """Worker side only (the host is trusted): ``(lease, message)``."""
    lease, msg = pickle.loads(payload)
    return lease, msg


# ---------------------------------------------------------------- worker -> host
class _Encoder:
    """Plain data -> (header tree, text slices); non-plain parts become ``[4]``."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.nodes = 0

    def node(self, value: object, depth: int) -> object:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ReplyTooLarge("too many nodes")
        t = type(value)
        if value is None or t is bool:
            return value
        if t is float:   # a NaN's sign and identity do not cross: not plain
            return value if value == value else [4]
        if t is int:
            # |value| < 10**MAX_INT_DIGITS, checked by bit length (no str conversion)
            return value if value.bit_length() <= 3.32 * (MAX_INT_DIGITS - 1) else [4]
        if t is str:
            self.texts.append(value)
            return [0, len(self.texts) - 1]
        if depth >= MAX_DEPTH:
            return [4]
        if t is list or t is tuple:
            return [1 if t is list else 2, *[self.node(v, depth + 1) for v in value]]
        if t is dict:
            out: list = [3]
            for k, v in value.items():
                if type(k) is not str:
                    return [4]
                out.append(self.node(k, depth + 1))
                out.append(self.node(v, depth + 1))
            return out
        return [4]


def encode_reply(msg: tuple) -> bytes:
    """A reply frame (worker side). Raises :class:`ReplyTooLarge` past the bounds."""
    enc = _Encoder()
    tree = enc.node(msg, 0)
    header = json.dumps([tree, [len(s) for s in enc.texts]], separators=(",", ":"),
                        allow_nan=True).encode("ascii")
    if len(header) > MAX_HEADER_BYTES:
        raise ReplyTooLarge("header too large")
    text = "".join(enc.texts).encode("utf-8", "surrogatepass")
    payload = LENGTH.pack(len(header)) + header + text
    if len(payload) > MAX_REPLY_BYTES:
        raise ReplyTooLarge("reply too large")
    return frame(payload)


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS + 1:
        raise ProtocolError("integer too long")
    return int(text)


def decode_reply(payload: bytes) -> object:
    """Decode one reply payload (the frame without its length prefix) into plain data.

    Cost bound: the checks before ``json.loads`` are C-speed scans; the walk visits at
    most MAX_NODES nodes at depth <= MAX_DEPTH."""
    if len(payload) > MAX_REPLY_BYTES:
        raise ProtocolError("reply frame too large")
    if len(payload) < LENGTH.size:
        raise ProtocolError("reply frame too short")
    (hlen,) = LENGTH.unpack_from(payload)
    if hlen > MAX_HEADER_BYTES or hlen > len(payload) - LENGTH.size:
        raise ProtocolError("bad header length")
    header = bytes(payload[LENGTH.size:LENGTH.size + hlen])
    if b'"' in header or b"\\" in header or not header.isascii():
        raise ProtocolError("strings in the header")
    # upper bound on the nodes of a string-free JSON text: every node but the first
    # follows a "," or a "["
    if header.count(b",") + header.count(b"[") + 1 > MAX_NODES + 2:
        raise ProtocolError("too many nodes")
    try:
        top = json.loads(header, parse_int=_bounded_int)
        text = str(memoryview(payload)[LENGTH.size + hlen:], "utf-8", "surrogatepass")
    except ProtocolError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"undecodable reply: {type(exc).__name__}") from None
    if type(top) is not list or len(top) != 2 or type(top[1]) is not list:
        raise ProtocolError("bad reply envelope")
    lengths = top[1]
    if any(type(n) is not int or n < 0 for n in lengths) or sum(lengths) != len(text):
        raise ProtocolError("bad text slices")
    if len(lengths) == 1:
        slices = [text]                      # no copy of the usual one long argument
    else:
        slices, pos = [], 0
        for n in lengths:
            slices.append(text[pos:pos + n])
            pos += n
    return _Decoder(slices).node(top[0], 0)


class _Decoder:
    def __init__(self, slices: list[str]) -> None:
        self.slices = slices

    def node(self, item: object, depth: int) -> object:
        t = type(item)
        if item is None or t is bool or t is int:
            return item
        if t is float:
            return item if item == item else NOT_PLAIN   # NaN: never from a worker
        if t is not list or not item or type(item[0]) is not int:
            raise ProtocolError("bad node")
        code = item[0]
        if depth >= MAX_DEPTH and code in (1, 2, 3):   # leaves may sit at MAX_DEPTH
            raise ProtocolError("too deeply nested")
        if code == 0:
            if len(item) != 2 or type(item[1]) is not int or not 0 <= item[1] < len(self.slices):
                raise ProtocolError("bad string reference")
            return self.slices[item[1]]
        if code == 1:
            return [self.node(v, depth + 1) for v in item[1:]]
        if code == 2:
            return tuple(self.node(v, depth + 1) for v in item[1:])
        if code == 3:
            if len(item) % 2 != 1:
                raise ProtocolError("odd dict")
            out = {}
            for i in range(1, len(item), 2):
                k = self.node(item[i], depth + 1)
                if type(k) is not str:   # str keys only: no hash of worker-made values
                    raise ProtocolError("dict key is not a str")
                out[k] = self.node(item[i + 1], depth + 1)
            return out
        if code == 4 and len(item) == 1:
            return NOT_PLAIN
        raise ProtocolError("bad node code")


# ---------------------------------------------------------------- message shapes
def _name(v: object) -> str:
    if type(v) is not str or not 0 < len(v) <= MAX_NAME_CHARS:
        raise ProtocolError("bad tool name")
    return v


def _call(fields: tuple) -> tuple[str, tuple, dict]:
    name, args, kwargs = fields
    if type(args) is not tuple:
        args = (NOT_PLAIN,) if args is NOT_PLAIN else None
    if type(kwargs) is not dict:
        kwargs = {"_": NOT_PLAIN} if kwargs is NOT_PLAIN else None
    if args is None or kwargs is None:
        raise ProtocolError("bad call arguments")
    return _name(name), args, kwargs


def _bets(v: object) -> list[tuple[str, tuple, dict]]:
    if type(v) is not list:
        raise ProtocolError("bets are not a list")
    out = []
    for bet in v:
        if type(bet) is not tuple or len(bet) != 3:
            raise ProtocolError("bad bet")
        out.append(_call(bet))
    return out


def parse_reply(msg: object) -> tuple:
    """Check a decoded reply's shape; returns it normalised (raises ProtocolError)."""
    if type(msg) is not tuple or not msg or type(msg[0]) is not str:
        raise ProtocolError("a reply is a tuple starting with its kind")
    kind, fields = msg[0], msg[1:]
    n = len(fields)
    if kind == "launch" and n == 4:
        if fields[3] not in _ORIGINS:
            raise ProtocolError("bad origin")
        return (kind, *_call(fields[:3]), fields[3])
    if kind == "observe" and n == 3:
        return (kind, *_call(fields))
    if kind == "lookahead_outcome" and n == 4:
        occ = fields[3]
        if type(occ) is not int or not 0 <= occ < 1 << 31:
            raise ProtocolError("bad occurrence")
        return (kind, *_call(fields[:3]), occ)
    if kind == "lookahead" and n == 1:
        return (kind, _bets(fields[0]))
    if kind == "wait" and n == 2:
        if type(fields[0]) is not int or type(fields[1]) is not bool:
            raise ProtocolError("bad wait")
        return msg
    if kind in ("done", "ready") and n == 0:
        return msg
    if kind == "looking" and n == 1 and type(fields[0]) is bool:
        return msg
    if kind == "bets" and n == 1:
        return (kind, _bets(fields[0]))
    if kind == "error" and n == 1 and type(fields[0]) is str:
        return (kind, fields[0][:MAX_TEXT_CHARS])
    raise ProtocolError(f"unknown reply {kind[:40]!r} with {n} fields")


def is_request(msg: tuple) -> bool:
    return msg[0] in _REQUESTS


def is_final(msg: tuple) -> bool:
    return msg[0] in _FINALS
