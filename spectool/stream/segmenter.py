"""Segmenter: text deltas of one model message -> code cells, closed statements, open tail.

Pure (no I/O imports). The segmenter buffers only the current physical line; each
complete line is lexed once (string / bracket / continuation state is carried from
line to line), and a top-level statement is parsed once, when it closes. Total cost is
linear in the message length however the deltas are split.

A cell starts at a line ```` ```repl ```` or ```` ```python ```` (any indentation; the
indentation of the fence is removed from the cell's lines) and ends at a line of three
or more backticks that is not inside a (triple-quoted) string literal of the cell. Fenced blocks of
other languages are skipped whole. Everything else is prose.

Statements: a top-level simple statement closes at the end of its logical line; a
compound statement (``if``/``for``/``def``/...) closes when the next line at the cell's
top indentation arrives that does not continue it (``else``/``elif``/``except``/
``finally``; a ``def``/``class`` after decorators), or when the cell closes. Once a
closed statement fails to parse, the cell is broken: no further statements of that
cell are reported (the real executor will not run a cell that does not parse).

Parsing runs on the caller's thread (the event loop, in the runtime) in one C call, so
its cost is bounded before it is paid: a statement longer than ``max_statement_chars``
(default ``MAX_STATEMENT_CHARS``), or one that would take the message's parsed text
past ``max_parsed_chars`` (default ``MAX_PARSED_CHARS``) or its parsed statements past
``max_parsed_statements`` (default ``MAX_PARSED_STATEMENTS``; their trees live for the
turn: garbage the collector has to walk), is not parsed; it is counted
in ``too_long`` and ends the cell's statements as a parse failure does (the shadow
sees nothing more of that cell; the real run, which compiles the whole cell itself,
is unaffected). An open tail longer than ``max_statement_chars`` is not reported
either (an empty ``TailChanged`` withdraws the last one). ``parse=False`` (the
runtime's baseline, which needs only the cells) reports statements without parsing
them (``tree`` is None) and never marks a cell broken.

``TailChanged`` is reported after a delta when the open remainder of the cell gained a
line end or a closing parenthesis, or was reset by a closing statement: those are the
only moments the tail can hold a newly complete call.
"""

from __future__ import annotations

import ast
import codecs
import re
from dataclasses import dataclass, field
from typing import TypeVar
from .._parse import parse as parse_ast

__all__ = [
    "Segmenter",
    "SegmentEvent",
    "CellOpened",
    "StatementClosed",
    "TailChanged",
    "CellClosed",
    "LineLexer",
    "MAX_STATEMENT_CHARS",
    "MAX_PARSED_CHARS",
    "MAX_PARSED_STATEMENTS",
]


@dataclass(frozen=True)
class CellOpened:
    cell: int
    language: str


@dataclass(frozen=True)
class StatementClosed:
    cell: int
    index: int
    source: str  # dedented source of one complete top-level statement (ends with "\n")
    lineno: int  # 1-based line of the statement's first line within the cell
    # the statement parsed once (pass it to ShadowInterpreter.run_statement to avoid a
    # second parse); not part of the event's identity
    tree: ast.Module | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class TailChanged:
    cell: int
    tail: str


@dataclass(frozen=True)
class CellClosed:
    cell: int
    source: str
    complete: bool


SegmentEvent = CellOpened | StatementClosed | TailChanged | CellClosed

_new_object = object.__new__
_E = TypeVar("_E", StatementClosed, TailChanged)

# an open tail up to this many characters is reported on every change; a longer one
# only after it has grown by half (see ``Segmenter._report_tail``)
TAIL_EAGER_CHARS = 4096
# the longest statement (or open tail) parsed on the caller's thread: about 10 ms of
# ``ast`` work on a slow machine
MAX_STATEMENT_CHARS = 16_384
# the most statement text, and statements, one message has parsed (the trees are kept
# for the turn)
MAX_PARSED_CHARS = 65_536
MAX_PARSED_STATEMENTS = 2_000


def _event(cls: type[_E], **fields: object) -> _E:
    """``cls(**fields)`` for a frozen event naming every field, built without the
    dataclass ``__init__`` (which stores each field in the instance dict through
    ``object.__setattr__``): the same fields in the same instance dict, faster."""
    event = _new_object(cls)
    event.__dict__.update(fields)
    return event

_OPEN_FENCE = re.compile(r"^([ \t]*)(`{3,})[ \t]*([A-Za-z0-9_+.-]*)[^`]*$")
_CLOSE_FENCE = re.compile(r"^[ \t]*`{3,}[ \t]*$")
_FIRST_WORD = re.compile(r"[ \t]*([A-Za-z_][A-Za-z0-9_]*|@)")
_COMPOUND = frozenset({"if", "for", "while", "try", "with", "def", "class", "async", "@"})
_CONTINUATION = frozenset({"else", "elif", "except", "finally"})
_DEFINITION = frozenset({"def", "class", "async", "@"})
# every non-empty prefix of a word that can continue an open compound statement
# (``k.startswith(w)`` for some such ``k``  <=>  ``w`` in the set)
_CONTINUATION_PREFIXES = frozenset(k[:i] for k in _CONTINUATION for i in range(1, len(k) + 1))
_DECORATED_PREFIXES = _CONTINUATION_PREFIXES | frozenset(
    k[:i] for k in _DEFINITION for i in range(1, len(k) + 1))
_QUOTE_AT = re.compile(r"""'''|\"\"\"|'|\"""")
_BRACKET = re.compile(r"[()\[\]{}]")
# outside a string literal: what ends a run of plain code (brackets are counted per run)
_NOT_BRACKETS = re.compile(r"""[#'"\\]""")


class LineLexer:
    """Carries Python's lexical state across physical lines.

    ``feed_line(line)`` lexes one physical line (without its newline) and returns
    True when a logical line ends after it (not inside brackets, a string, or a
    backslash continuation).
    """

    __slots__ = ("depth", "quote", "continued", "scanned")

    def __init__(self) -> None:
        self.scanned = 0  # characters searched inside string literals (work counter)
        self.depth = 0  # bracket depth
        self.quote: str | None = None  # open string delimiter: ' " ''' or \"\"\"
        self.continued = False  # backslash line continuation

    @property
    def at_logical_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def feed_line(self, line: str) -> bool:
        pos = 0
        n = len(line)
        self.continued = False
        while pos < n:
            if self.quote is not None:
                pos = self._skip_string(line, pos)
                continue
            # brackets up to the next comment, backslash or quote, in one scan
            m = _NOT_BRACKETS.search(line, pos)
            stop = n if m is None else m.start()
            if stop > pos:
                depth = self.depth
                for ch in _BRACKET.findall(line, pos, stop):
                    if ch in "([{":
                        depth += 1
                    elif depth:
                        depth -= 1
                self.depth = depth
            if m is None:
                break
            ch = m.group()
            pos = m.end()
            if ch == "#":
                break
            if ch == "\\":
                if pos >= n:
                    self.continued = True
                pos += 1
            else:  # a quote opens a string
                q = _QUOTE_AT.match(line, m.start())
                self.quote = q.group()
                pos = q.end()
        if self.quote is not None and len(self.quote) == 1 and not self.continued:
            # an unterminated one-line string: a syntax error; do not let it swallow
            # the rest of the cell
            self.quote = None
        return self.at_logical_start

    def _skip_string(self, line: str, pos: int) -> int:
        # Each search starts where the last one stopped or later, and a found closing
        # quote is remembered until ``pos`` passes it: a line full of escapes is
        # scanned once (linear), not once per backslash.
        quote = self.quote
        n = len(line)
        i = -2  # -2: not searched yet; -1: no closing quote on this line
        while pos < n:
            if i != -1 and i < pos:
                i = line.find(quote, pos)
                self.scanned += (n if i == -1 else i) - pos
            b = line.find("\\", pos, n if i == -1 else i)
            if b != -1:
                self.scanned += b - pos
                if b + 1 >= n:  # backslash-newline inside a string
                    self.continued = True
                    return n
                pos = b + 2
                continue
            if i == -1:
                return n
            self.quote = None
            return i + len(quote)
        return n


class _Cell:
    __slots__ = (
        "number", "language", "indent", "lines", "lexer", "stmt_lines", "stmt_lineno",
        "stmt_kind", "broken", "tail_sent", "tail_dirty", "trivia",
        "statements", "stmt_chars",
    )

    def __init__(self, number: int, language: str, indent: str) -> None:
        self.number = number
        self.language = language
        self.indent = indent
        self.lines: list[str] = []  # dedented complete lines of the cell
        self.lexer = LineLexer()
        self.stmt_lines: list[str] = []
        self.stmt_chars = 0  # len("".join(stmt_lines))
        self.stmt_lineno = 0
        self.stmt_kind: str | None = None  # None | "simple" | "compound" | "decorated"
        self.trivia = 0  # trailing blank/comment lines of the open statement
        self.broken = False
        self.statements = 0
        self.tail_sent = ""
        self.tail_dirty = False


def _first_word(line: str) -> str:
    m = _FIRST_WORD.match(line)
    return m.group(1) if m else ""


class Segmenter:
    """Incremental splitter of one model message into cells and statements."""

    def __init__(self, languages: tuple[str, ...] = ("repl", "python"), *,
                 parse: bool = True, max_statement_chars: int = MAX_STATEMENT_CHARS,
                 max_parsed_chars: int = MAX_PARSED_CHARS,
                 max_parsed_statements: int = MAX_PARSED_STATEMENTS) -> None:
        self._languages = frozenset(lang.lower() for lang in languages)
        self.parse = parse
        self.max_statement_chars = max_statement_chars
        self.max_parsed_chars = max_parsed_chars
        self.max_parsed_statements = max_parsed_statements
        self.parsed_chars = 0  # statement text parsed so far
        self.parsed = 0  # statements parsed so far
        self.too_long = 0  # statements left unparsed for their length
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial: list[str] = []  # pieces of the current physical line
        self._cell: _Cell | None = None
        self._other_fence: str | None = None  # backticks of a skipped non-code fence
        self._cells = 0
        self._closed = False
        self._head_done = False  # the current line's first word was already judged
        self._partial_chars = 0  # len("".join(self._partial))
        self.work = 0  # characters copied or parsed (see ``scanned``)
        self._lexed = 0  # string-literal search work of finished cells

    # -- public API -----------------------------------------------------------

    def feed(self, delta: str | bytes) -> list[SegmentEvent]:
        if self._closed:
            raise RuntimeError("Segmenter.feed after close()")
        if type(delta) is str:
            text = delta
        elif isinstance(delta, (bytes, bytearray)):
            text = self._decoder.decode(bytes(delta))
        else:
            text = str(delta)
        if not text:
            return []
        if "\r" in text:
            text = text.replace("\r", "")
        self.work += len(text)
        events: list[SegmentEvent] = []
        if "\n" not in text:  # fast path: the current line grows
            self._partial.append(text)
            self._partial_chars += len(text)
            cell = self._cell
            if cell is not None and not cell.broken:
                if ")" in text:
                    cell.tail_dirty = True
                if cell.stmt_lines and cell.stmt_kind != "simple" and not self._head_done:
                    self._close_early(cell, events)
                if cell.tail_dirty:
                    self._report_tail(events)
            return events
        start = 0
        while True:
            nl = text.find("\n", start)
            if nl == -1:
                break
            self._partial.append(text[start:nl])
            line = "".join(self._partial)
            self._partial.clear()
            self._partial_chars = 0
            self.work += len(line)
            self._head_done = False
            self._line(line, events)
            start = nl + 1
        rest = text[start:]
        if rest:
            self._partial.append(rest)
            self._partial_chars += len(rest)
            cell = self._cell
            if cell is not None and not cell.broken:
                if ")" in rest:
                    cell.tail_dirty = True
                if cell.stmt_lines and cell.stmt_kind != "simple" and not self._head_done:
                    self._close_early(cell, events)
        self._report_tail(events)
        return events

    def close(self) -> list[SegmentEvent]:
        """End of message: flush the last line and close an open cell (incomplete)."""
        if self._closed:
            return []
        events: list[SegmentEvent] = []
        tail_bytes = self._decoder.decode(b"", final=True)
        if tail_bytes:
            self._partial.append(tail_bytes.replace("\r", ""))
        if self._partial:
            line = "".join(self._partial)
            self._partial.clear()
            self._partial_chars = 0
            self._line(line, events, final=True)
        if self._cell is not None:
            self._finish_cell(events, complete=False)
        self._closed = True
        return events

    # -- lines ----------------------------------------------------------------

    def _line(self, line: str, events: list[SegmentEvent], final: bool = False) -> None:
        cell = self._cell
        if cell is None:
            self._prose_line(line, events)
            return
        if cell.lexer.quote is None and _CLOSE_FENCE.match(line):
            # outside a string a fence line always closes the cell (inside unbalanced
            # brackets the cell simply does not parse, as in the real run)
            self._finish_cell(events, complete=True)
            return
        if final and not line.strip():
            return
        self._code_line(cell, line, events)

    def _prose_line(self, line: str, events: list[SegmentEvent]) -> None:
        if self._other_fence is not None:
            stripped = line.strip()
            if stripped.startswith(self._other_fence) and not stripped.strip("`"):
                self._other_fence = None
            return
        m = _OPEN_FENCE.match(line)
        if m is None:
            return
        indent, ticks, lang = m.group(1), m.group(2), m.group(3).lower()
        if lang in self._languages and len(ticks) == 3:
            self._cells += 1
            self._cell = _Cell(self._cells, lang, indent)
            events.append(CellOpened(self._cells, lang))
        else:
            self._other_fence = ticks

    def _code_line(self, cell: _Cell, raw: str, events: list[SegmentEvent]) -> None:
        line = raw[len(cell.indent):] if raw.startswith(cell.indent) else raw.lstrip(" \t")
        text = line + "\n"
        cell.lines.append(text)
        lineno = len(cell.lines)
        if cell.broken:
            return
        cell.tail_dirty = True
        lexer = cell.lexer
        starts_logical = lexer.at_logical_start
        if starts_logical:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                if cell.stmt_lines:  # blank line or comment inside a compound statement
                    cell.stmt_lines.append(text)
                    cell.stmt_chars += len(text)
                    cell.trivia += 1
                return
            top = not line[0].isspace()
            word = _first_word(line)
            if cell.stmt_lines:  # a compound (or decorated) statement is open
                if top:
                    continues = word in _CONTINUATION or (
                        cell.stmt_kind == "decorated" and word in _DEFINITION)
                    if not continues:
                        self._close_statement(cell, events)
                        if cell.broken:
                            return
                        self._begin_statement(cell, word, lineno)
                    elif cell.stmt_kind == "decorated" and word != "@":
                        cell.stmt_kind = "compound"
            else:
                if not top:  # indented line with no open block: IndentationError
                    cell.broken = True
                    return
                self._begin_statement(cell, word, lineno)
        cell.stmt_lines.append(text)
        cell.stmt_chars += len(text)
        cell.trivia = 0
        ended = lexer.feed_line(line)
        if ended and cell.stmt_kind == "maybe_match":
            # `match x:` opens a block; `match = ...` is a simple statement
            if cell.stmt_chars > self.max_statement_chars:
                cell.stmt_kind = "compound"   # not parsed here: it closes as too long
                return
            try:
                parse_ast("".join(cell.stmt_lines), "<cell>")
                cell.stmt_kind = "simple"
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                cell.stmt_kind = "compound"
        if ended and cell.stmt_kind == "simple":
            self._close_statement(cell, events)

    def _close_early(self, cell: _Cell, events: list[SegmentEvent]) -> None:
        """A compound statement closes as soon as the next top-level line shows a first
        word that cannot continue it (no need to wait for that line's end)."""
        if not cell.lexer.at_logical_start:
            return
        head = ""
        for piece in self._partial:
            head += piece
            if len(head) > 16:
                break
        if head.startswith(cell.indent):
            head = head[len(cell.indent):]
        if not head:
            return
        if head[0] in " \t#`":
            self._head_done = True
            return
        m = _FIRST_WORD.match(head)
        if m is None:
            word = ""  # an operator or literal: not a keyword
        elif m.end() == len(head):
            partial_word = m.group(1)
            prefixes = _DECORATED_PREFIXES if cell.stmt_kind == "decorated" else _CONTINUATION_PREFIXES
            if partial_word in prefixes:
                return  # may still grow into else/elif/except/finally (or def/class)
            word = partial_word
        else:
            word = m.group(1)
        self._head_done = True
        if word in _CONTINUATION or (cell.stmt_kind == "decorated" and word in _DEFINITION):
            return
        self._close_statement(cell, events)
        cell.tail_dirty = True

    def _begin_statement(self, cell: _Cell, word: str, lineno: int) -> None:
        cell.stmt_lineno = lineno
        if word == "@":
            cell.stmt_kind = "decorated"
        elif word in _COMPOUND:
            cell.stmt_kind = "compound"
        elif word == "match":
            cell.stmt_kind = "maybe_match"
        else:
            cell.stmt_kind = "simple"

    def _close_statement(self, cell: _Cell, events: list[SegmentEvent]) -> None:
        lines = cell.stmt_lines
        if cell.trivia:
            lines = lines[:len(lines) - cell.trivia]
        source = "".join(lines)
        lineno = cell.stmt_lineno
        cell.stmt_lines = []
        cell.stmt_chars = 0
        cell.trivia = 0
        cell.stmt_kind = None
        if not self.parse:
            events.append(_event(StatementClosed, cell=cell.number, index=cell.statements,
                                 source=source, lineno=lineno, tree=None))
            cell.statements += 1
            return
        if (len(source) > self.max_statement_chars
                or self.parsed_chars + len(source) > self.max_parsed_chars
                or self.parsed >= self.max_parsed_statements):
            self.too_long += 1
            cell.broken = True
            return
        self.work += len(source)
        self.parsed_chars += len(source)
        self.parsed += 1
        try:
            tree = parse_ast(source, "<cell>")
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            cell.broken = True
            return
        events.append(_event(StatementClosed, cell=cell.number, index=cell.statements,
                             source=source, lineno=lineno, tree=tree))
        cell.statements += 1

    def _finish_cell(self, events: list[SegmentEvent], complete: bool) -> None:
        cell = self._cell
        assert cell is not None
        if cell.stmt_lines and not cell.broken:
            self._close_statement(cell, events)  # an unfinished statement does not parse
        self._cell = None
        self._lexed += cell.lexer.scanned
        events.append(CellClosed(cell.number, "".join(cell.lines), complete))

    def _report_tail(self, events: list[SegmentEvent]) -> None:
        cell = self._cell
        if cell is None or cell.broken or not cell.tail_dirty:
            return
        size = cell.stmt_chars + self._partial_chars
        sent = len(cell.tail_sent)
        if size > self.max_statement_chars:
            # too long to be parsed by whoever peeks at it: withdraw the last report
            cell.tail_dirty = False
            if sent:
                cell.tail_sent = ""
                events.append(_event(TailChanged, cell=cell.number, tail=""))
            return
        if size > TAIL_EAGER_CHARS and sent and size - sent < sent // 2:
            # A long open tail is reported again only once it has grown by half since
            # the last report: the reports of one statement then copy at most
            # ``3 * final length`` characters (a geometric series), so a very long line
            # costs linear work instead of one full copy per delta. A shorter tail is
            # reported on every change (at most TAIL_EAGER_CHARS per delta).
            return
        cell.tail_dirty = False
        tail = "".join(cell.stmt_lines) + "".join(self._partial)
        self.work += len(tail)
        if tail != cell.tail_sent:
            cell.tail_sent = tail
            events.append(_event(TailChanged, cell=cell.number, tail=tail))

    @property
    def scanned(self) -> int:
        """Characters this segmenter has processed so far, counting every copy and
        search (the work counter the linearity tests read): each delta, each line
        lexed, each statement joined and parsed, each tail reported, and each search
        inside string literals."""
        lexed = self._lexed + (self._cell.lexer.scanned if self._cell is not None else 0)
        return self.work + lexed
