"""The errors of the Spark handoff: each says what is wrong and what to do about it.

They derive from :mod:`streams.core.errors`, so ``except HeadraceError`` catches them; raised inside
Spark's Python workers they reach the Spark user with their message intact.
"""

from __future__ import annotations

from streams.core.errors import ConfigurationError, HeadraceError


class HandoffStoreNotFoundError(ConfigurationError):
    """The ``path`` given to the DataSource is not a headrace store directory."""


class UnknownHandoffStreamError(ConfigurationError):
    """No consumer declared a handoff stream of that name in the store."""


class HandoffSchemaError(HeadraceError):
    """Rows or a requested Spark schema do not match the stream's declared output."""


class HandoffDataLostError(HeadraceError):
    """Offsets a reader needs are no longer in the log (trimmed, or the store was replaced)."""
