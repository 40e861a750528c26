"""The constructors of :class:`~streams.runtime.provider.StreamProvider`, one per backend (memory,
embedded store, Kafka, generated test data): each opens its backend from plain arguments and
builds the provider on it, passing the rest on as the provider's options.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from streams.adapters.generator import GeneratorConfig
from streams.adapters.retention import RetentionPolicy
from streams.core.records import RecordFormat
from streams.embedded.store import Synchronous
from streams.kafka.settings import KeyField
from streams.runtime.backends import EmbeddedBackend, KafkaBackend, MemoryBackend

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
        **options: Any,
    ) -> P:
        """Durable queues, checkpoints, pub-sub and dead letters in one SQLite store under
        ``path`` (the default on one machine; several processes may open it). Workers on one
        store form a cluster by themselves: each ``async with`` of such a provider, in any
        process, is one more worker sharing the queues (``balancer_options=BalancerOptions(
        lease_length=...)`` sets how soon a dead worker's queues move). ``queues``: by default
        the count the store was made with, and 8 for a new one; a store's count is fixed."""
        return cls(EmbeddedBackend.open(path, queues, retention=retention, synchronous=synchronous), **options)

    @classmethod
    def kafka(
        cls: Callable[..., P],
        bootstrap_servers: str | Sequence[str],
        topic: str | None = None,
        queues: int = 8,
        *,
        group_id: str = "headrace",
        start: Literal["earliest", "latest"] = "earliest",
        store: str | os.PathLike[str] | None = None,
        records: str | RecordFormat = "headrace",
        namespace: str | None = None,
        key_field: KeyField | None = None,
        topics: Mapping[str, str] | None = None,
        kafka: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> P:
        """Queues on a Kafka topic: queue ``i`` is partition ``i``, offsets committed under
        ``group_id``; with no committed offset a queue starts at ``start``.

        ``records`` is the topic's format: ``"headrace"`` (its batch containers), or one event
        per record, ``"json"``, ``"msgpack"``, ``"text"``, ``"bytes"`` or a
        :class:`~streams.core.records.RecordFormat`: a topic other programs write. Its
        streams are ``StreamId(namespace, record key)`` (``namespace`` defaults to the topic
        name; ``key_field``, a field name or a function of the decoded value, keys records that have
        no key, through the re-keying hop; else the partition number).
        ``topics`` (namespace -> topic) reads several co-partitioned topics instead of one.

        ``store`` is a local directory for what is not on Kafka: durable pub-sub and dead
        letters (without it they live in memory). Consumers that hand off to Spark do so in
        Kafka topics (``<handoff_prefix>.handoff.<stream>``; the DataSource reads them with
        ``kafka.bootstrap.servers``). ``kafka`` holds :class:`~streams.kafka.settings.KafkaSettings` fields, e.g.
        ``{"client_options": {"security_protocol": "SSL", ...}}``.

        >>> from streams import StreamProvider
        >>> provider = StreamProvider.kafka("127.0.0.1:9092", "sensors", queues=8, store="/var/lib/headrace")
        >>> json_topic = StreamProvider.kafka("127.0.0.1:9092", "readings", records="json", namespace="sensors")
        """
        backend = KafkaBackend.open(
            bootstrap_servers,
            topic,
            queues,
            group_id=group_id,
            start=start,
            store=store,
            records=records,
            namespace=namespace,
            key_field=key_field,
            topics=topics,
            kafka=kafka,
        )
        return cls(backend, **options)

    @classmethod
    def generator(cls: Callable[..., P], config: GeneratorConfig | None = None, queues: int = 8, **options: Any) -> P:
        """Queues that make their own test data (see :class:`GeneratorConfig`)."""
        return cls(MemoryBackend.generator(config, queues), **options)
