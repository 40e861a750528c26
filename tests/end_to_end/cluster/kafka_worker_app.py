"""The application the Kafka cluster tests run with
``headrace worker --app tests.end_to_end.cluster.kafka_worker_app:app``: the topic ``HEADRACE_TEST_TOPIC``
(8 partitions) of the broker at ``HEADRACE_TEST_KAFKA``, workers sharing it through the Kafka
consumer group (session timeout ``HEADRACE_TEST_LEASE`` seconds), each with a local state
store under ``HEADRACE_TEST_STATE_DIR`` if that is set. It records deliveries and
receiver calls into ``HEADRACE_TEST_RECORDS`` as :mod:`tests.end_to_end.cluster.worker_app` does."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

from balancer import BalancerOptions
from streams import StreamProvider
from streams.backends.embedded.changelog_copy import open_changelog_copy
from streams.backends.kafka.adapter import KafkaAdapterFactory
from streams.backends.kafka.backend import KafkaBackend
from streams.backends.kafka.settings import KafkaSettings
from tests.end_to_end.cluster.worker_app import QUEUES, RecordingAdapter, recording


class RecordingKafkaFactory(KafkaAdapterFactory):
    provider: StreamProvider
    reads: TextIO

    async def create_adapter(self) -> RecordingAdapter:  # type: ignore[override]
        return RecordingAdapter(await super().create_adapter(), self.provider, self.reads)  # type: ignore[arg-type]


def app() -> StreamProvider:
    records = Path(os.environ["HEADRACE_TEST_RECORDS"])
    session = float(os.environ["HEADRACE_TEST_LEASE"])
    state_dir = os.environ.get("HEADRACE_TEST_STATE_DIR")
    settings = KafkaSettings(
        os.environ["HEADRACE_TEST_KAFKA"],
        os.environ["HEADRACE_TEST_TOPIC"],
        QUEUES,
        idempotent=False,
        state_dir=state_dir,
    )
    factory = RecordingKafkaFactory(settings, open_changelog_copy if state_dir else None)
    provider = StreamProvider(
        KafkaBackend(factory),
        balancer_options=BalancerOptions(session, renew_period=session / 3, refresh_period=session / 6),
        shutdown_timeout=2.0,
    )
    return recording(provider, factory, records)
