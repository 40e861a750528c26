"""The application of the poison-record test: an implicit consumer whose constructor raises
for the stream ``orders/poison``; every other stream's events are appended, one per line,
to the file ``$POISON_OUT``."""

from __future__ import annotations

import os

from streams import StreamId
from streams.runtime.config import load_config

config = load_config()
provider = config.provider()


@provider.implicit("orders")
class Orders:
    def __init__(self, stream_id: StreamId) -> None:
        if stream_id.key == "poison":
            raise ValueError(f"no customer for {stream_id.key}")
        self.key = stream_id.key

    def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
        with open(os.environ["POISON_OUT"], "a") as out:
            out.writelines(f"{self.key} {e.value}\n" for e in batch)
