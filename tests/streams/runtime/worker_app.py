"""The application ``test_worker_cli`` runs with ``headrace worker --app
tests.streams.runtime.worker_app:make_provider``: an embedded store (``HEADRACE_TEST_STORE``) of
two queues and one implicit consumer."""

from __future__ import annotations

import os

from streams import StreamId, StreamProvider

QUEUES = 2


def make_provider() -> StreamProvider:
    provider = StreamProvider.embedded(os.environ["HEADRACE_TEST_STORE"], queues=QUEUES)

    @provider.implicit("sensors")
    class Readings:
        def __init__(self, stream_id: StreamId) -> None:
            self.n = 0

        def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
            self.n += len(batch)

    return provider
