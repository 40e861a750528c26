"""Every error headrace raises on purpose, the Spark handoff's included; each derives from
:class:`HeadraceError`.

Every error headrace raises on purpose derives from :class:`HeadraceError`.

The errors of the Spark handoff: each says what is wrong and what to do about it.

They derive from :mod:`streams.core.errors`, so ``except HeadraceError`` catches them; raised inside
Spark's Python workers they reach the Spark user with their message intact.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class HeadraceError(Exception):
    """Base class of headrace's own errors."""


class ConfigurationError(HeadraceError):
    """A setting, option or argument is wrong; the message names it and says what is allowed."""


class StoreLayoutError(ConfigurationError):
    """The embedded store's file is of a layout this headrace does not read; the message says
    whether to upgrade headrace or start with an empty store directory."""


class EncodeError(HeadraceError, TypeError):
    """A value given to ``on_next`` cannot be encoded; nothing was enqueued."""


class EventTooLargeError(EncodeError):
    """An event is larger than ``max_event_size`` once encoded; nothing of it was enqueued."""


class DecodeError(HeadraceError):
    """Bytes read from a queue are not a headrace batch container (or a record of a topic
    others write does not decode: ``offset`` is then its offset, where its letter stands)."""

    reason = "undecodable"  # the reason of its dead letter

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class RecordTooLargeError(DecodeError):
    """A record read is larger than ``max_event_size``: it is dead-lettered ``too_large``
    with a prefix of its bytes, never decoded."""

    reason = "too_large"


class CacheMissError(HeadraceError):
    """A cursor asked for data older than the queue cache holds.

    The consumer is told through ``on_error`` and delivery continues from the oldest
    data still available, so the gap is always visible, never silent.
    """


class QueueAdapterError(HeadraceError):
    """A queue adapter could not read or write its durable queue."""


class QueueFailedError(QueueAdapterError):
    """A queue cannot be read on, and retrying will not change that (a codec that is not
    installed, a corrupt record batch, no authorization, a deleted topic): its agent stops
    and reports the queue failed. The message names the queue, the position and the fix.
    """


class DeliveryTimeoutError(HeadraceError, TimeoutError):
    """A consumer did not finish a batch within ``max_event_delivery_time``."""


class ActivationError(HeadraceError):
    """A consumer's constructor raised while its stream's batch waited for it: the cause is
    the user's error (``__cause__``). The batch is retried, then dead-lettered
    ``activation_failed``; the stream's next batch tries to build it again."""


class ProviderClosedError(HeadraceError):
    """The provider is not running (use ``async with provider:`` or ``provider.client()``)."""


class SubscriptionNotFoundError(HeadraceError):
    """A subscription handle names a subscription that is gone (unsubscribed)."""


class StoreError(QueueAdapterError):
    """The embedded store (``path/headrace.db``) could not be read or written.

    A :class:`QueueAdapterError` because the embedded queues live there too: a pulling agent
    treats it like any failed read and retries with backoff.
    """


class LocalStoreDamagedError(StoreError):
    """A Kafka worker's local state store was found damaged while in use: it has been set
    aside and started empty, and the queues it held are to be rebuilt from the changelog."""


class WorkerNameInUseError(HeadraceError):
    """Another live worker already goes by this name, or took it over from this one."""


class StreamCompletedError(HeadraceError):
    """Something arrived for an input after its completion (``on_completed`` or ``flush``)."""


class HandoffRefusedError(HeadraceError):
    """A handoff sink cannot take some of the windows or events it was given (a value its
    declared columns cannot hold); it appended none of them.

    ``refused`` pairs each such item with the reason: the caller dead-letters those and
    hands off the rest. Retrying cannot help them, unlike a failed append.
    """

    def __init__(self, message: str, refused: list[tuple[Any, str]]) -> None:
        super().__init__(message)
        self.refused = refused


class PublishError(HeadraceError):
    """Events sent with ``send`` were not enqueued: ``failed`` of them, for ``reasons``.

    Raised by ``provider.flush()`` (and on leaving the provider) once for the events sent
    since the previous flush; the others sent meanwhile are durable.
    """

    def __init__(self, failed: int, reasons: list[str]) -> None:
        self.failed = failed
        self.reasons = reasons
        why = "; ".join(dict.fromkeys(reasons)) or "unknown"
        super().__init__(f"{failed} sent event(s) were not enqueued: {why}")


def user_error(error: BaseException) -> BaseException:
    """The error the user's code raised: a constructor's, not the runtime's wrapper round
    it, so a traceback ends with the user's frame.

    >>> try:
    ...     raise ActivationError("Totals could not be built") from KeyError("bad")
    ... except ActivationError as exc:
    ...     user_error(exc)
    KeyError('bad')
    """
    if isinstance(error, ActivationError) and error.__cause__ is not None:
        return error.__cause__
    return error


# -- the wording of errors ---------------------------------------------------------------------


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the choice closest to ``word`` (ignoring case), or ``''``.

    >>> did_you_mean("maxRecordPerTrigger", ["path", "maxRecordsPerTrigger"])
    " (did you mean 'maxRecordsPerTrigger'?)"
    >>> did_you_mean("zzz", ["path"])
    ''
    """
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def a_type(value: object) -> str:
    """The type of ``value`` with its article, for an error message.

    >>> a_type(3), a_type("x"), a_type(None)
    ('an int', 'a str', 'a NoneType')
    """
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


class HandoffStoreNotFoundError(ConfigurationError):
    """The ``path`` given to the DataSource is not a headrace store directory."""


class UnknownHandoffStreamError(ConfigurationError):
    """No consumer declared a handoff stream of that name in the store."""


class HandoffSchemaError(HeadraceError):
    """Rows or a requested Spark schema do not match the stream's declared output."""


class HandoffDataLostError(HeadraceError):
    """Offsets a reader needs are no longer in the log (trimmed, or the store was replaced)."""
