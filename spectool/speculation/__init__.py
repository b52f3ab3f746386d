"""Speculation bookkeeping: the store of one turn's speculative calls and what it uses.

``store`` (the speculation store), ``admission`` (whether a launch is expected to pay),
``capacity`` (calls and argument bytes in flight), ``effects`` (settling idempotent and
two_phase runs), ``observations`` (the shadow's view of real calls it may not start).
"""
