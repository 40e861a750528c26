"""Where the runtime and the CLI meet the backends: the one module of ``streams.runtime`` and
``streams.cli`` that imports ``streams.backends`` (the import-linter contract "The runtime and
the CLI reach a backend through the Backend protocol" forbids it everywhere else). Everything
else asks the :class:`~streams.runtime.backends.Backend` protocol, or a store on this machine
through :class:`~streams.runtime.backends.LocalSide`.

What is built here: the constructors of :class:`~streams.runtime.provider.StreamProvider`, one
per backend (memory, embedded store, Kafka, generated test data), each opening its backend from
plain arguments and building the provider on it with the rest as the provider's options; an
existing store's local side for the CLI (:func:`open_local_store`); and the embedded store's
facts the configuration checks (:data:`DEFAULT_QUEUES`, :func:`stored_queue_count`,
:data:`Synchronous`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from streams.adapters.retention import RetentionPolicy
from streams.backends.embedded.backend import EmbeddedBackend, LocalStore
from streams.backends.embedded.changelog_copy import open_changelog_copy
from streams.backends.embedded.queue_tables import DEFAULT_QUEUES, stored_queue_count
from streams.backends.embedded.store import EmbeddedStore, Synchronous
from streams.backends.kafka.connection import KafkaConnection
from streams.backends.kafka.settings import KAFKA_SETTINGS, KafkaSettings
from streams.backends.kafka.spark_options import spark_options
from streams.backends.memory.adapter import GeneratorConfig
from streams.backends.memory.backend import MemoryBackend
from streams.core.errors import ConfigurationError
from streams.core.options import StreamProviderOptions
from streams.runtime.backends import Backend, LocalSide, LocalStoreBeside

__all__ = [
    "DEFAULT_QUEUES",
    "BackendConstructors",
    "GeneratorConfig",
    "Synchronous",
    "open_local_store",
    "stored_queue_count",
]

P = TypeVar("P")  # the provider class: ``cls`` is typed as what builds one from a backend


class BackendConstructors:
    """``StreamProvider.memory(...)``, ``.embedded(...)``, ``.kafka(...)``, ``.generator(...)``
    (the provider class inherits them).

    >>> from streams import StreamProvider
    >>> StreamProvider.memory(queues=2).mapper.get_all_queues()
    [QueueId(number=0), QueueId(number=1)]
    """

    @classmethod
    def memory(cls: Callable[..., P], queues: int = 8, **options: Any) -> P:
        """Queues in this process's memory: for tests and one-process use."""
        return cls(MemoryBackend.open(queues), **options)

    @classmethod
    def embedded(
        cls: Callable[..., P],
        path: str | os.PathLike[str],
        queues: int | None = None,
        *,
        retention: RetentionPolicy | None = None,
        synchronous: Synchronous = "NORMAL",
        file_mode: int = 0o600,
        **options: Any,
    ) -> P:
        """Durable queues, checkpoints, pub-sub and dead letters in one SQLite store under
        ``path`` (the default on one machine; several processes may open it). Workers on one
        store form a cluster by themselves: each ``async with`` of such a provider, in any
        process, is one more worker sharing the queues (``balancer_options=BalancerOptions(
        lease_length=...)`` sets how soon a dead worker's queues move). ``queues``: by default
        the count the store was made with, and 8 for a new one; a store's count is fixed.
        ``file_mode``: the mode of the files the store makes (default ``0o600``: this user's
        alone; its directories ``0o700``), e.g. ``0o640`` to let the group read the events."""
        backend = EmbeddedBackend.open(path, queues, retention=retention, synchronous=synchronous, file_mode=file_mode)
        return cls(backend, **options)

    @classmethod
    def kafka(
        cls: Callable[..., P],
        bootstrap_servers: str | Sequence[str],
        topic: str | None = None,
        *,
        store: str | os.PathLike[str] | None = None,
        kafka: Mapping[str, object] | None = None,
        **options: object,
    ) -> P:
        """Queues on a Kafka topic: queue ``i`` is partition ``i``.

        Every keyword that names a :class:`~streams.backends.kafka.settings.KafkaSettings`
        field is a Kafka setting, documented there (``queues``, ``group_id``, ``start``,
        ``records``, ``namespace``, ``key_field``, ``topics``, ``idempotent``,
        ``client_options``, ...); ``kafka`` holds more of them as one mapping (the keywords
        win). The other keywords are the provider's. ``topic`` may be left out when
        ``topics`` (namespace -> topic) names the topics read together.

        ``store`` is a local directory for what is not on Kafka: durable pub-sub and dead
        letters (without it they live in memory). Consumers that hand off to Spark do so in
        Kafka topics (``<handoff_prefix>.handoff.<stream>``; the DataSource reads them with
        ``kafka.bootstrap.servers``).

        >>> from streams import StreamProvider
        >>> provider = StreamProvider.kafka("127.0.0.1:9092", "sensors", queues=8, store="/var/lib/headrace")
        >>> json_topic = StreamProvider.kafka("127.0.0.1:9092", "readings", records="json", namespace="sensors")
        >>> StreamProvider.kafka("127.0.0.1:9092", "sensors", idempotant=False)
        Traceback (most recent call last):
        ...
        streams.core.errors.ConfigurationError: StreamProvider.kafka: unknown keyword 'idempotant'; ...
        """
        given = {**(kafka or {}), **{k: v for k, v in options.items() if k in KAFKA_SETTINGS}}
        rest = {k: v for k, v in options.items() if k not in KAFKA_SETTINGS}
        _check_provider_keywords("StreamProvider.kafka", cls, rest, KAFKA_SETTINGS)
        # Its workers keep their queues' states on local disk too, in the embedded store's files.
        from streams.backends.kafka.backend import KafkaBackend  # here: only Kafka's users import aiokafka

        backend: Backend = KafkaBackend.open(
            KafkaSettings.named(bootstrap_servers, topic, **given), open_changelog_copy
        )
        if store is not None:
            backend = LocalStoreBeside(backend, LocalStore(EmbeddedStore(store)))
        return cls(backend, **rest)

    @classmethod
    def generator(cls: Callable[..., P], config: GeneratorConfig | None = None, queues: int = 8, **options: Any) -> P:
        """Queues that make their own test data (see :class:`GeneratorConfig`)."""
        return cls(MemoryBackend.generator(config, queues), **options)


def _check_provider_keywords(
    constructor: str, provider: Callable[..., object], keywords: Iterable[str], also: Iterable[str]
) -> None:
    """Raise one line naming the first of ``keywords`` that ``provider`` does not take, with
    what ``constructor`` takes: ``also`` (its backend's settings), then the provider's
    keywords and options."""
    own = [p.name for p in inspect.signature(provider).parameters.values() if p.kind is p.KEYWORD_ONLY]
    known = {*own, *(f.name for f in fields(StreamProviderOptions))}
    unknown = [name for name in keywords if name not in known]
    if unknown:
        raise ConfigurationError(
            f"{constructor}: unknown keyword {unknown[0]!r}; it takes {', '.join(also)}, "
            f"and the provider's {', '.join([*own, *sorted(known - set(own))])}"
        )


def open_local_store(path: str | os.PathLike[str]) -> LocalSide:
    """The embedded store under ``path`` as the place of what is not on the queues (dead
    letters, status, saved state, retained records: what the CLI reads); ConfigurationError,
    not a new empty store, when there is none. The caller closes it.

    >>> open_local_store("/nonexistent/store")
    Traceback (most recent call last):
    ...
    streams.core.errors.ConfigurationError: no headrace store at '/nonexistent/store' (no headrace.db there)
    """
    if not (Path(path) / EmbeddedStore.FILE_NAME).is_file():
        raise ConfigurationError(f"no headrace store at {str(path)!r} (no {EmbeddedStore.FILE_NAME} there)")
    return LocalStore(EmbeddedStore(path))


def kafka_read_options(kafka: Mapping[str, Any]) -> dict[str, str]:
    """The DataSource's ``kafka.*`` options (Spark's names) for the cluster that ``kafka``
    (``[provider.kafka]``, by KafkaSettings' names) describes: its address, TLS and SASL.

    >>> kafka_read_options({"bootstrap_servers": "k:9093", "topic": "t", "security_protocol": "SSL"})
    {'kafka.bootstrap.servers': 'k:9093', 'kafka.security.protocol': 'SSL'}
    """
    connection = {f.name for f in fields(KafkaConnection)}
    return spark_options(KafkaConnection(**{k: v for k, v in kafka.items() if k in connection}))
