"""The options of the ``headrace`` DataSource, checked once, with errors that name them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from streams.errors import ConfigurationError

from .log import check_stream_name
from .storage import EmbeddedStorage, HandoffStorage

_KAFKA = "kafka.bootstrap.servers"
_KNOWN_OPTIONS = {
    "path",
    "stream",
    _KAFKA,
    "maxrecordspertrigger",
    "maxrowspersplit",
    "startingoffsets",
    "trimoncommit",
}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The DataSource options, checked.

    ``path``            the store directory (embedded log)
    ``stream``          the handoff stream (a consumer's declared output)
    ``maxRecordsPerTrigger``  rows per micro-batch at most (default: everything available)
    ``maxRowsPerSplit`` rows per Spark task at most (default 1,000,000)
    ``startingOffsets`` ``earliest`` (default) or ``latest``, for a query with no checkpoint
    ``trimOnCommit``    ``true`` (default): segments a finished batch consumed are deleted

    >>> options = ReadOptions.parse({"path": "/s", "stream": "avg", "maxRecordsPerTrigger": "500"})
    >>> options.max_records_per_trigger, options.starting_offsets, options.trim_on_commit
    (500, 'earliest', True)
    """

    path: str
    stream: str
    max_records_per_trigger: int | None = None
    max_rows_per_split: int = 1_000_000
    starting_offsets: str = "earliest"
    trim_on_commit: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        given = {key.lower(): value for key, value in options.items()}
        unknown = sorted(set(given) - _KNOWN_OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"unknown headrace option(s) {', '.join(unknown)}; the options are: path, "
                "stream, maxRecordsPerTrigger, maxRowsPerSplit, startingOffsets, trimOnCommit"
            )
        if _KAFKA in given:
            raise ConfigurationError(
                f"option {_KAFKA}: the Kafka handoff log is not available in this version; "
                "use option path with the embedded store directory"
            )
        if not given.get("path"):
            raise ConfigurationError("option path is required: the headrace store directory")
        if not given.get("stream"):
            raise ConfigurationError("option stream is required: the handoff stream to read")
        starting = given.get("startingoffsets", "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ConfigurationError(
                f"option startingOffsets is 'earliest' or 'latest', not {starting!r}"
            )
        trim = given.get("trimoncommit", "true").lower()
        if trim not in ("true", "false"):
            raise ConfigurationError(f"option trimOnCommit is 'true' or 'false', not {trim!r}")
        return cls(
            path=given["path"],
            stream=check_stream_name(given["stream"]),
            max_records_per_trigger=_positive_int(given, "maxRecordsPerTrigger"),
            max_rows_per_split=_positive_int(given, "maxRowsPerSplit") or 1_000_000,
            starting_offsets=starting,
            trim_on_commit=trim == "true",
        )

    def open_storage(self) -> HandoffStorage:
        return EmbeddedStorage(self.path)


def _positive_int(given: Mapping[str, str], name: str) -> int | None:
    text = given.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigurationError(f"option {name} is a positive integer, not {text!r}")
    return value
