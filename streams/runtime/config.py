"""The configuration: one TOML file (``headrace.toml``) plus ``HEADRACE_*`` environment overrides.

Sections (every key is optional; docs/configuration.md has a full example)::

[provider]            adapter (embedded | kafka | memory), queues, path, synchronous, file_mode
[provider.kafka]      bootstrap_servers, topic, group, start, records, namespace, key_field,
value_schema, subject, compression, dead_letter_topic, state_dir, standby_replicas, session_timeout,
idempotent, security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile, ssl_password, ssl_check_hostname, sasl_mechanism,
sasl_plain_username, sasl_plain_password, sasl_oauth_token_provider,
client_options, consumer_options
[provider.kafka.schema_registry]  url, username, password, token, ssl_cafile, timeout
[provider.retention]  max_age, max_records_per_queue, interval      (embedded queues)
[agent]               the pulling agents' StreamProviderOptions
[cache]               size, buckets, slow_consumer_timeout
[balancer]            lease_length, renew_period, refresh_period    (BalancerOptions)
[time]                ordering-policy defaults and a window
[spark]               where Spark reads the handoff log, and the DataSource's read options
[worker]              app, name, log_level, log_format, metrics_host, metrics_port,
                      metrics_certfile, metrics_keyfile, status_interval

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
:mod:`streams.runtime.config`; this module builds the provider they describe.

>>> config = load_config(environ={"HEADRACE_PROVIDER__ADAPTER": "memory",
...                               "HEADRACE_CACHE__SIZE": "1024"})
>>> config.options.cache_size, config.provider_settings.queues
(1024, 8)

Reading the configuration: one TOML file (``headrace.toml``) plus ``HEADRACE_*`` environment
overrides, validated into the typed settings of :mod:`streams.runtime.config_schema`.

Where settings come from, the later winning: the file, then the environment, then
``overrides`` (the command line). The file is the one given, else ``$HEADRACE_CONFIG``, else
``./headrace.toml`` when it exists (else there is none: defaults and the environment).

Every mistake raises :class:`ConfigurationError` naming where the setting came from and the
key: an unknown key (with the closest known one), a bad duration, a negative size, a queue
count that disagrees with an existing store; checks across keys are made here.

>>> settings = load_settings(environ={"HEADRACE_PROVIDER__ADAPTER": "memory"}, into=HeadraceSettings)
>>> settings.provider_settings.adapter
'memory'
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from balancer.base import BalancerOptions
from streams.adapters.retention import RetentionPolicy
from streams.core.errors import ConfigurationError
from streams.core.options import StreamProviderOptions
from streams.eventtime.policy import OrderingPolicy
from streams.eventtime.windows import with_timing
from streams.runtime.config_schema import (
    CONFIG_ENV,
    CONFIG_FILE,
    ENV_PREFIX,
    SCHEMA,
    TABLE_KEYS,
    HeadraceSettings,
    ProviderSettings,
    Setting,
    SparkSettings,
    TimeSettings,
    WorkerSettings,
    unknown_key,
)
from streams.runtime.constructors import DEFAULT_QUEUES, kafka_read_options, stored_queue_count
from streams.runtime.provider import StreamProvider

S = TypeVar("S", bound=HeadraceSettings)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` for every value of a parsed TOML document."""
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and dotted not in TABLE_KEYS:
            yield from _flatten(value, dotted + ".")
        else:
            yield dotted, value


def _add(settings: dict[str, Setting], dotted: str, setting: Setting) -> None:
    section, _, key = dotted.rpartition(".")
    if key not in SCHEMA.get(section, {}):
        raise unknown_key(dotted, setting.origin)
    settings[dotted] = setting


def _env_value(text: str) -> Any:
    """A TOML value (``16``, ``true``, ``["a"]``) when the text is one, else the text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _config_file(path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Path | None:
    if path is not None:
        return Path(path)
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV])
    default = Path(CONFIG_FILE)
    return default if default.is_file() else None


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    into: type[S],
) -> S:
    """Read, merge and validate the configuration (see the module's docstring) into an
    ``into`` (:class:`HeadraceSettings` or a subclass).

    ``environ`` defaults to ``os.environ``; ``overrides`` maps dotted keys to values and
    wins over both (``{"provider.path": "/var/lib/headrace"}``).
    """
    environ = os.environ if environ is None else environ
    settings: dict[str, Setting] = {}
    file = _config_file(path, environ)
    if file is not None:
        try:
            document = tomllib.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigurationError(f"cannot read the config file {str(file)!r}: {exc.strerror or exc}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"the config file {str(file)!r} is not valid TOML: {exc}") from None
        base = file.resolve().parent
        for dotted, value in _flatten(document):
            _add(settings, dotted, Setting(value, str(file), f"{file}: {dotted}", base, environ=environ))
    for name, text in sorted(environ.items()):
        rest = name[len(ENV_PREFIX) :] if name.startswith(ENV_PREFIX) else ""
        if "__" in rest:
            dotted = rest.lower().replace("__", ".")
            _add(settings, dotted, Setting(_env_value(text), name, name, Path.cwd(), text, environ))
    for dotted, value in (overrides or {}).items():
        _add(settings, dotted, Setting(value, "override", dotted, Path.cwd(), environ=environ))
    return _build(settings, file, into)


# -- from raw settings to the typed sections --------------------------------------------------


class _Sections:
    """The parsed values of each section, by key; ``where`` names each setting's origin."""

    def __init__(self, settings: Mapping[str, Setting]) -> None:
        self.where = {dotted: s.where for dotted, s in settings.items()}
        self._origins = {dotted: s.origin for dotted, s in settings.items()}
        self.values: dict[str, dict[str, Any]] = {section: {} for section in SCHEMA}
        for dotted, setting in settings.items():
            section, _, key = dotted.rpartition(".")
            self.values[section][key] = SCHEMA[section][key](setting)

    def build(self, make: Callable[..., Any], values: Mapping[str, Any], *sections: str) -> Any:
        """``make(**values)``; its errors (checks across keys) name the sections and where
        their keys were set."""
        try:
            return make(**values)
        except ConfigurationError as exc:
            prefixes = tuple(f"{section}." for section in sections)
            origins = sorted({o for k, o in self._origins.items() if k.startswith(prefixes)})
            names = " ".join(f"[{section}]" for section in sections)
            raise ConfigurationError(f"{', '.join(origins) or 'defaults'}: {names} {exc}") from None


def _build(settings: Mapping[str, Setting], file: Path | None, into: type[S]) -> S:
    sections = _Sections(settings)
    v = sections.values
    provider = _provider_settings(sections)
    cache = v["cache"]
    if cache.get("buckets", 1) > cache.get("size", StreamProviderOptions.cache_size):
        raise ConfigurationError(
            f"{sections.where.get('cache.buckets', 'cache.buckets')}: cannot exceed cache.size "
            f"({cache.get('size', StreamProviderOptions.cache_size)})"
        )
    renamed = {f"cache_{k}" if k in ("size", "buckets", "max_bytes") else k: x for k, x in cache.items()}
    options = sections.build(StreamProviderOptions, {**v["agent"], **renamed}, "agent", "cache")
    spark = v["spark"]
    if provider.adapter == "kafka" and provider.kafka is not None:
        for key in ("path", "trim_on_commit"):
            if key in spark:
                raise ConfigurationError(
                    f"{sections.where[f'spark.{key}']}: with provider.adapter 'kafka' the handoff "
                    "log Spark reads is on Kafka (trimmed by its retention); leave it out"
                )
        servers = provider.kafka["bootstrap_servers"]
        spark["kafka_bootstrap_servers"] = servers if isinstance(servers, str) else ",".join(servers)
        spark["kafka_options"] = sections.build(kafka_read_options, {"kafka": provider.kafka}, "provider.kafka")
        return _built(sections, provider, options, SparkSettings(**spark), file, into)
    if "path" in spark and provider.path is not None and spark["path"] != provider.path:
        raise ConfigurationError(
            f"{sections.where['spark.path']}: must be provider.path ({provider.path}), or be left "
            "out: the handoff log Spark reads lives in the provider's store"
        )
    spark.setdefault("path", provider.path)
    if provider.path is None and spark["path"] is not None and provider.adapter != "memory":
        provider = replace(provider, path=spark["path"])  # one directory: the provider's store
    return _built(sections, provider, options, SparkSettings(**spark), file, into)


def _built(
    sections: _Sections,
    provider: ProviderSettings,
    options: StreamProviderOptions,
    spark: SparkSettings,
    file: Path | None,
    into: type[S],
) -> S:
    v = sections.values
    return into(
        provider_settings=provider,
        options=options,
        balancer=sections.build(BalancerOptions, v["balancer"], "balancer"),
        retention=sections.build(RetentionPolicy, v["provider.retention"], "provider.retention"),
        time=_time_settings(sections),
        spark=spark,
        worker=WorkerSettings(**v["worker"]),
        file=file,
        sources=sections.where,
    )


def _provider_settings(sections: _Sections) -> ProviderSettings:
    v, where = sections.values, sections.where
    given = dict(v["provider"])
    adapter = given.get("adapter", "embedded")
    if "synchronous" in given:
        given["synchronous"] = given["synchronous"].upper()
    for section, needs in (("provider.kafka", "kafka"), ("provider.retention", "embedded"), ("balancer", "embedded")):
        if v[section] and adapter != needs:
            first = where[f"{section}.{next(iter(v[section]))}"]
            raise ConfigurationError(f"{first}: [{section}] applies to adapter = {needs!r}, not {adapter!r}")
    if adapter == "memory" and "path" in given:
        raise ConfigurationError(f"{where['provider.path']}: the memory adapter has no store: remove path")
    if adapter == "kafka":
        for key in ("synchronous", "file_mode"):
            if key in given:
                raise ConfigurationError(f"{where[f'provider.{key}']}: applies to adapter = 'embedded'")
        missing = [k for k in ("bootstrap_servers", "topic") if k not in v["provider.kafka"]]
        if missing:
            raise ConfigurationError(
                f"{where['provider.adapter']}: adapter = 'kafka' needs provider.kafka.{missing[0]} "
                f"(in [provider.kafka], or HEADRACE_PROVIDER__KAFKA__{missing[0].upper()})"
            )
        given["kafka"] = {_KAFKA_FIELD.get(k, k): x for k, x in v["provider.kafka"].items()}
        if v["provider.kafka.schema_registry"]:
            given["kafka"]["schema_registry"] = dict(v["provider.kafka.schema_registry"])
    if adapter == "embedded" and "path" in given:
        given["queues"] = _checked_queue_count(given["path"], given.get("queues"), where.get("provider.queues"))
    return ProviderSettings(**given)


# The [provider.kafka] keys whose KafkaSettings field is named otherwise.
_KAFKA_FIELD = {"group": "group_id"}


def _checked_queue_count(path: Path, queues: int | None, where: str | None) -> int:
    """The queue count of the store at ``path``: the one it was made with, which a
    configured count must equal (streams would map to other queues)."""
    recorded = stored_queue_count(path)
    if recorded is None:
        return queues or DEFAULT_QUEUES
    if queues is not None and queues != recorded:
        raise ConfigurationError(
            f"{where}: {queues} queues disagree with the store at {str(path)!r}, which has "
            f"{recorded} (a store's queue count is fixed): set {recorded} or leave it out"
        )
    return recorded


def _time_settings(sections: _Sections) -> TimeSettings:
    given = dict(sections.values["time"])
    window = given.pop("window", None)
    lateness = given.pop("allowed_lateness", None)
    idle = given.pop("idle_timeout", None)
    if window is None and (lateness is not None or idle is not None):
        key = "time.allowed_lateness" if lateness is not None else "time.idle_timeout"
        raise ConfigurationError(f"{sections.where[key]}: needs time.window")
    if window is not None:
        window = with_timing(window, lateness or 0.0, idle)
    return TimeSettings(sections.build(OrderingPolicy, given, "time"), window)


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
        provider = self._new_provider(settings, kwargs)
        provider.from_config = True
        return provider

    def _new_provider(self, settings: ProviderSettings, kwargs: dict[str, Any]) -> StreamProvider:
        if settings.adapter == "memory":
            return StreamProvider.memory(settings.queues, **kwargs)
        if settings.adapter == "embedded":
            return StreamProvider.embedded(
                self.store_path(),
                settings.queues,
                retention=self.retention,
                synchronous=settings.synchronous,
                file_mode=settings.file_mode,
                balancer_options=self.balancer,
                **kwargs,
            )
        kafka = settings.kafka
        if kafka is None:
            raise ConfigurationError("provider.adapter is 'kafka': set bootstrap_servers and topic in [provider.kafka]")
        # The file's settings, then those the caller gives (KafkaSettings fields).
        given = {"queues": settings.queues, **kafka, **kwargs.pop("kafka", {})}
        servers, topic = given.pop("bootstrap_servers"), given.pop("topic")
        return StreamProvider.kafka(servers, topic, store=settings.path, kafka=given, **kwargs)


# The sections whose keys become StreamProviderOptions fields, and the fields' names.
_OPTION_SECTIONS = ("agent.", "cache.")
_OPTION_FIELD = {"cache.size": "cache_size", "cache.buckets": "cache_buckets", "cache.max_bytes": "cache_max_bytes"}


def apply_options(config: HeadraceSettings, provider: StreamProvider) -> list[tuple[int, str]]:
    """Give ``provider`` (built by the application's code) the ``[agent]`` and ``[cache]``
    settings that ``config`` (a worker's file and environment) sets; ``(level, line)`` of
    what to log about it.

    The configuration wins: a setting the code left to its default takes the configured value
    (one info line lists them), and one the code set otherwise is overridden with a warning,
    since an operator's file or ``HEADRACE_*`` variable is what a deployment changes. Sections
    the code's provider cannot take after it is built (``[provider]``, ``[balancer]``) are
    named in a warning when set, rather than ignored without a word.

    >>> config = load_config(environ={"HEADRACE_AGENT__MAX_EVENT_DELIVERY_TIME": "5s"})
    >>> provider = StreamProvider.memory(queues=2)
    >>> apply_options(config, provider)
    [(20, 'settings from the configuration: agent.max_event_delivery_time = 5.0 (HEADRACE_AGENT__MAX_EVENT_DELIVERY_TIME)')]
    >>> provider.options.max_event_delivery_time
    5.0
    """
    lines: list[tuple[int, str]] = []
    changes: dict[str, Any] = {}
    applied: list[str] = []
    for dotted, where in config.sources.items():
        if dotted.startswith(_OPTION_SECTIONS):
            name = _OPTION_FIELD.get(dotted, dotted.partition(".")[2])
            value = getattr(config.options, name)
            was = getattr(provider.options, name)
            if name in provider.explicit_options and value != was:
                lines.append(
                    (logging.WARNING, f"{where} = {value} overrides the app's {name}={was}: the configuration wins")
                )
            changes[name] = value
            applied.append(f"{dotted} = {value} ({where.partition(': ')[0]})")
    if changes:
        provider.options = replace(provider.options, **changes)
        lines.insert(0, (logging.INFO, f"settings from the configuration: {', '.join(applied)}"))
    if not provider.from_config:
        ignored = sorted(d for d in config.sources if d.startswith(("provider.", "balancer.")))
        if ignored:
            origins = sorted({config.sources[d].partition(": ")[0] for d in ignored})
            lines.append(
                (
                    logging.WARNING,
                    f"{', '.join(ignored)} ({', '.join(origins)}) do not apply: the app builds its own "
                    "provider (build it with load_config().provider() to use them)",
                )
            )
    return lines


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
