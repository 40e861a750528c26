"""The application ``test_status_rates`` runs with ``headrace worker``: its provider comes
from the configuration (``HEADRACE_CONFIG``); ``readings`` streams are counted as they come,
while a ``stuck`` stream's consumer never finishes its first batch (until the worker stops),
so it falls behind."""

from __future__ import annotations

import anyio

from streams import StreamId
from streams.runtime.config import load_config

provider = load_config().provider()


@provider.implicit("readings")
class Counting:
    def __init__(self, stream_id: StreamId) -> None:
        self.n = 0

    def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
        self.n += len(batch)


@provider.implicit("stuck")
class Stuck:
    def __init__(self, stream_id: StreamId) -> None:
        pass

    async def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
        await anyio.sleep_forever()
