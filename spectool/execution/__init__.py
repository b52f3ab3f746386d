"""Running cells for real: the executors and what confines them.

``inprocess`` (the in-process executor: ``exec`` in a worker thread), ``_compile``
(compiling a large cell off the event loop's thread), ``subprocess_executor`` (the
subprocess executor, host side) with ``worker`` (its worker process, started as a
script with ``python -I``: it imports only the standard library), ``sandbox`` (how the
worker is confined) and the safe rebuilding of what the worker sends back.

Nothing is imported here: importing one module of the package loads only what that
module needs.
"""
