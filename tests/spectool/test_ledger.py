"""The occurrence ledger (spectool.speculation.ledger) without an event loop: which
entry a launch, a bet or a real call meets, what is claimed, declined, retired.

Plain synchronous tests: the ledger runs nothing, so none of them awaits.
"""

import pytest

import spectool
from spectool.speculation.ledger import Entry, EntryState, Ledger
from spectool.speculation.reuse import handed_out, not_reusable
from spectool.trace import Trace, TurnStats


def _tools():
    @spectool.tool(speculate="pure")
    async def draw(x: int) -> int: ...

    @spectool.tool(speculate="pure", deterministic=True)
    async def lookup(x: int) -> int: ...

    @spectool.tool(speculate="pure")
    async def first(items: list) -> list: ...

    @spectool.tool
    async def ask(q: str) -> str: ...

    return {t.name: t for t in (draw, lookup, first, ask)}


@pytest.fixture
def ledger():
    return Ledger(_tools(), trace=Trace(), stats=TurnStats(), turn_id="t1")


def launch(ledger, name, *args, origin="statement"):
    """What the store does for a shadow launch: meet an entry, else open one."""
    call = ledger.prepare(name, args, {}, origin)
    assert call is not None
    return ledger.meet_launch(call.tool, call.key) or ledger.open_launch(call, origin)


def bet(ledger, name, *args, origin="tail"):
    call = ledger.prepare(name, args, {}, origin)
    return ledger.open_bet(call, origin)


def real(ledger, name, *args):
    call = ledger.prepare(name, args, {}, "statement")
    return ledger.meet_real(call.tool, call.args, call.kwargs, call.key)


def test_the_nth_launch_and_the_nth_real_call_of_a_key_meet():
    ledger = Ledger(_tools(), trace=Trace(), stats=TurnStats(), turn_id="t1")
    first, second = launch(ledger, "draw", 1), launch(ledger, "draw", 1)
    assert first is not second                       # identical calls are not merged
    assert (first.occurrence, second.occurrence) == (0, 1)
    assert real(ledger, "draw", 1) == (first, False)
    assert real(ledger, "draw", 1) == (second, False)


def test_a_real_call_never_meets_another_occurrence(ledger):
    """Negative control: the real run's first call must not claim the shadow's second
    launch, nor a launch of other arguments."""
    launch(ledger, "draw", 2)
    only = launch(ledger, "draw", 1)
    entry, fresh = real(ledger, "draw", 1)
    assert entry is only and not fresh
    again, fresh = real(ledger, "draw", 1)           # occurrence 1: nothing launched
    assert again is not only and fresh and again.occurrence == 1
    assert again.claimed and again.origin == "real"


def test_a_launch_behind_the_real_run_joins_its_call(ledger):
    entry, fresh = real(ledger, "draw", 5)
    assert fresh
    assert launch(ledger, "draw", 5) is entry
    assert ledger.trace.of("join")


def test_a_deterministic_key_shares_entry_zero(ledger):
    entry = launch(ledger, "lookup", 3)
    assert launch(ledger, "lookup", 3) is entry
    assert real(ledger, "lookup", 3) == (entry, False)
    assert real(ledger, "lookup", 3) == (entry, False)
    # once the key has its entry, no bet is needed for any number of calls
    assert ledger.bets_needed(entry.tool, entry.key, 5) == 0
    draw = ledger.tools["draw"]
    assert ledger.bets_needed(draw, entry.key, 5) == 5


def test_a_bet_is_adopted_by_the_next_launch_of_its_key(ledger):
    b = bet(ledger, "draw", 7)
    assert b.occurrence == -1 and ledger.bets == [b]
    assert launch(ledger, "draw", 7) is b
    assert b.occurrence == 0 and ledger.bets == [] and ledger.placed("draw", b.key) == [b]


def test_a_real_call_adopts_a_bet_the_shadow_has_not(ledger):
    b = bet(ledger, "draw", 7)
    assert real(ledger, "draw", 7) == (b, False)
    assert ledger.bets == [] and b.occurrence == 0
    # the shadow's launch of that occurrence then joins it
    assert launch(ledger, "draw", 7) is b


def test_idempotency_keys_name_turn_tool_and_occurrence(ledger):
    first, second = launch(ledger, "draw", 1), launch(ledger, "draw", 1)
    assert first.idempotency_key.startswith("t1:draw:0:")
    assert second.idempotency_key.startswith("t1:draw:1:")
    assert first.idempotency_key[-16:] == second.idempotency_key[-16:]   # same key digest


@pytest.mark.parametrize("name, args, origin, reason", [
    ("ask", ("q",), "statement", "not speculatable"),
    ("nope", (1,), "statement", "not speculatable"),
    ("draw", ("x",), "statement", "arguments invalid"),
    ("first", ([1, object()],), "statement", "arguments not plain data"),
])
def test_prepare_declines_what_cannot_be_speculated(ledger, name, args, origin, reason):
    assert ledger.prepare(name, args, {}, origin) is None
    assert ledger.stats.declined == 1
    assert ledger.trace.of("decline")[0].data["reason"] == reason
    assert ledger.prepare(name, args, {}, origin, quiet=True) is None
    assert ledger.stats.declined == 1                # quiet: not counted


def test_a_closed_ledger_prepares_nothing(ledger):
    assert ledger.prepare("draw", (1,), {}, "statement") is not None
    ledger.closed = True
    assert ledger.prepare("draw", (1,), {}, "statement") is None


def test_a_declined_bet_is_needed_only_by_a_miss_at_or_after_its_occurrence(ledger):
    draw = ledger.tools["draw"]
    key = launch(ledger, "draw", 1).key              # occurrences 0 and 1 run
    launch(ledger, "draw", 1)
    ledger.record_decline(draw, key, "tail")         # would have been occurrence 2
    assert ledger.pop_declined("draw", key, 1) is None     # negative control
    assert ledger.pop_declined("lookup", key, 2) is None   # another tool
    assert ledger.pop_declined("draw", key, 2) == "tail"
    assert ledger.pop_declined("draw", key, 2) is None     # popped once


def test_a_miss_at_a_declined_occurrence_is_reported_by_the_real_call(ledger):
    draw = ledger.tools["draw"]
    key = ledger.prepare("draw", (4,), {}, "tail").key
    ledger.record_decline(draw, key, "duplicate")
    entry, fresh = real(ledger, "draw", 4)
    assert fresh and ledger.pop_declined("draw", key, entry.occurrence) == "duplicate"


def test_claim_outcomes_report_launches_and_leftover_declines_once(ledger):
    claimed, unclaimed = launch(ledger, "draw", 1), launch(ledger, "draw", 2)
    unmanaged = launch(ledger, "draw", 3)
    claimed.klass, unclaimed.klass, unmanaged.klass = "statement", "tail", "unmanaged"
    for e in (claimed, unclaimed, unmanaged):
        ledger.record_launch(e)
    real(ledger, "draw", 1)[0].claimed = True
    ledger.record_decline(ledger.tools["draw"], claimed.key, "duplicate")
    assert ledger.claim_outcomes() == [("draw", "statement", True), ("draw", "tail", False),
                                       ("draw", "duplicate", False)]
    assert ledger.claim_outcomes() == []


def test_a_promoted_entry_is_claimed_only_while_pending(ledger):
    pending, running = launch(ledger, "draw", 1), launch(ledger, "draw", 2)
    running.state = EntryState.RUNNING
    assert ledger.promote(pending) and pending.claimed and pending.promoted
    assert not ledger.promote(pending)               # already claimed
    assert not ledger.promote(running) and not running.claimed


def test_retire_counts_finished_as_wasted_and_unfinished_as_evicted(ledger):
    done, pending = launch(ledger, "draw", 1), launch(ledger, "draw", 2)
    done.finish()
    assert ledger.retire(done) and ledger.retire(pending)
    assert (ledger.stats.wasted, ledger.stats.evicted) == (1, 1)
    assert done.state is pending.state is EntryState.EVICTED
    assert not ledger.retire(done)                   # once
    claimed = launch(ledger, "draw", 3)
    claimed.state = EntryState.CLAIMED
    assert not ledger.retire(claimed) and ledger.stats.wasted == 1


def test_withdraw_removes_a_bet_and_retires_it(ledger):
    b = bet(ledger, "draw", 1)
    assert ledger.withdraw(b)
    assert ledger.bets == [] and b.withdrawn and b.state is EntryState.EVICTED
    assert ledger.stats.withdrawn == 1 and ledger.stats.evicted == 1


def test_covered_counts_real_calls_ahead_of_the_shadow_and_bets(ledger):
    real(ledger, "draw", 1)
    real(ledger, "draw", 1)
    key = ledger.prepare("draw", (1,), {}, "tail").key
    assert ledger.covered("draw", key) == 2
    launch(ledger, "draw", 1)                        # the shadow catches up by one
    bet(ledger, "draw", 1)
    assert ledger.covered("draw", key) == 2
    assert ledger.covered("lookup", key) == 0


def test_lookahead_entry_is_the_fifo_then_the_bets_in_order(ledger):
    placed = launch(ledger, "draw", 1)
    b1, b2 = bet(ledger, "draw", 1, origin="lookahead"), bet(ledger, "draw", 1)
    tool, key = placed.tool, placed.key
    assert [ledger.lookahead_entry(tool, key, i) for i in range(4)] == [placed, b1, b2, None]


def test_pure_calls_group_bettable_calls_by_key(ledger):
    need = ledger.pure_calls([("draw", (1,), {}), ("ask", ("q",), {}), ("draw", (1,), {}),
                              ("draw", ("bad",), {}), ("lookup", (2,), {})])
    assert [(k[0], len(v)) for k, v in need.items()] == [("draw", 2), ("lookup", 1)]
    assert ledger.stats.declined == 0                # quiet


def test_nokey_keys_are_distinct(ledger):
    assert ledger.nokey_key("draw") == "t1:draw:nokey1"
    assert ledger.nokey_key("draw", "call") == "t1:draw:call2"


def test_an_entry_holding_an_argument_is_not_reusable(ledger):
    items = [1, 2]
    call = ledger.prepare("first", (items,), {}, "statement")
    entry = ledger.open_launch(call, "statement")
    entry.value = [entry.args[0]]                    # the result holds the argument
    assert not_reusable(entry) == "the result holds an argument"
    entry.value = [1, 2]                             # an equal copy is fine
    assert not_reusable(entry) is None
    entry.args[0].append(3)                          # the tool changed its argument
    assert not_reusable(entry) == "the tool changed its arguments"


def test_scalar_arguments_are_always_reusable(ledger):
    entry = launch(ledger, "draw", 1)
    entry.value = 1
    assert not_reusable(entry) is None


def test_a_deterministic_result_is_handed_out_as_a_copy(ledger):
    shared, own = launch(ledger, "lookup", 1), launch(ledger, "draw", 1)
    shared.value = own.value = [1]
    copied = handed_out(shared)
    assert copied == [1] and copied is not shared.value
    assert handed_out(own) is own.value


def test_a_plain_ledger_makes_plain_entries(ledger):
    entry = launch(ledger, "draw", 1)
    assert type(entry) is Entry and not entry.finished
    entry.finish()
    assert entry.finished
