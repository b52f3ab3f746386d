"""Tail peeking (first version: no bets yet; see the full implementation to come)."""

from __future__ import annotations

__all__ = ["peek_tail"]


def peek_tail(interp, tail: str) -> list:
    return []
