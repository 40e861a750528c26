"""The application of the Kafka cluster-state tests, run with
``headrace worker --app tests.end_to_end.cluster.kafka_cluster_app:app`` in a directory of its own: the
topic ``HEADRACE_TEST_TOPIC`` (4 partitions) of the broker at ``HEADRACE_TEST_KAFKA``, no
local store, and a consumer type ``Recorder`` for durable subscriptions that appends each
value it is given to ``HEADRACE_TEST_OUT`` (``<stream> <value>`` a line)."""

from __future__ import annotations

import os
from typing import Any

from balancer import BalancerOptions
from streams import StreamId, StreamProvider

QUEUES = 4
SESSION = 3.0  # the group's session timeout, seconds


def provider_for(bootstrap: str, topic: str) -> StreamProvider:
    """The provider every process of a test builds (workers and the subscribing client)."""
    provider = StreamProvider.kafka(
        bootstrap,
        topic,
        queues=QUEUES,
        kafka={"idempotent": False},
        balancer_options=BalancerOptions(SESSION, renew_period=SESSION / 3, refresh_period=SESSION / 6),
        shutdown_timeout=2.0,
    )

    @provider.consumer("Recorder")
    class Recorder:
        def __init__(self, stream_id: StreamId) -> None:
            self.stream_id = stream_id

        def on_next(self, batch: Any) -> None:
            with open(os.environ["HEADRACE_TEST_OUT"], "a") as out:
                out.writelines(f"{self.stream_id} {value}\n" for value in batch.values)

    return provider


def app() -> StreamProvider:
    return provider_for(os.environ["HEADRACE_TEST_KAFKA"], os.environ["HEADRACE_TEST_TOPIC"])
