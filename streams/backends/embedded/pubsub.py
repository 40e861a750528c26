"""Durable explicit subscriptions in the embedded store (table ``pubsub_subscriptions``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from functools import partial

from streams.backends.embedded.store import EmbeddedStore, Schema, in_chunks
from streams.core.clock import wall_time
from streams.core.ids import SequenceToken, StreamId
from streams.core.pubsub import SubscriptionRecord, SubscriptionState, by_stream

PUBSUB_SCHEMA: Schema = [
    # Namespace and key apart: a namespace may itself contain "/".
    "CREATE TABLE pubsub_subscriptions("
    " subscription_id TEXT PRIMARY KEY, namespace TEXT NOT NULL, key TEXT NOT NULL,"
    " consumer_type TEXT NOT NULL, start_seq INTEGER, start_index INTEGER,"
    " state TEXT NOT NULL, created REAL NOT NULL)",
    "CREATE INDEX pubsub_subscriptions_by_stream ON pubsub_subscriptions(namespace, key)",
]

_COLUMNS = "subscription_id, namespace, key, consumer_type, start_seq, start_index, state"
_Row = tuple[str, str, str, str, int | None, int | None, str]


def _record(row: _Row) -> SubscriptionRecord:
    subscription_id, namespace, key, consumer_type, seq, index, state = row
    return SubscriptionRecord(
        subscription_id,
        StreamId(namespace, key),
        consumer_type,
        None if seq is None else SequenceToken(seq, index or 0),
        SubscriptionState(state),
    )


class EmbeddedPubSubStore:
    """A :class:`streams.core.pubsub.PubSubStore` in the embedded store: subscriptions survive
    restarts and are seen by every process that opens the same directory.

    >>> import anyio, tempfile
    >>> from streams.backends.embedded.store import EmbeddedStore
    >>> async def main():
    ...     pubsub = EmbeddedPubSubStore(EmbeddedStore(tempfile.mkdtemp()))
    ...     await pubsub.add_subscription(
    ...         SubscriptionRecord("sub-1", StreamId("sensors", "s-1"), "Averager"))
    ...     return [r.consumer_type for r in await pubsub.subscriptions()]
    >>> anyio.run(main)
    ['Averager']
    """

    def __init__(self, store: EmbeddedStore) -> None:
        store.require_schema("pubsub", PUBSUB_SCHEMA)
        self._store = store

    async def add_subscription(self, record: SubscriptionRecord) -> None:
        """Add the record, or replace the one with the same subscription id."""
        token = record.start_token
        row = (
            record.subscription_id,
            record.stream_id.namespace,
            record.stream_id.key,
            record.consumer_type,
            None if token is None else token.sequence_number,
            None if token is None else token.event_index,
            record.state.value,
            wall_time(),
        )
        await self._store.write(
            lambda conn: conn.execute(
                f"INSERT INTO pubsub_subscriptions({_COLUMNS}, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(subscription_id) DO UPDATE SET namespace = excluded.namespace,"
                " key = excluded.key, consumer_type = excluded.consumer_type,"
                " start_seq = excluded.start_seq, start_index = excluded.start_index,"
                " state = excluded.state",
                row,
            )
        )

    async def remove_subscription(self, subscription_id: str) -> None:
        await self._store.write(
            lambda conn: conn.execute("DELETE FROM pubsub_subscriptions WHERE subscription_id = ?", (subscription_id,))
        )

    async def fault_subscription(self, subscription_id: str) -> None:
        await self._store.write(
            lambda conn: conn.execute(
                "UPDATE pubsub_subscriptions SET state = ? WHERE subscription_id = ?",
                (SubscriptionState.FAULTED.value, subscription_id),
            )
        )

    async def subscriptions(self, stream_id: StreamId | None = None) -> list[SubscriptionRecord]:
        """The records of one stream, or of every stream, oldest first."""
        return await self._store.read(partial(self._select, stream_id))

    async def subscriptions_of(self, stream_ids: Collection[StreamId]) -> dict[StreamId, list[SubscriptionRecord]]:
        """The records of each stream, read in one query per namespace and
        ``KEYS_PER_QUERY`` keys (the index on namespace and key serves each)."""
        if not stream_ids:
            return {}
        return await self._store.read(partial(self._select_many, stream_ids))

    @staticmethod
    def _select_many(
        stream_ids: Collection[StreamId], conn: sqlite3.Connection
    ) -> dict[StreamId, list[SubscriptionRecord]]:
        keys: dict[str, list[str]] = {}
        for sid in stream_ids:
            keys.setdefault(sid.namespace, []).append(sid.key)
        rows: list[tuple[int, str, str, str, str, int | None, int | None, str]] = []  # rowid first
        for namespace, of_namespace in keys.items():
            for marks, chunk in in_chunks(of_namespace):
                rows += conn.execute(
                    f"SELECT rowid, {_COLUMNS} FROM pubsub_subscriptions WHERE namespace = ? AND key IN ({marks})",
                    (namespace, *chunk),
                )
        rows.sort()  # oldest first, as subscriptions() gives them
        return by_stream((_record(row[1:]) for row in rows), stream_ids)

    @staticmethod
    def _select(stream_id: StreamId | None, conn: sqlite3.Connection) -> list[SubscriptionRecord]:
        if stream_id is None:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM pubsub_subscriptions ORDER BY rowid")
        else:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM pubsub_subscriptions WHERE namespace = ? AND key = ? ORDER BY rowid",
                (stream_id.namespace, stream_id.key),
            )
        return [_record(row) for row in rows]
