"""Where Spark is in the embedded handoff log: the offsets its streaming query last committed,
per stream and partition, with the time, for ``headrace status`` and the status page.

The Spark DataSource's stream reader (:mod:`spark_sink.datasource`) writes them; the table is
its own area of the store, made at the first write, so a store written before it existed
reads as "no commit yet". A Python DataSource learns neither its query's name nor its
checkpoint, so several queries reading one stream share one row per partition: the latest
commit of any of them.

>>> import tempfile
>>> from streams.backends.embedded.store import EmbeddedStore
>>> store = EmbeddedStore(tempfile.mkdtemp())
>>> record(store, "averages", {0: 12, 1: 7}, now=100.0)
>>> committed(store)
{'averages': ({0: 12, 1: 7}, 100.0)}
"""

from __future__ import annotations

from collections.abc import Mapping

from streams.backends.embedded.store import EmbeddedStore, Schema

AREA = "spark_commits"
SCHEMA: Schema = [
    "CREATE TABLE handoff_commits("
    " stream TEXT NOT NULL, partition INTEGER NOT NULL,"
    " committed_offset INTEGER NOT NULL,"  # Spark has read and committed every offset below
    " committed_at REAL NOT NULL,"  # wall_time() of the commit
    " PRIMARY KEY (stream, partition)) WITHOUT ROWID",
]


def record(store: EmbeddedStore, stream: str, offsets: Mapping[int, int], now: float) -> None:
    """Record that Spark has committed ``stream`` up to ``offsets`` (one write transaction)."""
    store.require_schema(AREA, SCHEMA)
    with store.transaction() as conn:
        conn.executemany(
            "INSERT INTO handoff_commits (stream, partition, committed_offset, committed_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (stream, partition) DO UPDATE SET "
            "committed_offset = excluded.committed_offset, committed_at = excluded.committed_at",
            [(stream, partition, offset, now) for partition, offset in offsets.items()],
        )


def committed(store: EmbeddedStore) -> dict[str, tuple[dict[int, int], float]]:
    """Each stream's committed offsets per partition and when the latest was committed; ``{}``
    for a store where Spark never committed."""
    with store.snapshot() as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'handoff_commits'").fetchone():
            return {}
        rows = conn.execute("SELECT stream, partition, committed_offset, committed_at FROM handoff_commits").fetchall()
    found: dict[str, tuple[dict[int, int], float]] = {}
    for stream, partition, offset, at in rows:
        offsets, latest = found.get(stream, ({}, at))
        offsets[partition] = offset
        found[stream] = (offsets, max(latest, at))
    return found
