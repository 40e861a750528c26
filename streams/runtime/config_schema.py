"""The configuration's schema: its sections as typed settings, every key and how its value is
read, and the one-line error for a key that does not exist. ``streams.runtime.config`` reads the
file, the environment and overrides into these; ``streams.runtime.config`` builds a provider from them.

Durations are ``250ms``, ``5s``, ``2m``, ``1h``, ``1d`` or a number of seconds; optional ones
take ``"off"``. Relative paths in the file are relative to the file's directory.

>>> SCHEMA["cache"]["size"](Setting(1024, "override", "cache.size", Path.cwd()))
1024
>>> str(unknown_key("cache.sise", "headrace.toml"))
"headrace.toml: unknown key 'cache.sise' (did you mean 'cache.size'?); the keys of [cache] are size, buckets, max_bytes, slow_consumer_timeout"
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from balancer.base import BalancerOptions
from streams.adapters.retention import RetentionPolicy
from streams.core.errors import ConfigurationError
from streams.core.options import StreamProviderOptions
from streams.core.secret import Secret
from streams.eventtime.policy import Action, OrderingPolicy
from streams.eventtime.timetext import parse_duration, parse_window
from streams.eventtime.windows import WindowSpec
from streams.runtime.constructors import DEFAULT_QUEUES, Synchronous
from streams.runtime.logs import FORMATS, LEVELS

CONFIG_FILE = "headrace.toml"
CONFIG_ENV = "HEADRACE_CONFIG"
ENV_PREFIX = "HEADRACE_"

Adapter = Literal["embedded", "kafka", "memory"]


# -- the typed sections ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """``[provider]``: which queues. ``path`` is the embedded store's directory (with Kafka:
    an optional store on this machine for pub-sub and dead letters, which otherwise live in
    the cluster like the Spark handoff). ``kafka``: the ``[provider.kafka]`` settings by their
    ``KafkaSettings`` names (the file's ``group`` is ``group_id``), which
    ``StreamProvider.kafka`` takes and checks."""

    adapter: Adapter = "embedded"
    queues: int = DEFAULT_QUEUES
    path: Path | None = None
    synchronous: Synchronous = "NORMAL"
    file_mode: int = 0o600  # of the embedded store's files (its directories: 0o700)
    kafka: Mapping[str, Any] | None = None


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
    # From [provider.kafka] too: kafka.bootstrap.servers and how to connect, in Spark's names.
    # Not in repr: a SASL password is in kafka.sasl.jaas.config.
    kafka_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    def read_options(self, stream: str) -> dict[str, str]:
        """The ``headrace`` DataSource options for ``stream``:
        ``spark.readStream.format("headrace").options(**config.spark.read_options("avg"))``."""
        if self.kafka_bootstrap_servers is not None:
            where = {"kafka.bootstrap.servers": self.kafka_bootstrap_servers, **self.kafka_options}
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
    by default: ``0.0.0.0`` exposes them beyond this machine), over HTTPS when
    ``metrics_certfile`` and ``metrics_keyfile`` name a PEM certificate and its key;
    ``status_interval`` is how often the worker writes its agents' status to the store."""

    app: str | None = None
    name: str | None = None
    log_level: str = "info"
    log_format: str | None = None  # text on a terminal, else logfmt
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    metrics_certfile: Path | None = None  # with metrics_keyfile: the endpoint serves HTTPS
    metrics_keyfile: Path | None = None
    status_interval: float = 5.0


@dataclass(frozen=True, slots=True)
class HeadraceSettings:
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


# -- value parsers ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setting:
    """One raw value; ``origin`` is the file, variable or override that set it, ``where``
    names it in messages, and a relative path in it is relative to ``base``."""

    value: Any
    origin: str
    where: str
    base: Path
    text: str | None = None  # an environment variable's text, before it was read as TOML
    environ: Mapping[str, str] | None = None  # where {env = "NAME"} looks (None: os.environ)


Parser = Callable[[Setting], Any]


def _duration(s: Setting) -> float:
    return parse_duration(s.value, s.where)


def _positive_duration(s: Setting) -> float:
    seconds = parse_duration(s.value, s.where)
    if seconds <= 0:
        raise ConfigurationError(f"{s.where}: must be more than 0, not {s.value!r}")
    return seconds


def _optional_duration(s: Setting) -> float | None:
    return None if s.value == "off" else parse_duration(s.value, s.where)


def _count(minimum: int, *, optional: bool = False) -> Parser:
    def parse(s: Setting) -> int | None:
        if optional and s.value == "off":
            return None
        if isinstance(s.value, bool) or not isinstance(s.value, int) or s.value < minimum:
            off = ' or "off"' if optional else ""
            raise ConfigurationError(f"{s.where}: must be a whole number >= {minimum}{off}, not {s.value!r}")
        return s.value

    return parse


_SIZE = re.compile(r"\s*(\d+)\s*(B|kB|KiB|MB|MiB|GB|GiB)?\s*")
_SIZE_UNITS = {None: 1, "B": 1, "kB": 1000, "KiB": 1024, "MB": 1000**2, "MiB": 1024**2, "GB": 1000**3, "GiB": 1024**3}


def _size(s: Setting) -> int:
    """A number of bytes: a whole number, or a string such as ``"4 MiB"`` or ``"500kB"``.

    >>> _size(Setting("4 MiB", "override", "cache.max_bytes", Path.cwd()))
    4194304
    """
    value = s.value
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if match is not None:
        value = int(match[1]) * _SIZE_UNITS[match[2]]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{s.where}: must be a number of bytes >= 1 (a whole number, or a string such as "
            f'"4 MiB" or "500kB"), not {s.value!r}'
        )
    return value


def _flag(s: Setting) -> bool:
    if not isinstance(s.value, bool):
        raise ConfigurationError(f"{s.where}: must be true or false, not {s.value!r}")
    return s.value


def _text(s: Setting) -> str:
    value = s.text if s.text is not None and not isinstance(s.value, str) else s.value  # e.g. a user 12345
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{s.where}: must be a non-empty string, not {s.value!r}")
    return value


def _secret(s: Setting) -> Secret:
    """A secret: its value, ``{env = "NAME"}`` (an environment variable) or ``{file = "PATH"}``
    (a file's content), read now. No message shows the value."""
    value = s.value
    if isinstance(value, dict):
        if list(value) == ["env"] and isinstance(value["env"], str) and value["env"]:
            try:
                return Secret.from_env(value["env"], s.environ)
            except ConfigurationError as exc:
                raise ConfigurationError(f"{s.where}: {exc}") from None
        if list(value) == ["file"] and isinstance(value["file"], str) and value["file"]:
            try:
                return Secret.from_file(s.base / Path(value["file"]).expanduser())
            except ConfigurationError as exc:
                raise ConfigurationError(f"{s.where}: {exc}") from None
    elif s.text is not None:
        return Secret(s.text, s.origin)  # the variable's text as it is: "123456" stays a string
    elif isinstance(value, str):
        return Secret(value, s.where)
    raise ConfigurationError(f'{s.where}: must be the secret (a string), {{env = "VARIABLE"}} or {{file = "PATH"}}')


def _named(*allowed: str) -> Parser:
    """One of ``allowed``, in any case, as ``allowed`` spells it."""
    by_upper = {a.upper(): a for a in allowed}

    def parse(s: Setting) -> str:
        value = by_upper.get(s.value.upper()) if isinstance(s.value, str) else None
        if value is None:
            raise ConfigurationError(f"{s.where}: must be one of {', '.join(allowed)}, not {s.value!r}")
        return value

    return parse


def _table(s: Setting) -> dict[str, Any]:
    """A table of options (``{max_partition_fetch_bytes = 8388608}``); their names are
    checked by what takes them."""
    if not isinstance(s.value, dict) or not all(isinstance(v, (str, int, float, bool)) for v in s.value.values()):
        raise ConfigurationError(f"{s.where}: must be a table of option = value, not {s.value!r}")
    return dict(s.value)


def _choice(*allowed: str) -> Parser:
    def parse(s: Setting) -> str:
        value = s.value.lower() if isinstance(s.value, str) else s.value
        if value not in allowed:
            raise ConfigurationError(f"{s.where}: must be one of {', '.join(allowed)}, not {s.value!r}")
        return value

    return parse


def _path(s: Setting) -> Path:
    return s.base / Path(_text(s)).expanduser()


def _file(s: Setting) -> str:
    return str(_path(s))


def _schema_text(s: Setting) -> str:
    """A schema: its JSON text, or the path of a file of it (from the configuration's directory)."""
    text = _text(s)
    return text if text.lstrip().startswith(("{", "[", '"')) else _file(s)


def _file_mode(s: Setting) -> int:
    """A file mode: ``0o640`` (TOML's octal), or ``"0640"``."""
    value = s.value
    if isinstance(value, str) and value and set(value) <= set("01234567"):
        value = int(value, 8)
    if isinstance(value, bool) or not isinstance(value, int) or value & ~0o666 or value & 0o600 != 0o600:
        raise ConfigurationError(
            f'{s.where}: must be a file mode with read and write for the owner, e.g. "0600" (the default) or '
            f'"0640" (the group may read too), not {s.value!r}'
        )
    return value


def _servers(s: Setting) -> str | tuple[str, ...]:
    if isinstance(s.value, list) and s.value and all(isinstance(x, str) and x for x in s.value):
        return tuple(s.value)
    return _text(s)


def _port(s: Setting) -> int:
    if isinstance(s.value, bool) or not isinstance(s.value, int) or not 0 <= s.value <= 65535:
        raise ConfigurationError(f"{s.where}: must be a TCP port number (0 to 65535), not {s.value!r}")
    return s.value


def _window(s: Setting) -> WindowSpec:
    return parse_window(_text(s), s.where)


# Every key of every section and how its value is read. A key's Python name is the same,
# except in [cache] (size, buckets, max_bytes: StreamProviderOptions' cache_size, cache_buckets,
# cache_max_bytes) and
# [provider.kafka] (group: KafkaSettings' group_id). What [provider.kafka]'s values mean, and
# their defaults, are KafkaSettings'.
SCHEMA: dict[str, dict[str, Parser]] = {
    "provider": {
        "adapter": _choice("embedded", "kafka", "memory"),
        "queues": _count(1),
        "path": _path,
        "synchronous": _choice("normal", "full"),
        "file_mode": _file_mode,
    },
    "provider.kafka": {
        "bootstrap_servers": _servers,
        "topic": _text,
        "group": _text,
        "start": _choice("earliest", "latest"),
        "records": _choice("headrace", "json", "msgpack", "text", "bytes", "avro", "json_schema", "protobuf"),
        "namespace": _text,
        "key_field": _text,
        "value_schema": _schema_text,
        "subject": _text,
        "compression": _choice("none", "gzip", "snappy", "lz4", "zstd"),
        "dead_letter_topic": _text,
        "state_dir": _path,
        "standby_replicas": _count(0),
        "session_timeout": _positive_duration,
        "idempotent": _flag,
        "security_protocol": _named("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        "ssl_cafile": _file,
        "ssl_certfile": _file,
        "ssl_keyfile": _file,
        "ssl_password": _secret,
        "ssl_check_hostname": _flag,
        "sasl_mechanism": _named("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
        "sasl_plain_username": _text,
        "sasl_plain_password": _secret,
        "sasl_oauth_token_provider": _text,
        "client_options": _table,
        "consumer_options": _table,
    },
    "provider.kafka.schema_registry": {
        "url": _text,
        "username": _text,
        "password": _secret,
        "token": _secret,
        "ssl_cafile": _file,
        "timeout": _positive_duration,
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
        "tune_gc": _flag,
        "shutdown_timeout": _positive_duration,
        "max_read_backoff": _positive_duration,
        "lateness_sample_every": _count(1),
        "max_event_size": _size,
    },
    "cache": {
        "size": _count(1),
        "buckets": _count(1),
        "max_bytes": _size,
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
        "metrics_certfile": _path,
        "metrics_keyfile": _path,
        "status_interval": _positive_duration,
    },
}

_ALL_KEYS = [f"{section}.{key}" for section, keys in SCHEMA.items() for key in keys]
# The keys whose value may be a table ({env = "..."}, options): the file's tables stop there.
TABLE_KEYS = frozenset(
    f"{section}.{key}" for section, keys in SCHEMA.items() for key, parse in keys.items() if parse in (_secret, _table)
)


# -- the one-line errors for keys that do not exist --------------------------------------------


def did_you_mean(dotted: str) -> str:
    last = dotted.rsplit(".", 1)[-1]
    # A Python field name (agent.cache_size) names its key (cache.size) exactly.
    close = [k for k in _ALL_KEYS if k.replace(".", "_") == last][:1]
    close = close or difflib.get_close_matches(dotted, _ALL_KEYS, n=1, cutoff=0.6)
    if not close:  # the right key in the wrong section: match the last part alone
        close = [k for k in _ALL_KEYS if k.rsplit(".", 1)[-1] == last][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key(dotted: str, origin: str) -> ConfigurationError:
    section, _, key = dotted.rpartition(".")
    if section in SCHEMA:
        known = ", ".join(SCHEMA[section])
        return ConfigurationError(
            f"{origin}: unknown key {dotted!r}{did_you_mean(dotted)}; the keys of [{section}] are {known}"
        )
    if not section:  # a value outside every section
        return ConfigurationError(f"{origin}: unknown key {dotted!r}{did_you_mean(dotted)}")
    close = difflib.get_close_matches(section, list(SCHEMA), n=1, cutoff=0.6)
    hint = f" (did you mean [{close[0]}]?)" if close else f"; the sections are {', '.join(SCHEMA)}"
    return ConfigurationError(f"{origin}: unknown section [{section}] (key {key!r}){hint}")
