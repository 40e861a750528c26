"""Being told when delivery fails (Orleans' ``IStreamFailureHandler``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from streams.core.errors import user_error
from streams.core.ids import StreamId
from streams.core.tokens import SequenceToken

log = logging.getLogger("headrace.delivery")


@dataclass(frozen=True, slots=True)
class DeliveryFailure:
    subscription_id: str
    stream_id: StreamId
    token: SequenceToken | None
    error: BaseException
    faulted: bool  # the subscription was faulted because of it
    # Its traceback is in the log already (the first failure of this run of failures was
    # logged with it when its retries began): say it in one line.
    logged: bool = False


class StreamFailureHandler(Protocol):
    """Called for every failed delivery and every cache miss."""

    async def on_delivery_failure(self, failure: DeliveryFailure) -> None: ...


class LoggingFailureHandler:
    """The default handler: one warning per failure (with the traceback of an error the
    consumer raised), and a count."""

    def __init__(self) -> None:
        self.failures: int = 0

    async def on_delivery_failure(self, failure: DeliveryFailure) -> None:
        self.failures += 1
        log.warning(
            "delivery failed: stream=%s subscription=%s token=%s faulted=%s error=%r",
            failure.stream_id,
            failure.subscription_id,
            failure.token,
            failure.faulted,
            failure.error,
            # A raised error's traceback says where the consumer failed; a timeout or a
            # cache miss was never raised and has none.
            exc_info=user_error(failure.error)
            if failure.error.__traceback__ is not None and not failure.logged
            else None,
        )
