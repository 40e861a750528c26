"""Whether a Kafka cluster answers at all, asked once before starting anything on it.

A worker that has run rides out an outage for ``give_up_after`` seconds (a minute by
default), keeping its positions. A command that has not started yet has nothing to keep:
when no broker answers within a few seconds, the address is most likely wrong, and saying
so at once is kinder than a minute of retries.
"""

from __future__ import annotations

import time

import anyio
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError

from streams.adapters.kafka import AIOKAFKA_CONNECTION_LOGGERS, KafkaSettings
from streams.adapters.outage import Backoff, quiet_client_library
from streams.core.errors import QueueAdapterError


async def check_reachable(settings: KafkaSettings, within: float = 5.0) -> None:
    """Return once a broker of ``settings`` answers a metadata request; raise
    :class:`QueueAdapterError` (one line) if none does within ``within`` seconds.

    >>> import anyio
    >>> from streams.adapters.kafka import KafkaSettings
    >>> settings = KafkaSettings("127.0.0.1:1", "sensors", 4)    # nothing listens on port 1
    >>> try:
    ...     anyio.run(check_reachable, settings, 0.2)
    ... except QueueAdapterError as exc:
    ...     print(str(exc).split(" (")[0])
    Kafka at 127.0.0.1:1 did not answer within 0.2 s
    """
    quiet_client_library("aiokafka", AIOKAFKA_CONNECTION_LOGGERS)  # its per-attempt errors: DEBUG
    began = time.monotonic()
    backoff = Backoff()
    while True:
        left = within - (time.monotonic() - began)
        client = AIOKafkaClient(**settings.client_kwargs())
        try:
            with anyio.fail_after(max(left, 0.01)):
                await client.bootstrap()
            return
        except (KafkaError, OSError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
        finally:
            await client.close()
        left = within - (time.monotonic() - began)
        if left <= 0:
            raise QueueAdapterError(
                f"{settings.server} did not answer within {within:g} s ({reason}); "
                "check the address, and that the broker is running and reachable from here"
            )
        await anyio.sleep(min(backoff.next(), left))
