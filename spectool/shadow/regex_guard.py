"""Bounding the work of one regular-expression call before it runs.

``re`` cannot be interrupted from Python, so a call is allowed only when the pattern's
worst-case backtracking, estimated from its parse tree, stays within a budget for the
given subject length:

- a repeat nested in a repeat, an alternation under a repeat, or a back-reference can
  be exponential: refused;
- every other unbounded repeat counts as "free" (it may backtrack over the subject)
  unless it ends the pattern or is followed by a literal it cannot match (then the
  repeat stops there and never re-tries shorter lengths usefully);
- work ~ n ** (1 + free), which must stay under ``Limits.max_regex_work``.
"""

from __future__ import annotations

import re
from re import _constants as C  # type: ignore[attr-defined]
from re import _parser as P  # type: ignore[attr-defined]

from .limits import LimitExceeded

__all__ = ["check_regex", "regex_exponent"]

_REPEATS = {C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT}
_cache: dict[tuple[object, int], int | None] = {}


def _category_match(cat: object, ch: str) -> bool:
    if cat is C.CATEGORY_DIGIT or cat is C.CATEGORY_UNI_DIGIT:
        return ch.isdecimal() or ch.isdigit()
    if cat is C.CATEGORY_NOT_DIGIT or cat is C.CATEGORY_UNI_NOT_DIGIT:
        return not ch.isdecimal()
    if cat is C.CATEGORY_SPACE or cat is C.CATEGORY_UNI_SPACE:
        return ch.isspace()
    if cat is C.CATEGORY_NOT_SPACE or cat is C.CATEGORY_UNI_NOT_SPACE:
        return not ch.isspace()
    if cat is C.CATEGORY_WORD or cat is C.CATEGORY_UNI_WORD:
        return ch.isalnum() or ch == "_"
    if cat is C.CATEGORY_NOT_WORD or cat is C.CATEGORY_UNI_NOT_WORD:
        return not (ch.isalnum() or ch == "_")
    return True  # conservative


def _can_match(item: tuple, ch: str, flags: int) -> bool:
    """Whether a one-character item may match ``ch`` (True when unsure)."""
    op, av = item
    fold = bool(flags & re.IGNORECASE)
    if op is C.LITERAL:
        c = chr(av)
        return c == ch or (fold and c.casefold() == ch.casefold())
    if op is C.NOT_LITERAL:
        return True if fold else chr(av) != ch
    if op is C.ANY:
        return ch != "\n" or bool(flags & re.DOTALL)
    if op is C.IN:
        if fold:
            return True
        negate = False
        hit = False
        for sub_op, sub_av in av:
            if sub_op is C.NEGATE:
                negate = True
            elif sub_op is C.LITERAL:
                hit = hit or chr(sub_av) == ch
            elif sub_op is C.RANGE:
                hit = hit or sub_av[0] <= ord(ch) <= sub_av[1]
            elif sub_op is C.CATEGORY:
                hit = hit or _category_match(sub_av, ch)
            else:
                return True
        return hit != negate
    return True


def _has_backtracking(items: list) -> bool:
    """Does a sub-pattern contain repeats or alternation (unsafe under a repeat)?"""
    for op, av in items:
        if op in _REPEATS and av[1] > 1:
            return True
        if op is C.BRANCH:
            return True
        if op is C.SUBPATTERN and _has_backtracking(list(av[3])):
            return True
        if op in (C.ASSERT, C.ASSERT_NOT) and _has_backtracking(list(av[1])):
            return True
        if op is C.ATOMIC_GROUP and _has_backtracking(list(av)):
            return True
    return False


def _flatten(items: list) -> list:
    out = []
    for op, av in items:
        if op is C.SUBPATTERN:
            out.extend(_flatten(list(av[3])))
        else:
            out.append((op, av))
    return out


def _free_repeats(items: list, flags: int) -> int | None:
    items = _flatten(items)
    free = 0
    for i, (op, av) in enumerate(items):
        if op in (C.GROUPREF, C.GROUPREF_EXISTS, C.GROUPREF_IGNORE, C.GROUPREF_LOC_IGNORE,
                  C.GROUPREF_UNI_IGNORE):
            return None
        if op is C.BRANCH:
            worst = 0
            for alt in av[1]:
                sub = _free_repeats(list(alt), flags)
                if sub is None:
                    return None
                worst = max(worst, sub)
            free += worst
        elif op in (C.ASSERT, C.ASSERT_NOT):
            sub = _free_repeats(list(av[1]), flags)
            if sub is None:
                return None
            free += sub
        elif op is C.ATOMIC_GROUP:
            if _free_repeats(list(av), flags) is None:
                return None
        elif op in _REPEATS:
            lo, hi, sub = av
            sub = list(sub)
            if hi > 1 and _has_backtracking(sub):
                return None  # nested quantifier / alternation under a quantifier
            if op is C.POSSESSIVE_REPEAT or hi <= 1:
                continue
            rest = items[i + 1:]
            if not rest:
                continue  # a trailing repeat succeeds on its first (longest) try
            follower = rest[0]
            if (len(sub) == 1 and follower[0] is C.LITERAL
                    and not _can_match(sub[0], chr(follower[1]), flags)):
                continue
            free += 1
    return free


def regex_exponent(pattern: str | bytes, flags: int = 0) -> int | None:
    """Number of free repeats of a pattern; None if it may be exponential."""
    key = (pattern, flags)
    if key in _cache:
        return _cache[key]
    if len(_cache) > 512:
        _cache.clear()
    try:
        if isinstance(pattern, bytes):
            pattern_text = pattern.decode("latin-1")
        else:
            pattern_text = pattern
        tree = P.parse(pattern_text, flags)
        result = _free_repeats(list(tree), flags | tree.state.flags)
    except (re.error, RecursionError, OverflowError, ValueError, TypeError):
        result = 0  # invalid pattern: re will raise re.error itself, cheaply
    _cache[key] = result
    return result


def check_regex(pattern: object, flags: int, subject_len: int, max_work: int) -> None:
    if isinstance(pattern, re.Pattern):
        flags |= pattern.flags
        pattern = pattern.pattern
    if not isinstance(pattern, (str, bytes)):
        return  # re raises TypeError itself
    if len(pattern) > 10_000:
        raise LimitExceeded("regular expression too long")
    exponent = regex_exponent(pattern, flags)
    if exponent is None:
        raise LimitExceeded("regular expression may backtrack exponentially")
    n = max(subject_len, 1)
    if n ** (1 + exponent) > max_work and exponent > 0:
        raise LimitExceeded("regular expression too costly for this input")
    if n > max_work:
        raise LimitExceeded("regex subject too long")
