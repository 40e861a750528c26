"""The configuration: one TOML file (``headrace.toml``) plus ``HEADRACE_*`` environment overrides.

Sections (every key is optional; docs/configuration.md has a full example)::

    [provider]            adapter (embedded | kafka | memory), queues, path, synchronous
    [provider.kafka]      bootstrap_servers, topic, group, start, records, namespace, key_field
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

>>> config = load_config(environ={"HEADRACE_PROVIDER__ADAPTER": "memory",
...                               "HEADRACE_CACHE__SIZE": "1024"})
>>> config.options.cache_size, config.provider_settings.queues
(1024, 8)
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from balancer.base import BalancerOptions
from streams.adapters.embedded_queues import recorded_queue_count
from streams.adapters.retention import RetentionPolicy
from streams.core.errors import ConfigurationError
from streams.core.options import StreamProviderOptions
from streams.core.store import EmbeddedStore, Synchronous
from streams.eventtime.policy import Action, OrderingPolicy
from streams.eventtime.windows import WindowSpec
from streams.observability.logs import FORMATS, LEVELS
from streams.timetext import parse_duration, parse_window

if TYPE_CHECKING:
    from streams.provider import StreamProvider

CONFIG_FILE = "headrace.toml"
CONFIG_ENV = "HEADRACE_CONFIG"
ENV_PREFIX = "HEADRACE_"
DEFAULT_QUEUES = 8

Adapter = Literal["embedded", "kafka", "memory"]


# -- the typed sections ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KafkaTopic:
    """``[provider.kafka]``: the topic whose partitions are the queues."""

    bootstrap_servers: str | tuple[str, ...]
    topic: str
    group: str = "headrace"
    start: Literal["earliest", "latest"] = "earliest"
    records: str = "headrace"  # or json, msgpack, text, bytes: a topic others write
    namespace: str | None = None  # the streams of such a topic (default: the topic's name)
    key_field: str | None = None  # keys records that have no key


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """``[provider]``: which queues. ``path`` is the embedded store's directory (with Kafka:
    the optional local store for pub-sub and dead letters; the Spark handoff is on Kafka)."""

    adapter: Adapter = "embedded"
    queues: int = DEFAULT_QUEUES
    path: Path | None = None
    synchronous: Synchronous = "NORMAL"
    kafka: KafkaTopic | None = None


@dataclass(frozen=True, slots=True)
class TimeSettings:
    """``[time]``: defaults for event-time consumers, e.g.
    ``EventTime(config.time.policy, config.time.window, Sum(), select="toll")``."""

    policy: OrderingPolicy = field(default_factory=OrderingPolicy)
    window: WindowSpec | None = None


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """``[spark]``: where Spark reads the handoff log (the provider's store, or its Kafka
    cluster) and the DataSource options."""

    path: Path | None = None
    max_records_per_trigger: int | None = None
    max_rows_per_split: int = 1_000_000
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    trim_on_commit: bool = True
    kafka_bootstrap_servers: str | None = None  # from [provider.kafka]: the log is on Kafka

    def read_options(self, stream: str) -> dict[str, str]:
        """The ``headrace`` DataSource options for ``stream``:
        ``spark.readStream.format("headrace").options(**config.spark.read_options("avg"))``."""
        if self.kafka_bootstrap_servers is not None:
            where = {"kafka.bootstrap.servers": self.kafka_bootstrap_servers}
        elif self.path is not None:
            where = {"path": str(self.path), "trimOnCommit": str(self.trim_on_commit).lower()}
        else:
            raise ConfigurationError("spark.path is not set (nor provider.path): the store Spark reads")
        options = {
            **where,
            "stream": stream,
            "maxRowsPerSplit": str(self.max_rows_per_split),
            "startingOffsets": self.starting_offsets,
        }
        if self.max_records_per_trigger is not None:
            options["maxRecordsPerTrigger"] = str(self.max_records_per_trigger)
        return options


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """``[worker]``: what ``headrace worker`` runs. ``app`` is ``module:attribute`` of a
    StreamProvider; ``metrics_port`` serves Prometheus metrics on ``metrics_host`` (loopback
    by default: ``0.0.0.0`` exposes them beyond this machine); ``status_interval`` is how
    often the worker writes its agents' status to the store."""

    app: str | None = None
    name: str | None = None
    log_level: str = "info"
    log_format: str = "text"
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    status_interval: float = 5.0


@dataclass(frozen=True, slots=True)
class HeadraceConfig:
    """Every setting, validated. ``sources`` maps each key that was set (``"provider.queues"``)
    to where (``"headrace.toml: provider.queues"``, ``"HEADRACE_PROVIDER__QUEUES"``)."""

    provider_settings: ProviderSettings = field(default_factory=ProviderSettings)
    options: StreamProviderOptions = field(default_factory=StreamProviderOptions)
    balancer: BalancerOptions = field(default_factory=BalancerOptions)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    time: TimeSettings = field(default_factory=TimeSettings)
    spark: SparkSettings = field(default_factory=SparkSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    file: Path | None = None
    sources: Mapping[str, str] = field(default_factory=dict)

    def store_path(self) -> Path:
        """The local store's directory (embedded queues, or Kafka's local store)."""
        path = self.provider_settings.path
        if path is None:
            raise ConfigurationError(
                "provider.path is not set: the store directory (set path in [provider] of "
                f"{CONFIG_FILE}, HEADRACE_PROVIDER__PATH, or --path)"
            )
        return path

    def provider(self, **kwargs: Any) -> StreamProvider:
        """A :class:`StreamProvider` as configured (not yet started); ``kwargs`` go to its
        constructor (``failure_handler=``, ``balancer=``, ...). ``worker.name`` names it.

        >>> load_config(environ={"HEADRACE_PROVIDER__ADAPTER": "memory"}).provider().running
        False
        """
        from streams.provider import StreamProvider  # the provider imports the whole runtime

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
            **kwargs,
        )


# -- value parsers ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Setting:
    """One raw value; ``origin`` is the file, variable or override that set it, ``where``
    names it in messages, and a relative path in it is relative to ``base``."""

    value: Any
    origin: str
    where: str
    base: Path


_Parser = Callable[[_Setting], Any]


def _duration(s: _Setting) -> float:
    return parse_duration(s.value, s.where)


def _positive_duration(s: _Setting) -> float:
    seconds = parse_duration(s.value, s.where)
    if seconds <= 0:
        raise ConfigurationError(f"{s.where}: must be more than 0, not {s.value!r}")
    return seconds


def _optional_duration(s: _Setting) -> float | None:
    return None if s.value == "off" else parse_duration(s.value, s.where)


def _count(minimum: int, *, optional: bool = False) -> _Parser:
    def parse(s: _Setting) -> int | None:
        if optional and s.value == "off":
            return None
        if isinstance(s.value, bool) or not isinstance(s.value, int) or s.value < minimum:
            off = ' or "off"' if optional else ""
            raise ConfigurationError(f"{s.where}: must be a whole number >= {minimum}{off}, not {s.value!r}")
        return s.value

    return parse


def _flag(s: _Setting) -> bool:
    if not isinstance(s.value, bool):
        raise ConfigurationError(f"{s.where}: must be true or false, not {s.value!r}")
    return s.value


def _text(s: _Setting) -> str:
    if not isinstance(s.value, str) or not s.value:
        raise ConfigurationError(f"{s.where}: must be a non-empty string, not {s.value!r}")
    return s.value


def _choice(*allowed: str) -> _Parser:
    def parse(s: _Setting) -> str:
        value = s.value.lower() if isinstance(s.value, str) else s.value
        if value not in allowed:
            raise ConfigurationError(f"{s.where}: must be one of {', '.join(allowed)}, not {s.value!r}")
        return value

    return parse


def _path(s: _Setting) -> Path:
    return s.base / Path(_text(s)).expanduser()


def _servers(s: _Setting) -> str | tuple[str, ...]:
    if isinstance(s.value, list) and s.value and all(isinstance(x, str) and x for x in s.value):
        return tuple(s.value)
    return _text(s)


def _port(s: _Setting) -> int:
    if isinstance(s.value, bool) or not isinstance(s.value, int) or not 0 <= s.value <= 65535:
        raise ConfigurationError(f"{s.where}: must be a TCP port number (0 to 65535), not {s.value!r}")
    return s.value


def _window(s: _Setting) -> WindowSpec:
    return parse_window(_text(s), s.where)


# Every key of every section and how its value is read. A key's Python name is the same,
# except in [cache] (size, buckets: StreamProviderOptions' cache_size, cache_buckets).
SCHEMA: dict[str, dict[str, _Parser]] = {
    "provider": {
        "adapter": _choice("embedded", "kafka", "memory"),
        "queues": _count(1),
        "path": _path,
        "synchronous": _choice("normal", "full"),
    },
    "provider.kafka": {
        "bootstrap_servers": _servers,
        "topic": _text,
        "group": _text,
        "start": _choice("earliest", "latest"),
        "records": _choice("headrace", "json", "msgpack", "text", "bytes"),
        "namespace": _text,
        "key_field": _text,
    },
    "provider.retention": {
        "max_age": _optional_duration,
        "max_records_per_queue": _count(0, optional=True),
        "interval": _positive_duration,
    },
    "agent": {
        "get_queue_msgs_timer_period": _positive_duration,
        "max_event_delivery_time": _positive_duration,
        "delivery_retry_backoff": _positive_duration,
        "stream_inactivity_period": _positive_duration,
        "fault_on_error": _flag,
        "shutdown_timeout": _positive_duration,
        "max_read_backoff": _positive_duration,
    },
    "cache": {
        "size": _count(1),
        "buckets": _count(1),
        "slow_consumer_timeout": _optional_duration,
    },
    "balancer": {
        "lease_length": _positive_duration,
        "renew_period": _positive_duration,
        "refresh_period": _positive_duration,
    },
    "time": {
        "timestamp_by": _text,
        "unit": _choice("s", "ms", "us"),
        "over": _text,
        "out_of_order": _duration,
        "late_arrival": _optional_duration,
        "early_arrival": _optional_duration,
        "action": _choice(*(a.value for a in Action)),
        "window": _window,
        "allowed_lateness": _duration,
        "idle_timeout": _optional_duration,
    },
    "spark": {
        "path": _path,
        "max_records_per_trigger": _count(1),
        "max_rows_per_split": _count(1),
        "starting_offsets": _choice("earliest", "latest"),
        "trim_on_commit": _flag,
    },
    "worker": {
        "app": _text,
        "name": _text,
        "log_level": _choice(*LEVELS),
        "log_format": _choice(*FORMATS),
        "metrics_host": _text,
        "metrics_port": _port,
        "status_interval": _positive_duration,
    },
}

_ALL_KEYS = [f"{section}.{key}" for section, keys in SCHEMA.items() for key in keys]


# -- gathering the raw settings ---------------------------------------------------------------


def _did_you_mean(dotted: str) -> str:
    close = difflib.get_close_matches(dotted, _ALL_KEYS, n=1, cutoff=0.6)
    if not close:  # the right key in the wrong section: match the last part alone
        last = dotted.rsplit(".", 1)[-1]
        close = [k for k in _ALL_KEYS if k.rsplit(".", 1)[-1] == last][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


def _unknown(dotted: str, origin: str) -> ConfigurationError:
    section, _, key = dotted.rpartition(".")
    if section in SCHEMA:
        known = ", ".join(SCHEMA[section])
        return ConfigurationError(
            f"{origin}: unknown key {dotted!r}{_did_you_mean(dotted)}; the keys of [{section}] are {known}"
        )
    if not section:  # a value outside every section
        return ConfigurationError(f"{origin}: unknown key {dotted!r}{_did_you_mean(dotted)}")
    close = difflib.get_close_matches(section, list(SCHEMA), n=1, cutoff=0.6)
    hint = f" (did you mean [{close[0]}]?)" if close else f"; the sections are {', '.join(SCHEMA)}"
    return ConfigurationError(f"{origin}: unknown section [{section}] (key {key!r}){hint}")


def _flatten(table: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` for every value of a parsed TOML document."""
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, dotted + ".")
        else:
            yield dotted, value


def _add(settings: dict[str, _Setting], dotted: str, setting: _Setting) -> None:
    section, _, key = dotted.rpartition(".")
    if key not in SCHEMA.get(section, {}):
        raise _unknown(dotted, setting.origin)
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
    environ = os.environ if environ is None else environ
    settings: dict[str, _Setting] = {}
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
            _add(settings, dotted, _Setting(value, str(file), f"{file}: {dotted}", base))
    for name, text in sorted(environ.items()):
        rest = name[len(ENV_PREFIX) :] if name.startswith(ENV_PREFIX) else ""
        if "__" in rest:
            dotted = rest.lower().replace("__", ".")
            _add(settings, dotted, _Setting(_env_value(text), name, name, Path.cwd()))
    for dotted, value in (overrides or {}).items():
        _add(settings, dotted, _Setting(value, "override", dotted, Path.cwd()))
    return _build(settings, file)


# -- from raw settings to the typed sections --------------------------------------------------


class _Sections:
    """The parsed values of each section, by key; ``where`` names each setting's origin."""

    def __init__(self, settings: Mapping[str, _Setting]) -> None:
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


def _build(settings: Mapping[str, _Setting], file: Path | None) -> HeadraceConfig:
    sections = _Sections(settings)
    v = sections.values
    provider = _provider_settings(sections)
    cache = v["cache"]
    if cache.get("buckets", 1) > cache.get("size", StreamProviderOptions.cache_size):
        raise ConfigurationError(
            f"{sections.where.get('cache.buckets', 'cache.buckets')}: cannot exceed cache.size "
            f"({cache.get('size', StreamProviderOptions.cache_size)})"
        )
    renamed = {f"cache_{k}" if k in ("size", "buckets") else k: x for k, x in cache.items()}
    options = sections.build(StreamProviderOptions, {**v["agent"], **renamed}, "agent", "cache")
    spark = v["spark"]
    if provider.adapter == "kafka" and provider.kafka is not None:
        for key in ("path", "trim_on_commit"):
            if key in spark:
                raise ConfigurationError(
                    f"{sections.where[f'spark.{key}']}: with provider.adapter 'kafka' the handoff "
                    "log Spark reads is on Kafka (trimmed by its retention); leave it out"
                )
        servers = provider.kafka.bootstrap_servers
        spark["kafka_bootstrap_servers"] = servers if isinstance(servers, str) else ",".join(servers)
        return _built(sections, provider, options, SparkSettings(**spark), file)
    if "path" in spark and provider.path is not None and spark["path"] != provider.path:
        raise ConfigurationError(
            f"{sections.where['spark.path']}: must be provider.path ({provider.path}), or be left "
            "out: the handoff log Spark reads lives in the provider's store"
        )
    spark.setdefault("path", provider.path)
    if provider.path is None and spark["path"] is not None and provider.adapter != "memory":
        provider = replace(provider, path=spark["path"])  # one directory: the provider's store
    return _built(sections, provider, options, SparkSettings(**spark), file)


def _built(
    sections: _Sections,
    provider: ProviderSettings,
    options: StreamProviderOptions,
    spark: SparkSettings,
    file: Path | None,
) -> HeadraceConfig:
    v = sections.values
    return HeadraceConfig(
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
        if "synchronous" in given:
            raise ConfigurationError(f"{where['provider.synchronous']}: applies to adapter = 'embedded'")
        missing = [k for k in ("bootstrap_servers", "topic") if k not in v["provider.kafka"]]
        if missing:
            raise ConfigurationError(
                f"{where['provider.adapter']}: adapter = 'kafka' needs provider.kafka.{missing[0]} "
                f"(in [provider.kafka], or HEADRACE_PROVIDER__KAFKA__{missing[0].upper()})"
            )
        given["kafka"] = KafkaTopic(**v["provider.kafka"])
    if adapter == "embedded" and "path" in given:
        given["queues"] = _checked_queue_count(given["path"], given.get("queues"), where.get("provider.queues"))
    return ProviderSettings(**given)


def _checked_queue_count(path: Path, queues: int | None, where: str | None) -> int:
    """The queue count of the store at ``path``: the one it was made with, which a
    configured count must equal (streams would map to other queues)."""
    if not (path / EmbeddedStore.FILE_NAME).is_file():
        return queues or DEFAULT_QUEUES
    with EmbeddedStore(path) as store, store.snapshot() as conn:
        recorded = recorded_queue_count(conn)
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
        window = replace(window, allowed_lateness=lateness or 0.0, idle_timeout=idle)
    return TimeSettings(sections.build(OrderingPolicy, given, "time"), window)
