"""The embedded backend: everything that talks to SQLite, in one store under a directory.

The store and its turns (``store``, ``group_commit``), the queues and their receiver
(``queues``, ``adapter``), pub-sub, dead letters, the balancer's leases and membership
(``balancer``), the handoff log (``handoff_log``, ``handoff_sink``, ``handoff_commit``,
``handoff_retention``, ``mark_retention``), the status board (``status``), and the backend that
builds them (``backend``). ``sqlite3`` is imported here and nowhere else.
"""
