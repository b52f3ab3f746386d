"""Reading a model's stream: delta shapes in, cells and statements out.

``adapters`` (every delta shape an agent stack produces -> one normal form:
``normalize``, ``deltas``, ``text_deltas``, ``StreamNormalizer``) and ``segmenter``
(text deltas of one message -> code cells, closed statements, open tail; pure).

Nothing is imported here: the shadow's worker process loads ``segmenter`` alone (it
imports no I/O or concurrency library), without the adapters.
"""
