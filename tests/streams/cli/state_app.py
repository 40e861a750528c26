"""The application of the ``headrace state`` tests: an embedded store at
``HEADRACE_TEST_STORE``, and ``Alerts`` (namespace ``orders``), whose ``alerted`` field is
written only at a user's third order."""

from __future__ import annotations

import os
from typing import Any

from streams import Durable, StreamId, StreamProvider

provider = StreamProvider.embedded(os.environ["HEADRACE_TEST_STORE"], queues=2)


@provider.implicit("orders")
class Alerts:
    orders = Durable(0)
    alerted = Durable(list)  # never read or written before a third order

    def __init__(self, stream_id: StreamId) -> None:
        self.user = stream_id.key

    def on_next(self, batch: Any) -> None:
        self.orders += len(batch)
        if self.orders >= 3:
            self.alerted.append(self.orders)
