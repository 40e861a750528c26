"""The options of the ``headrace`` DataSource, checked once, with errors that name them, and the
storage they name.

The storage is a backend's (the embedded store's, or Kafka's), and ``spark_sink`` lies below the
backends: it imports none of them. :data:`STORAGES` names each backend's reading side by its
module, and :meth:`ReadOptions.open_storage` imports the one the options name: Spark makes the
DataSource from its options alone, and the Kafka client loads only when a Kafka log is read.
(Not entry points: finding those imports ``importlib.metadata`` and scans every installed
package, a cost each Spark Python process would pay for a choice between two known modules.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Literal

from spark_sink.storage import HandoffStorage, check_stream_name
from streams.core.errors import ConfigurationError, did_you_mean

_KAFKA = "kafka.bootstrap.servers"
_KNOWN_OPTIONS = {
    "path",
    "stream",
    "topicprefix",
    "maxrecordspertrigger",
    "maxrowspersplit",
    "startingoffsets",
    "trimoncommit",
}
_SPELLED = (
    "path",
    "stream",
    "topicPrefix",
    "maxRecordsPerTrigger",
    "maxRowsPerSplit",
    "startingOffsets",
    "trimOnCommit",
)
_OPTION_NAMES = (
    "path or kafka.bootstrap.servers (and other kafka.* client settings), stream, topicPrefix, "
    "maxRecordsPerTrigger, maxRowsPerSplit, startingOffsets, trimOnCommit"
)


@dataclass(frozen=True)
class ReadOptions:
    """The DataSource options, checked.

    ``path``            the store directory (the embedded log), or
    ``kafka.bootstrap.servers``  the Kafka cluster (the Kafka log); other ``kafka.*`` options
                        are how to connect, named as Spark's Kafka source names them
                        (``kafka.security.protocol``, ``kafka.sasl.mechanism``,
                        ``kafka.sasl.jaas.config``, ...; docs/spark.md lists them)
    ``topicPrefix``     Kafka only: the workers' ``handoff_prefix`` (default ``headrace``)
    ``stream``          the handoff stream (a consumer's declared output)
    ``maxRecordsPerTrigger``  rows per micro-batch at most (default: everything available;
                        on Kafka whole appends, so one append larger than this goes alone)
    ``maxRowsPerSplit`` offsets per Spark task at most (default 1,000,000): rows in the
                        embedded log, appends on Kafka
    ``startingOffsets`` ``earliest`` (default) or ``latest``, for a query with no checkpoint
    ``trimOnCommit``    embedded only, ``true`` (default): segments a finished batch consumed
                        are deleted (Kafka topics are trimmed by their retention)

    >>> options = ReadOptions.parse({"path": "/s", "stream": "avg", "maxRecordsPerTrigger": "500"})
    >>> options.max_records_per_trigger, options.starting_offsets, options.trim_on_commit
    (500, 'earliest', True)
    >>> ReadOptions.parse({"kafka.bootstrap.servers": "k:9092", "stream": "avg",
    ...                    "kafka.security.protocol": "SSL"}).kafka
    {'kafka.bootstrap.servers': 'k:9092', 'kafka.security.protocol': 'SSL'}
    """

    path: str | None
    stream: str
    kafka: dict[str, str] | None = None  # the kafka.* options, as given: the Kafka backend reads them
    topic_prefix: str = "headrace"
    max_records_per_trigger: int | None = None
    max_rows_per_split: int = 1_000_000
    starting_offsets: str = "earliest"
    trim_on_commit: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        given = {key.lower(): value for key, value in options.items()}
        kafka = {key: value for key, value in given.items() if key.startswith("kafka.")}
        unknown = sorted(k for k in set(given) - _KNOWN_OPTIONS if not k.startswith("kafka."))
        if unknown:
            named = {k.lower(): k for k in options}  # as the user wrote them
            hints = "".join(did_you_mean(named[k], _SPELLED) for k in unknown[:1])
            raise ConfigurationError(
                f"unknown headrace option(s) {', '.join(named[k] for k in unknown)}{hints}; the options are: {_OPTION_NAMES}"
            )
        if kafka and _KAFKA not in given:
            raise ConfigurationError(
                f"option(s) {', '.join(sorted(k for k in given if k.startswith('kafka.')))} "
                f"need {_KAFKA}, the Kafka cluster the handoff topics are on"
            )
        if bool(given.get("path")) == (_KAFKA in given):
            raise ConfigurationError(
                "give either option path (the headrace store directory) or option "
                f"{_KAFKA} (the Kafka cluster), not {'both' if kafka else 'neither'}"
            )
        if "topicprefix" in given and not kafka:
            raise ConfigurationError(f"option topicPrefix applies only with {_KAFKA}")
        if not given.get("stream"):
            raise ConfigurationError("option stream is required: the handoff stream to read")
        starting = given.get("startingoffsets", "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ConfigurationError(f"option startingOffsets is 'earliest' or 'latest', not {starting!r}")
        trim = given.get("trimoncommit", "false" if kafka else "true").lower()
        if trim not in ("true", "false"):
            raise ConfigurationError(f"option trimOnCommit is 'true' or 'false', not {trim!r}")
        if kafka and trim == "true":
            raise ConfigurationError(
                "option trimOnCommit applies only to the embedded store: Kafka topics are "
                "trimmed by their retention (retention.ms), not by a reader"
            )
        return cls(
            path=given.get("path") or None,
            stream=check_stream_name(given["stream"]),
            kafka=kafka or None,
            topic_prefix=given.get("topicprefix") or "headrace",
            max_records_per_trigger=_positive_int(given, "maxRecordsPerTrigger"),
            max_rows_per_split=_positive_int(given, "maxRowsPerSplit") or 1_000_000,
            starting_offsets=starting,
            trim_on_commit=trim == "true",
        )

    @property
    def backend(self) -> Literal["embedded", "kafka"]:
        """Whose handoff log these options read: a store directory's, or a Kafka cluster's."""
        return "kafka" if self.kafka is not None else "embedded"

    def open_storage(self) -> HandoffStorage:
        opener: StorageOpener = import_module(STORAGES[self.backend]).open_storage
        return opener(self)


# A backend's name -> the module whose ``open_storage`` (a StorageOpener) opens its handoff log.
STORAGES = {
    "embedded": "streams.backends.embedded.handoff_log",
    "kafka": "streams.backends.kafka.handoff_storage",
}
StorageOpener = Callable[[ReadOptions], HandoffStorage]


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
