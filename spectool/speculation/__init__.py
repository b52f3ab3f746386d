"""Speculation bookkeeping: one turn's speculative calls, and what decides and settles them.

``ledger`` (pure: occurrences, keys, claims, entry states), ``store`` (the dispatcher:
the speculations' tasks, cancellation, the shadow's host), ``claims`` (the real run's
calls), ``live`` (the store's entries), ``reuse`` (whether a finished speculation may
stand for the real call), ``admission`` (whether a launch is expected to pay),
``capacity`` (calls and argument bytes in flight), ``effects`` (settling idempotent and
two_phase runs), ``observations`` (the shadow's view of real calls it may not start).
"""

from .capacity import Budget
from .ledger import Entry, EntryState, Ledger, Outcome
from .store import Store

__all__ = ["Budget", "Entry", "EntryState", "Ledger", "Outcome", "Store"]
