"""The configuration: one TOML file (``headrace.toml``) plus ``HEADRACE_*`` environment overrides.

Sections (every key is optional; docs/configuration.md has a full example)::

    [provider]            adapter (embedded | kafka | memory), queues, path, synchronous
    [provider.kafka]      bootstrap_servers, topic, group, start, records, namespace, key_field,
                          compression, dead_letter_topic, idempotent
    [provider.retention]  max_age, max_records_per_queue, interval      (embedded queues)
    [agent]               the pulling agents' StreamProviderOptions
    [cache]               size, buckets, slow_consumer_timeout
    [balancer]            lease_length, renew_period, refresh_period    (BalancerOptions)
    [time]                ordering-policy defaults and a window
    [spark]               where Spark reads the handoff log, and the DataSource's read options
    [worker]              app, name, log_level, log_format, metrics_host, metrics_port, status_interval

Where settings come from, the later winning: the file, then the environment, then
``overrides`` (the command line). The file is the one given, else ``$HEADRACE_CONFIG``, else
``./headrace.toml`` when it exists (else there is none: defaults and the environment).

Environment: ``HEADRACE_<SECTION>__<KEY>``, upper case, ``__`` between levels:
``HEADRACE_PROVIDER__QUEUES=16``, ``HEADRACE_PROVIDER__KAFKA__TOPIC=events``,
``HEADRACE_AGENT__SHUTDOWN_TIMEOUT=30s``. A value is read as a TOML value when it is one
(``16``, ``true``, ``["a", "b"]``), else as a string. Variables without ``__`` are not
settings (``HEADRACE_CONFIG`` names the file).

Durations are ``250ms``, ``5s``, ``2m``, ``1h``, ``1d`` or a number of seconds; optional ones
take ``"off"``. Relative paths in the file are relative to the file's directory.

Every mistake raises :class:`ConfigurationError` naming where the setting came from and the
key: an unknown key (with the closest known one), a bad duration, a negative size, a queue
count that disagrees with an existing store.

The keys and their sections are :mod:`streams.runtime.config_schema`, reading and validating them
:mod:`streams.runtime.config_load`; this module builds the provider they describe.

>>> config = load_config(environ={"HEADRACE_PROVIDER__ADAPTER": "memory",
...                               "HEADRACE_CACHE__SIZE": "1024"})
>>> config.options.cache_size, config.provider_settings.queues
(1024, 8)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigurationError
from streams.runtime.config_load import load_settings
from streams.runtime.config_schema import HeadraceSettings
from streams.runtime.provider import StreamProvider


@dataclass(frozen=True, slots=True)
class HeadraceConfig(HeadraceSettings):
    """Every setting, validated (:class:`~streams.runtime.config_schema.HeadraceSettings`), and the
    provider they describe."""

    def provider(self, **kwargs: Any) -> StreamProvider:
        """A :class:`StreamProvider` as configured (not yet started); ``kwargs`` go to its
        constructor (``failure_handler=``, ``balancer=``, ...). ``worker.name`` names it.

        >>> load_config(environ={"HEADRACE_PROVIDER__ADAPTER": "memory"}).provider().running
        False
        """
        settings = self.provider_settings
        if self.worker.name is not None:
            kwargs.setdefault("worker_name", self.worker.name)
        kwargs.setdefault("options", self.options)
        if settings.adapter == "memory":
            return StreamProvider.memory(settings.queues, **kwargs)
        if settings.adapter == "embedded":
            return StreamProvider.embedded(
                self.store_path(),
                settings.queues,
                retention=self.retention,
                synchronous=settings.synchronous,
                balancer_options=self.balancer,
                **kwargs,
            )
        kafka = settings.kafka
        if kafka is None:
            raise ConfigurationError("provider.adapter is 'kafka': set bootstrap_servers and topic in [provider.kafka]")
        # The file's producer settings, then those the caller gives (KafkaSettings fields).
        client_settings = {
            "compression": kafka.compression,
            "dead_letter_topic": kafka.dead_letter_topic,
            "idempotent": kafka.idempotent,
            **kwargs.pop("kafka", {}),
        }
        return StreamProvider.kafka(
            kafka.bootstrap_servers,
            kafka.topic,
            queues=settings.queues,
            group_id=kafka.group,
            start=kafka.start,
            records=kafka.records,
            namespace=kafka.namespace,
            key_field=kafka.key_field,
            store=settings.path,
            kafka=client_settings,
            **kwargs,
        )


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> HeadraceConfig:
    """Read, merge and validate the configuration (see the module's docstring).

    ``environ`` defaults to ``os.environ``; ``overrides`` maps dotted keys to values and
    wins over both (``{"provider.path": "/var/lib/headrace"}``).
    """
    return load_settings(path, environ=environ, overrides=overrides, into=HeadraceConfig)
