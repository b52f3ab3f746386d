"""Running cells for real: the executors and what confines them.

``inprocess`` (the in-process executor: ``exec`` in a worker thread), ``_compile``
(compiling a large cell off the event loop's thread), ``subprocess_executor`` (the
subprocess executor, host side) with ``worker`` (its worker process, started as a
script with ``python -I``: it imports only the standard library), ``sandbox`` (how the
worker is confined) and ``safe_unpickle`` (rebuilding what the worker sends back;
its allow-listed, bounded loader is ``pickle_loader``).

Nothing is imported here: importing one module of the package loads only what that
module needs.
"""
