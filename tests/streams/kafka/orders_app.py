"""A Kafka worker app with default settings, as a new user writes it, for ``headrace worker
--app tests.streams.kafka.orders_app:app``: topic ``HEADRACE_TEST_TOPIC`` (2 queues) of the
broker at ``HEADRACE_TEST_KAFKA``, group ``HEADRACE_TEST_GROUP``. Its plain consumer appends
``value stream token`` for every event it gets to the file ``HEADRACE_TEST_RECORDS``, a line
at a time (a SIGKILL loses nothing written). ``HEADRACE_TEST_COMMIT_INTERVAL`` and
``HEADRACE_TEST_SESSION`` (the group's session timeout, seconds: the test broker holds each
join for half of it), when set, are the settings changed."""

from __future__ import annotations

import os
from typing import Any

from balancer import BalancerOptions
from streams import StreamId, StreamProvider

QUEUES = 2
NAMESPACE = "orders"


def app() -> StreamProvider:
    interval = os.environ.get("HEADRACE_TEST_COMMIT_INTERVAL")
    session = os.environ.get("HEADRACE_TEST_SESSION")
    provider = StreamProvider.kafka(
        os.environ["HEADRACE_TEST_KAFKA"],
        os.environ["HEADRACE_TEST_TOPIC"],
        queues=QUEUES,
        group_id=os.environ["HEADRACE_TEST_GROUP"],
        **({} if interval is None else {"kafka": {"commit_interval": float(interval)}}),
        **({} if session is None else {"balancer_options": _session(float(session))}),
    )
    seen = open(os.environ["HEADRACE_TEST_RECORDS"], "a", buffering=1)

    @provider.implicit(NAMESPACE)
    class Orders:
        def __init__(self, stream_id: StreamId) -> None:
            self.stream = stream_id.key

        def on_next(self, batch: Any) -> None:
            seen.write("".join(f"{e.value} {self.stream} {e.token.sequence_number}\n" for e in batch))

    return provider


def _session(seconds: float) -> BalancerOptions:
    """A group session of ``seconds``, a heartbeat every third of it."""
    return BalancerOptions(seconds, renew_period=seconds / 3, refresh_period=0.5)
