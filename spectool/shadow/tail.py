"""Tail peeking: bets on tool calls in the open, still-streaming part of a cell.

The tail is the open top-level statement (for instance a ``for`` loop whose body is
still arriving) plus the unfinished last line. Peeking:

1. splits the tail into complete logical lines and the unfinished last logical line;
2. from the unfinished line keeps only the calls whose closing parenthesis has
   streamed, and only if nothing on that line can make them conditional (``if``,
   ``else``, ``and``, ``or``, ``lambda``, a comprehension's ``for``, ...): each such
   call becomes a synthetic expression statement at that line's indentation;
3. parses the result (adding ``pass`` under a header with no body yet) and evaluates
   it with the shadow evaluator in *peek mode*: over a copy-on-write view of the shadow
   state, launching nothing. A tool call with known arguments becomes a bet; ``for``
   loops over known iterables are unrolled (at most ``Limits.max_tail_iterations``
   iterations in all); ``if`` with a known condition takes its branch; blocks with an
   unknown condition and ``while`` loops are skipped and taint what they write; if
   control could leave early (a skipped ``break``/``return``/``raise``) peeking stops.
   An open ``try`` does not parse until its handler has streamed, so its body is bet on
   only then. Peeking never mutates shared state: mutating a container that existed
   before the peek, reading a missing ``defaultdict`` key, advancing a shared
   iterator, or handing C code a container that holds one (``dict([it])``,
   ``sorted([it, it], key=next)``) makes the value unknown instead.

Later lines change the bets naturally: each peek evaluates the whole current tail, so a
reassignment further down the loop body changes (or removes) the bets of later
iterations, and the runtime withdraws the bets that are no longer returned.
"""

from __future__ import annotations

import ast
import re
import time
from typing import TYPE_CHECKING

from ..stream.segmenter import LineLexer
from .internals import (
    _Break, _Continue, _PeekDone, _Return, _Uncertain, _UnknownValue, _UserError, _WouldWait,
)
from .limits import LimitExceeded, ShadowDeclined
from .peeking import peeking
from .scope import ShadowFunction
from .values import TailBet, Touched, Unknown
from .._parse import parse as parse_ast

if TYPE_CHECKING:
    from .interpreter import CoreInterpreter

__all__ = ["peek_tail", "peek_ahead", "split_tail", "complete_calls"]

PEEK_MAX_STEPS = 200_000
PEEK_MAX_SECONDS = 0.25
# CPU seconds one interpreter may spend peeking ahead in all (a cell of many waiting
# statements would otherwise re-peek what is queued behind each of them)
PEEK_AHEAD_MAX_SECONDS = 2.0

_RISKY_WORDS = re.compile(
    r"\b(if|else|elif|and|or|lambda|for|while|async|await|yield|with|def|class|return|"
    r"except|finally|try|assert|del|match|case)\b")
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_.]")
_CALLEE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
# the same matches as _CALLEE.findall (from the start, or from a position not preceded by
# an identifier character), found in linear time: a match can only begin where a run of
# identifier characters begins (after its leading digits), and never needs backtracking
_CALLEE_SCAN = re.compile(r"(?<![A-Za-z0-9_])[0-9]*+([A-Za-z_][A-Za-z0-9_]*+)\s*+\(")
_DEFINITION = re.compile(r"\s*(def|class|async|@)\b|\s*@")


def split_tail(tail: str) -> tuple[str, str]:
    """(complete logical lines, unfinished last logical line) of a tail."""
    lines = tail.split("\n")
    lexer = LineLexer()
    end = 0  # number of physical lines that form complete logical lines
    for i, line in enumerate(lines[:-1]):
        if lexer.feed_line(line):
            end = i + 1
    complete = "\n".join(lines[:end]) + "\n" if end else ""
    return complete, "\n".join(lines[end:])


# outside a string: what starts a comment or a string literal
_CODE_SPECIAL = re.compile(r"[#'\"]")
# the body of a string opened by each delimiter, up to its closing delimiter or the end
# of the text: a backslash always takes the next character with it (even a newline)
_STRING_BODY = {q: re.compile(r"(?:\\.|(?!%s).)*" % re.escape(q), re.S)
                for q in ("'", '"', "'''", '"""')}
_ESCAPE_PAIR = re.compile(r"\\.", re.S)
_NOT_NEWLINE = re.compile(r"[^\n]+")
# an opening parenthesis with the identifier characters (and spaces) right before it,
# or any other bracket
_BRACKET_OR_CALL = re.compile(r"(?:([A-Za-z0-9_.]+) *)?\(|([)\[\]{}])")


def _blank_body(body: str) -> str:
    """A string literal's body blanked: every character but a newline becomes a space,
    and so does a newline escaped by a backslash."""
    if "\n" not in body:
        return " " * len(body)
    out = _NOT_NEWLINE.sub(lambda m: " " * len(m.group()), body)
    if "\\\n" in body:
        chars = list(out)
        for m in _ESCAPE_PAIR.finditer(body):  # the pairs, from the body's start
            if body[m.start() + 1] == "\n":
                chars[m.start() + 1] = " "
        out = "".join(chars)
    return out


def _blank_strings(text: str) -> str:
    """The text with string contents and comments replaced by spaces (same length).

    Scans with regular expressions, run by run: code up to the next ``#`` or quote is
    kept, a comment is blanked up to its line end, a string keeps its delimiters and
    has its body blanked (``_blank_body``); an unterminated string runs to the end."""
    parts: list[str] = []
    i, n = 0, len(text)
    search = _CODE_SPECIAL.search
    while i < n:
        m = search(text, i)
        if m is None:
            parts.append(text[i:])
            break
        s = m.start()
        parts.append(text[i:s])
        ch = text[s]
        if ch == "#":
            j = text.find("\n", s)
            j = n if j == -1 else j
            parts.append(" " * (j - s))
            i = j
            continue
        quote = text[s:s + 3] if text[s:s + 3] in ("'''", '"""') else ch
        parts.append(quote)
        b = s + len(quote)
        e = _STRING_BODY[quote].match(text, b).end()
        parts.append(_blank_body(text[b:e]))
        if e >= n:
            break
        parts.append(quote)  # the body stopped at its closing delimiter
        i = e + len(quote)
    return "".join(parts)


def complete_calls(text: str) -> list[tuple[int, int]]:
    """Spans (start, end) of the outermost calls ``name(...)``/``a.b(...)`` whose
    closing parenthesis is in ``text``."""
    code = _blank_strings(text)
    spans: list[tuple[int, int]] = []
    stack: list[tuple[int, int | None]] = []  # (index of "(", start of callee or None)
    for m in _BRACKET_OR_CALL.finditer(code):  # no other character changes the stack
        ch = m.group(2)
        if ch is None:  # "(" with the run of identifier characters before it (spaces
            # between allowed): the leftmost match starts where that run starts
            callee = m.group(1)
            start = None
            if callee is not None and not callee[0].isdigit() and callee[0] != ".":
                start = m.start()
            stack.append((m.end() - 1, start))
        elif ch in "[{":
            stack.append((m.start(), None))
        elif stack:
            _, start = stack.pop()
            if ch == ")" and start is not None:
                spans.append((start, m.end()))
    spans.sort()
    outer: list[tuple[int, int]] = []
    for span in spans:
        if outer and span[0] < outer[-1][1]:
            continue  # nested in an earlier complete call
        outer.append(span)
    return outer


def _relevant_calls(text: str, relevant, depth: int = 0) -> list[str]:
    """The outermost complete calls that may reach a tool: a call that does not name
    one itself is replaced by the relevant calls among its arguments (so closing an
    outer ``results.append(...)`` does not change what is evaluated)."""
    out: list[str] = []
    for start, end in complete_calls(text):
        call = text[start:end]
        if not relevant(call):
            continue
        m = _CALLEE.match(call)
        if m is not None and relevant(m.group(0)) or depth > 8:
            out.append(call)
        else:
            inner = call[call.index("(") + 1:-1]
            out.extend(_relevant_calls(inner, relevant, depth + 1))
    return out


def _synthesize(tail: str, relevant=lambda text: True, parts: tuple[str, str] | None = None) -> str | None:
    complete, partial = parts if parts is not None else split_tail(tail)
    lines = [complete]
    if partial.strip() and ")" in partial:
        code = _blank_strings(partial)
        first = partial.split("\n", 1)[0]
        indent = first[:len(first) - len(first.lstrip())]
        if not _RISKY_WORDS.search(code):
            for call in _relevant_calls(partial, relevant):
                lines.append(indent + call.replace("\n", " ") + "\n")
    source = "".join(lines)
    if not source.strip():
        return None
    return source


def _parse(source: str) -> ast.Module | None:
    try:
        return parse_ast(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        pass
    # a block header whose body has not streamed yet
    last = source.rstrip("\n").split("\n")[-1]
    indent = last[:len(last) - len(last.lstrip())]
    try:
        return parse_ast(source + indent + "    pass\n")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _callee_names_after(head: str, more: str) -> set[str]:
    """Names ``_CALLEE`` finds in ``head + more`` that a scan of ``head`` alone does
    not. Only a match made of the identifier and whitespace run at the end of
    ``head`` can cross into ``more``, so scanning from that run's identifier start
    finds exactly the new matches (a match depends on what precedes it only through
    the one character before it, which is not an identifier character there). This
    holds wherever ``head`` ends (the end of a logical line, or of an earlier tail)."""
    end = len(head)
    while end and head[end - 1].isspace():  # what head.rstrip() strips, without a copy
        end -= 1
    start = end
    while start and (head[start - 1].isalnum() or head[start - 1] == "_"):
        start -= 1
    if start == len(head):
        return set(_CALLEE_SCAN.findall(more))
    return set(_CALLEE_SCAN.findall(head[start:] + more))


def _tail_names(interp: "CoreInterpreter", tail: str) -> frozenset[str]:
    """The callee names ``_CALLEE_SCAN`` finds in the whole tail, kept up to date as
    the tail grows (see ``_callee_names_after``); the same object while unchanged."""
    memo = interp._peeks.tail_names
    if memo is not None and tail.startswith(memo[0]):
        head, names = memo
        if len(tail) == len(head):
            return names
        added = tail[len(head):]
        if "(" in added:  # (every new match would end with a "(" of the added text)
            new = _callee_names_after(head, added)
            if not new <= names:
                names = names | new
    else:  # (every match ends with a "(")
        names = frozenset(_CALLEE_SCAN.findall(tail)) if "(" in tail else frozenset()
    interp._peeks.tail_names = (tail, names)
    return names


def _split_memo(interp: "CoreInterpreter", tail: str) -> tuple[str, str, frozenset[str]]:
    """``split_tail(tail)`` and the callee names of its complete part, reusing the last
    tail's split when the tail only grew (the usual case): the lexer state after the
    complete part is the start state, so only the unfinished part is lexed again."""
    memo = interp._peeks.tail_memo
    if memo is not None and tail.startswith(memo[0]):
        _, complete, partial, names = memo
        added = tail[len(memo[0]):]
        partial += added
        if "\n" in added:
            more, partial = split_tail(partial)
            if more:
                new = _callee_names_after(complete, more)
                if not new <= names:
                    names = names | new
                complete += more
    elif "\n" not in tail:
        complete, partial, names = "", tail, frozenset()  # what split_tail gives
    else:
        complete, partial = split_tail(tail)
        names = frozenset(_CALLEE_SCAN.findall(complete))
    interp._peeks.tail_memo = (tail, complete, partial, names)
    return complete, partial, names


def peek_tail(interp: "CoreInterpreter", tail: str) -> list[TailBet]:
    """Bets for the open tail of a cell (see the module docstring)."""
    if interp.stopped or not tail or tail.isspace() or _DEFINITION.match(tail):
        return []  # a definition's body does not run while it is being defined
    # Fast exit: the callee names of the whole tail include those of its complete part
    # and those of its unfinished line (a scan of the whole finds every match a scan
    # of either part finds), so when none of them is relevant neither test below can
    # pass and the answer is [] as well; the split is then not needed.
    if not _relevant_memo(interp, "tail_any", _tail_names(interp, tail)):
        return []
    complete, partial, names = _split_memo(interp, tail)
    # names of the complete part rarely change: the last answer is reused (see above)
    if (not _relevant_memo(interp, "tail_relevant", names)
            and not _relevant(interp, _CALLEE_SCAN.findall(partial))):
        return []
    source = _synthesize(tail, lambda text: _may_call_a_tool(interp, text), (complete, partial))
    if source is None:
        return []
    key = (source, interp._version)
    cached = interp._peeks.cache
    if cached is not None and cached[0] == key:
        return list(cached[1])
    tree = _parse(source)
    bets = [] if tree is None else _evaluate(interp, tree)
    interp._peeks.cache = (key, bets)
    return list(bets)


def _relevant_memo(interp: "CoreInterpreter", slot: str, names: frozenset[str]) -> bool:
    """``_relevant(interp, names)``, remembered in ``interp._peeks.<slot>`` for the same
    names object while the state (its version) is the same."""
    known = getattr(interp._peeks, slot)
    if known is not None and known[0] is names and known[1] == interp._version:
        return known[2]
    relevant = _relevant(interp, names)
    setattr(interp._peeks, slot, (names, interp._version, relevant))
    return relevant


def _may_call_a_tool(interp: "CoreInterpreter", text: str) -> bool:
    """Does the text call a tool, or a function defined in the cell, by name?"""
    return _relevant(interp, _CALLEE_SCAN.findall(text))


def _relevant(interp: "CoreInterpreter", names) -> bool:
    values = interp._module.vars
    for name in names:
        if name in interp._toolrefs or type(values.get(name)) is ShadowFunction:
            return True
    return False


def peek_ahead(interp: "CoreInterpreter", statements: list[str], tail: str,
               unknown: frozenset[str]) -> list[TailBet]:
    """Bets for closed statements queued behind one that is waiting, and for the open
    tail after them, peeked like a tail while the waiting statement is suspended.

    ``unknown``: the names the waiting statement may still write or mutate
    (``analysis.written_names``); they read as unknown, so nothing is bet on a value
    that statement has not finished computing. Definitions among the statements are
    complete and run (in the peek's view); an open definition in the tail is left out.
    """
    if interp.stopped or not statements or interp._peeks.ahead_seconds >= PEEK_AHEAD_MAX_SECONDS:
        return []
    t0 = time.thread_time()
    try:
        return _peek_ahead(interp, statements, tail, unknown)
    finally:
        interp._peeks.ahead_seconds += time.thread_time() - t0


def _peek_ahead(interp: "CoreInterpreter", statements: list[str], tail: str,
                unknown: frozenset[str]) -> list[TailBet]:
    if not tail or tail.isspace() or _DEFINITION.match(tail):
        tail = ""
    tail_complete, partial = split_tail(tail) if tail else ("", "")
    complete = "".join(s if s.endswith("\n") else s + "\n" for s in statements) + tail_complete
    if not _relevant(interp, _CALLEE_SCAN.findall(complete + "\n" + partial)):
        return []
    source = _synthesize(complete + partial, lambda text: _may_call_a_tool(interp, text),
                         (complete, partial))
    tree = None if source is None else _parse(source)
    return [] if tree is None else _evaluate(interp, tree, unknown)


def _evaluate(interp: "CoreInterpreter", tree: ast.Module,
              unknown: frozenset[str] = frozenset()) -> list[TailBet]:

    with peeking(interp, PEEK_MAX_STEPS, PEEK_MAX_SECONDS, handling=[]) as bets:
        for name in unknown:
            interp._module.vars[name] = Unknown("written by a statement still running")
        try:
            interp._check_rebinding(tree)
            gen = interp._exec_block(tree.body, interp._module)
            try:
                next(gen)
                gen.close()  # peek mode never waits; stop if it ever tried
            except StopIteration:
                pass
        except (_UserError, _Uncertain, _PeekDone, _Break, _Continue, _Return, _UnknownValue,
                _WouldWait, ShadowDeclined, LimitExceeded, Touched, RecursionError, MemoryError):
            pass
    return bets
