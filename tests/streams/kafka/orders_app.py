"""A Kafka worker app with default settings, as a new user writes it, for ``headrace worker
--app tests.streams.kafka.orders_app:app``: topic ``HEADRACE_TEST_TOPIC`` (2 queues) of the
broker at ``HEADRACE_TEST_KAFKA``, group ``HEADRACE_TEST_GROUP``. Its plain consumer appends
``value stream token`` for every event it gets to the file ``HEADRACE_TEST_RECORDS``, a line
at a time (a SIGKILL loses nothing written). ``HEADRACE_TEST_COMMIT_INTERVAL``, when set,
is the one setting changed."""

from __future__ import annotations

import os
from typing import Any

from streams import StreamId, StreamProvider

QUEUES = 2
NAMESPACE = "orders"


def app() -> StreamProvider:
    interval = os.environ.get("HEADRACE_TEST_COMMIT_INTERVAL")
    provider = StreamProvider.kafka(
        os.environ["HEADRACE_TEST_KAFKA"],
        os.environ["HEADRACE_TEST_TOPIC"],
        queues=QUEUES,
        group_id=os.environ["HEADRACE_TEST_GROUP"],
        **({} if interval is None else {"kafka": {"commit_interval": float(interval)}}),
    )
    seen = open(os.environ["HEADRACE_TEST_RECORDS"], "a", buffering=1)

    @provider.implicit(NAMESPACE)
    class Orders:
        def __init__(self, stream_id: StreamId) -> None:
            self.stream = stream_id.key

        def on_next(self, batch: Any) -> None:
            seen.write("".join(f"{e.value} {self.stream} {e.token.sequence_number}\n" for e in batch))

    return provider
