"""The host's own work per turn, kept off the event loop or bounded before it starts.

The promise is that the event loop never stalls for more than about 50 ms, whatever a
cell names, streams or returns. Work whose cost grows with a cell's data is therefore
either done somewhere else (a worker thread for Python-level work, which yields the
GIL every few milliseconds; a child process for one long C call such as compiling a
huge cell, which would hold the GIL throughout) or bounded by a budget that is checked
*before* the work, the excess declined: the bet or the observation that needed it is
not made, which is baseline behaviour, and the real run never changes.

The bounds, where they are enforced:

* ``LOOP_COPY_ITEMS``: container elements one plain-data copy on the loop may take
  (a ``never`` tool's result observed for the shadow, a tool outcome sent to a shadow
  worker process); a larger value reaches the shadow as ``Unknown``. The names a
  delta mentions are copied for a shadow process on the loop up to this bound and
  past it in a worker thread (``spectool.shadow_host.process_driver``), up to
  ``OFFLOOP_COPY_ITEMS`` per message: that thread also pickles the message, and the
  pickler's memo of a million strings is rebuilt in single C calls that hold the
  GIL for a tenth of a second. The thread shadow's namespace snapshot is copied in a
  worker thread and keeps ``Limits.max_namespace_items``.
* ``DELTA_SLICE_CHARS``: a stream delta longer than this is fed to the segmenter in
  slices of this size with a checkpoint between them (``spectool.runtime``).
* ``spectool.stream.segmenter.MAX_STATEMENT_CHARS`` / ``MAX_PARSED_CHARS``: a statement
  longer than the first, or past the second in one message, is not parsed on the
  host; the shadow skips the rest of its cell. Baseline parses no statement at all.
* ``spectool.keys.MAX_KEY_NODES`` / ``MAX_KEY_CHARS``: arguments past these have no
  key (the call is not speculated).
* ``spectool.shadow.hash_guard.COLLISION_BUDGET``: a dict or set whose members share
  hashes is not copied (``Unknown``) rather than rebuilt in quadratic time, and the
  shadow interpreter declines a bulk insertion (``set(xs)``, ``d.update(pairs)``,
  ``a | b``) of such members.
* ``OFFLOOP_COMPILE_CHARS``: a cell longer than this is compiled in a child process
  (``spectool.execution.inprocess``), in baseline as in every mode.
* :func:`larger_than` decides, in at most ``LOOP_COPY_ITEMS`` steps, when a walk over a
  value belongs in a worker thread: a deterministic tool's result deep-copied for each
  real call (``spectool.speculation.store``), a result measured against a tool's output cap
  (``spectool.tools``).
"""

from __future__ import annotations

__all__ = ["LOOP_COPY_ITEMS", "OFFLOOP_COPY_ITEMS", "DELTA_SLICE_CHARS",
           "OFFLOOP_COMPILE_CHARS", "larger_than"]

LOOP_COPY_ITEMS = 25_000
OFFLOOP_COPY_ITEMS = 250_000
DELTA_SLICE_CHARS = 2_048
OFFLOOP_COMPILE_CHARS = 16_384


def larger_than(value: object, limit: int) -> bool:
    """Do the lists, tuples, sets and dicts in ``value`` hold more than ``limit``
    elements? A walk that stops at the limit (at most ``limit`` steps) and looks only at
    those exact types (no user code)."""
    seen = 0
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is list or t is tuple or t is set or t is frozenset:
            seen += len(v)  # type: ignore[arg-type]
            if seen > limit:
                return True
            stack.extend(v)  # type: ignore[arg-type]
        elif t is dict:
            seen += len(v)  # type: ignore[arg-type]
            if seen > limit:
                return True
            stack.extend(v.values())  # type: ignore[attr-defined]
    return False
