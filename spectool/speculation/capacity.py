"""Speculation capacity: calls and argument bytes in flight, first come first served.

One :class:`Budget` is shared by all turns of a runtime. Admission is first-come
first-served in launch order; it waits and never refuses (a call larger than the byte
cap runs once nothing else is in flight). Real calls never go through it: they have
priority over every speculation.
"""

from __future__ import annotations

from collections import deque

import anyio

__all__ = ["Budget", "Ticket"]


class Ticket:
    """A place in the budget's FIFO queue."""

    __slots__ = ("nbytes", "admitted", "released", "event")

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.admitted = False
        self.released = False
        self.event: anyio.Event | None = None


class Budget:
    """Speculative calls and argument bytes in flight, shared by a runtime's turns.

    Admission is first-come first-served in *launch* order (``enqueue`` is synchronous).
    It waits, never refuses: a call larger than the byte cap runs once nothing else is
    in flight. Real calls never go through the budget.
    """

    def __init__(self, max_in_flight: int = 16, max_arg_bytes_in_flight: int = 4 << 20) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.max_in_flight = max_in_flight
        self.max_arg_bytes = max_arg_bytes_in_flight
        self.in_flight = 0
        self.arg_bytes = 0
        self.peak_in_flight = 0
        self._queue: deque[Ticket] = deque()

    def _admissible(self, nbytes: int) -> bool:
        if self.in_flight >= self.max_in_flight:
            return False
        return self.in_flight == 0 or self.arg_bytes + nbytes <= self.max_arg_bytes

    def enqueue(self, nbytes: int) -> Ticket:
        ticket = Ticket(nbytes)
        self._queue.append(ticket)
        self._pump()
        return ticket

    async def wait(self, ticket: Ticket) -> None:
        if not ticket.admitted:
            ticket.event = anyio.Event()
            await ticket.event.wait()

    def release(self, ticket: Ticket) -> None:
        """Give the place back: admitted -> frees capacity; still queued -> leaves the queue."""
        if ticket.released:
            return
        ticket.released = True
        if ticket.admitted:
            self.in_flight -= 1
            self.arg_bytes -= ticket.nbytes
        else:
            try:
                self._queue.remove(ticket)
            except ValueError:
                pass
        self._pump()

    def _pump(self) -> None:
        while self._queue and self._admissible(self._queue[0].nbytes):
            ticket = self._queue.popleft()
            ticket.admitted = True
            self.in_flight += 1
            self.arg_bytes += ticket.nbytes
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            if ticket.event is not None:
                ticket.event.set()
