"""The records an embedded store's queues retain, read back whole: what ``headrace export`` samples."""

from __future__ import annotations

from collections.abc import Iterator

from streams.backends.embedded.queue_tables import recorded_queue_count
from streams.backends.embedded.store import EmbeddedStore
from streams.core.batch import BatchContainer, BatchKind
from streams.core.errors import DecodeError
from streams.core.ids import StreamId


class StoreRecords:
    """The records an embedded store's queues retain (:class:`~streams.adapters.retention.RetainedRecords`)."""

    def __init__(self, store: EmbeddedStore) -> None:
        self.store = store

    def containers(self, namespace: str, key: str | None) -> Iterator[tuple[int, int, BatchContainer]]:
        with self.store.snapshot() as conn:
            if recorded_queue_count(conn) is None:
                return
            prefix = f"{namespace}/"
            where, params = (
                ("stream = ?", (str(StreamId(namespace, key)),))
                if key is not None
                else ("substr(stream, 1, ?) = ?", (len(prefix), prefix))
            )
            rows = conn.execute(
                f"SELECT queue, seq, payload FROM queue_records WHERE {where} ORDER BY queue, seq", params
            )
            for queue, seq, payload in rows:
                try:
                    container = BatchContainer.decode(payload)
                except DecodeError:
                    continue  # not a batch container: no events (the agent dead-letters it)
                if container.kind is BatchKind.DATA:
                    yield queue, seq, container

    def namespaces(self) -> list[str]:
        with self.store.snapshot() as conn:
            if recorded_queue_count(conn) is None:
                return []
            rows = conn.execute(
                "SELECT DISTINCT substr(stream, 1, instr(stream, '/') - 1) FROM queue_records ORDER BY 1"
            )
            return [name for (name,) in rows if name]
