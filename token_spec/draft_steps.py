"""Drafting for many sequences at once: a drafter's round as a plan of draft-model feeds.

A model drafter's round (bring the draft's KV cache up to the verified context, then up
to k autoregressive draft steps, each deciding from the rows so far whether to go on) is
written once, as a *plan*: a generator that yields ``Feed(session, ids)`` ("run these
tokens through this draft cache and send me the logits row after the last one") and
returns the round's ``Draft``. Two drivers run plans:

* ``run_plan(plan)``: one sequence, each feed by its session's ``extend``; the
  ``Drafter.propose`` path (decoder, bench);
* ``propose_many(requests)``: every sequence of a serving step together. The feeds the
  live plans yield at the same point (first the catch-up of each draft cache with the
  tokens accepted since its last draft, then draft position 1, 2, ...) run as packed
  passes of the draft model (``token_spec.packed.PackedLM``: one pass for all of them,
  each sequence's rows in its own KV cache), so a step costs about k draft passes where
  one sequence at a time costs n·k. A plan that ends early (a confidence stop, DSpark's
  schedule, a lookup match, a shut gate) drops out of the later passes. Feeds that
  cannot be packed (a session that is not the lean forward's, a catch-up wider than one
  pass, a lone feed) run through ``extend`` as in ``run_plan``.

A drafter offers a plan with ``plan(context, k, params, generator)``; ``plan_of`` wraps
any other drafter's ``propose`` as a plan that feeds nothing, so every drafter works
with both drivers.

Exactness: a plan's decisions and draws read only its own rows and use its own
generator, in the same order under either driver. So a request's draft under
``propose_many`` is its ``run_plan`` draft wherever the draft forward gives a row the
same bits packed as alone (the shipped int8 draft on the lean forward does at the
widths ``tests/token_spec/test_batch_draft.py`` probes; it is not padded, so nothing
guarantees it at every width on every CPU). Either way each draft token is drawn from
the q row returned with it, which is all the verifier needs: what the server emits
never depends on how the drafts were batched (greedy: vanilla's tokens).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .fast_forward import PAD_WIDTH, FastSession
from .packed import PackedLM, Segment

__all__ = ["Feed", "DraftRequest", "Plan", "now", "plan_of", "run_plan", "propose_many"]


@dataclass
class Feed:
    """Run ``ids`` (at least one) through ``session``; the plan gets the fp32 logits row ``[V]``
    after the last of them."""

    session: Any
    ids: list[int]


Plan = Generator[Feed, torch.Tensor, Any]


@dataclass
class DraftRequest:
    """One sequence's ask for a draft this step: ``drafter.propose``'s arguments."""

    drafter: Any
    context: Sequence[int]
    k: int
    params: Any
    generator: torch.Generator | None = None


def now(value: Any) -> Plan:
    """A plan that feeds nothing and returns ``value``."""
    return value
    yield  # a generator function: the plan ends at its first step  # pragma: no cover


def plan_of(drafter: Any, context: Sequence[int], k: int, params: Any, generator: torch.Generator | None) -> Plan:
    """``drafter.plan(...)`` where it has one, else its ``propose(...)`` (run now) as a plan."""
    plan = getattr(drafter, "plan", None)
    if plan is not None:
        return plan(context, k, params, generator)
    return now(drafter.propose(context, k, params, generator))


def _extend(feed: Feed) -> torch.Tensor:
    """The logits row after ``feed``'s last id. A feed wider than PAD_WIDTH (a catch-up,
    never packed) runs the LM head on its last row only, where the session can."""
    ids = torch.tensor(feed.ids, dtype=torch.long)
    last = getattr(feed.session, "extend_last", None)
    if last is not None and len(feed.ids) > PAD_WIDTH:
        return last(ids)
    return feed.session.extend(ids)[-1]


def run_plan(plan: Plan) -> Any:
    """Run one plan, each feed by its session's ``extend``; its result."""
    try:
        feed = next(plan)
        while True:
            feed = plan.send(_extend(feed))
    except StopIteration as stop:
        return stop.value


def _packable(feed: Feed):
    """The lean forward a feed can be packed on, or None."""
    session = feed.session
    if not isinstance(session, FastSession) or not 0 < len(feed.ids) <= PAD_WIDTH:
        return None
    lm = session._lm
    return lm if lm.tap is None else None


def _run_feeds(feeds: list[Feed]) -> list[torch.Tensor]:
    """Logits rows for ``feeds`` (distinct sessions): packed passes per draft model."""
    rows: list[torch.Tensor | None] = [None] * len(feeds)
    groups: dict[int, tuple[Any, list[int]]] = {}
    for i, feed in enumerate(feeds):
        lm = _packable(feed)
        if lm is not None:
            groups.setdefault(id(lm), (lm, []))[1].append(i)
    for lm, idx in groups.values():
        if len(idx) < 2:
            continue
        out = PackedLM(lm).forward([Segment(feeds[i].session, list(feeds[i].ids)) for i in idx])
        for i, logits in zip(idx, out):
            rows[i] = logits[-1]
    return [row if row is not None else _extend(feed) for row, feed in zip(rows, feeds)]


def propose_many(requests: Sequence[DraftRequest]) -> list[Any]:
    """Each request's draft (``Draft``), the model steps of all of them packed (see the
    module docstring); the same drafts ``propose`` gives one request at a time wherever
    the draft forward is batch-invariant."""
    out: list[Any] = [None] * len(requests)
    plans: dict[int, Plan] = {}
    waiting: dict[int, Feed] = {}

    def advance(i: int, plan: Plan, logits: torch.Tensor | None) -> None:
        try:
            waiting[i] = next(plan) if logits is None else plan.send(logits)
        except StopIteration as stop:
            out[i] = stop.value
            waiting.pop(i, None)

    for i, r in enumerate(requests):
        plans[i] = plan_of(r.drafter, r.context, r.k, r.params, r.generator)
        advance(i, plans[i], None)
    while waiting:
        order = sorted(waiting)
        if len({id(waiting[i].session) for i in order}) != len(order):
            raise ValueError("two draft requests share one draft session")
        rows = _run_feeds([waiting[i] for i in order])
        for i, logits in zip(order, rows):
            advance(i, plans[i], logits)
    return out
