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

from streams.core.errors import QueueAdapterError
from streams.core.outage import quiet_client_library
from streams.core.retry import retry
from streams.kafka.outage import AIOKAFKA_CONNECTION_LOGGERS
from streams.kafka.settings import KafkaSettings


async def check_reachable(settings: KafkaSettings, within: float = 5.0) -> None:
    """Return once a broker of ``settings`` answers a metadata request; raise
    :class:`QueueAdapterError` (one line) if none does within ``within`` seconds.

    >>> import anyio
    >>> settings = KafkaSettings("127.0.0.1:1", "sensors", 4)    # nothing listens on port 1
    >>> try:
    ...     anyio.run(check_reachable, settings, 0.2)
    ... except QueueAdapterError as exc:
    ...     print(str(exc).split(" (")[0])
    Kafka at 127.0.0.1:1 did not answer within 0.2 s
    """
    quiet_client_library("aiokafka", AIOKAFKA_CONNECTION_LOGGERS)  # its per-attempt errors: DEBUG
    began = time.monotonic()

    async def bootstrap() -> None:
        client = AIOKafkaClient(**settings.client_kwargs())
        try:
            with anyio.fail_after(max(within - (time.monotonic() - began), 0.01)):
                await client.bootstrap()
        finally:
            await client.close()

    def unanswered(exc: BaseException, waited: float) -> Exception:
        return QueueAdapterError(
            f"{settings.server} did not answer within {within:g} s ({str(exc) or type(exc).__name__}); "
            "check the address, and that the broker is running and reachable from here"
        )

    await retry(
        bootstrap,
        what=f"reaching {settings.server}",
        is_transient=lambda exc: isinstance(exc, (KafkaError, OSError)),
        give_up_after=within,
        give_up=unanswered,
    )
