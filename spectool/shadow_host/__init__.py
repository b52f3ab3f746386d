"""The shadow's host side and process boundary.

``pool`` (a pool of warm worker processes) with ``worker_process`` (the host's handle
on one worker and its lanes), ``protocol`` (the messages between host and worker),
``worker`` (the worker process's program), ``process_driver`` and ``thread_driver``
(the two shadow drivers of a turn, behind ``driver.ShadowDriverProtocol``) and
``snapshot`` (the namespace snapshot of the thread driver).

This ``__init__`` imports nothing: the worker starts with ``python -I -S`` under a
bare ``spectool`` package and imports ``spectool.shadow_host.worker`` through it.
"""
