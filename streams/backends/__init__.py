"""One package per backend, each everything that talks to its kind of queue and store, and
nothing that talks to another's: ``memory`` (this process), ``embedded`` (SQLite under a
directory) and ``kafka``. Each builds its parts behind the runtime's
:class:`~streams.runtime.backends.Backend` protocol.

The packages' roots import nothing, so that a Spark executor reading the embedded handoff log
loads that log's modules only.
"""
