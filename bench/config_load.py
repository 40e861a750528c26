"""headrace's configuration loader (streams/runtime/config.py + config_schema.py) against the
same schema in pydantic-settings and in msgspec.convert: import time, time to load the
documented headrace.toml, and what each says for the mistakes tests/streams/cli/test_config.py
checks (one line? naming where the value came from, file or variable?).

The libraries are not headrace dependencies; install them beside it to run this:
    pip install --target /tmp/cfg-libs pydantic-settings msgspec
    .venv/bin/python bench/config_load.py --libs /tmp/cfg-libs

Each load is timed with ``bench/timing.py`` (best of 5 rounds, the round fastest by wall
clock): µs a load, wall-clock and CPU.

The two library schemas below are the typed sections only (no cross-key checks, no building of
StreamProviderOptions / BalancerOptions / OrderingPolicy, no queue count read from the store):
what they cost is a lower bound of what adopting them would.
"""

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import timing  # noqa: E402
from bench._common import import_ms  # noqa: E402
from bench.timing import PerCall, Report, best, per_call, timed  # noqa: E402

DOC = ROOT / "docs" / "configuration.md"

# A few of test_config.py's mistakes: (file text, environment, the message the test expects).
MISTAKES: list[tuple[str, dict[str, str], str]] = [
    (
        "[cache]\nsise = 10\n",
        {},
        "headrace.toml: unknown key 'cache.sise' (did you mean 'cache.size'?); the keys of [cache] are size, buckets, slow_consumer_timeout",
    ),
    ("[agnt]\nx = 1\n", {}, "headrace.toml: unknown section [agnt] (key 'x') (did you mean [agent]?)"),
    (
        "",
        {"HEADRACE_AGENT__CACHE_SIZE": "5"},
        "HEADRACE_AGENT__CACHE_SIZE: unknown key 'agent.cache_size' (did you mean 'cache.size'?)",
    ),
    (
        '[agent]\nshutdown_timeout = "5x"\n',
        {},
        "headrace.toml: agent.shutdown_timeout: '5x' is not a duration (like 250ms, 5s, 2m, 1h or seconds)",
    ),
    ("", {"HEADRACE_CACHE__SIZE": "-5"}, "HEADRACE_CACHE__SIZE: must be a whole number >= 1, not -5"),
    ("[provider]\nqueues = 0\n", {}, "headrace.toml: provider.queues: must be a whole number >= 1, not 0"),
    ('[time]\naction = "keep"\n', {}, "headrace.toml: time.action: must be one of adjust, drop, accept, not 'keep'"),
    (
        "[worker]\nmetrics_port = 70000\n",
        {},
        "headrace.toml: worker.metrics_port: must be a TCP port number (0 to 65535), not 70000",
    ),
]


def per_load_us(load: Any, rounds: int = 2000) -> PerCall:
    """µs a call of ``load``, wall-clock and CPU: the fastest of 5 timed rounds of ``rounds // 5`` calls."""
    load()
    runs: list[Report] = []
    for _ in range(5):
        with timed(rounds // 5, freeze=False) as clock:
            for _ in range(rounds // 5):
                load()
        runs.append(clock.report())
    return per_call(best(runs))


def us_line(label: str, us: PerCall, note: str = "") -> str:
    timing.note(f"{label.strip()}, µs wall", us.wall)
    timing.note(f"{label.strip()}, µs CPU", us.cpu)
    return f"  {label:<56} {us.wall:9.1f} {us.cpu:9.1f}{note}"


def lines_of(*paths: Path) -> int:
    """Lines that are not blank, comments or docstrings (a rough count)."""
    total = 0
    for path in paths:
        text = re.sub(r'"""(?:.|\n)*?"""', "", path.read_text())
        total += sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))
    return total


# -- the same sections in pydantic-settings ---------------------------------------------------


def pydantic_schema() -> Any:
    from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
    from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

    from streams.eventtime.timetext import parse_duration, parse_window

    def duration(v: Any) -> float:
        return parse_duration(v, "value")

    def optional(v: Any) -> float | None:
        return None if v == "off" else parse_duration(v, "value")

    Dur = Annotated[float, BeforeValidator(duration)]
    Pos = Annotated[float, BeforeValidator(duration), Field(gt=0)]
    Opt = Annotated[float | None, BeforeValidator(optional)]
    strict = ConfigDict(extra="forbid")

    class Kafka(BaseModel):
        model_config = strict
        bootstrap_servers: str | list[str]
        topic: str
        group: str = "headrace"
        start: Literal["earliest", "latest"] = "earliest"
        records: Literal["headrace", "json", "msgpack", "text", "bytes"] = "headrace"
        namespace: str | None = None
        key_field: str | None = None
        compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "none"
        dead_letter_topic: str | None = None
        idempotent: bool = True

    class Retention(BaseModel):
        model_config = strict
        max_age: Opt = 7 * 86400
        max_records_per_queue: Annotated[int | None, BeforeValidator(lambda v: None if v == "off" else v)] = None
        interval: Pos = 60.0

    class Provider(BaseModel):
        model_config = strict
        adapter: Literal["embedded", "kafka", "memory"] = "embedded"
        queues: int = Field(8, ge=1)
        path: Path | None = None
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
        kafka: Kafka | None = None
        retention: Retention = Retention()

    class Agent(BaseModel):
        model_config = strict
        get_queue_msgs_timer_period: Pos = 0.1
        max_event_delivery_time: Pos = 60.0
        delivery_retry_backoff: Pos = 1.0
        stream_inactivity_period: Pos = 1800.0
        fault_on_error: bool = False
        tune_gc: bool | None = None
        shutdown_timeout: Pos = 10.0
        max_read_backoff: Pos = 5.0
        lateness_sample_every: int = Field(256, ge=1)

    class Cache(BaseModel):
        model_config = strict
        size: int = Field(4096, ge=1)
        buckets: int = Field(10, ge=1)
        slow_consumer_timeout: Opt = 30.0

    class Balancer(BaseModel):
        model_config = strict
        lease_length: Pos = 60.0
        renew_period: Pos = 29.0
        refresh_period: Pos = 5.0

    class Time(BaseModel):
        model_config = strict
        timestamp_by: str | None = None
        unit: Literal["s", "ms", "us"] = "s"
        over: str | None = None
        out_of_order: Dur = 0.0
        late_arrival: Opt = None
        early_arrival: Opt = None
        action: Literal["adjust", "drop", "accept"] = "adjust"
        window: Annotated[Any, BeforeValidator(lambda v: parse_window(v, "value"))] = None
        allowed_lateness: Dur = 0.0
        idle_timeout: Opt = None

    class Spark(BaseModel):
        model_config = strict
        path: Path | None = None
        max_records_per_trigger: int | None = Field(None, ge=1)
        max_rows_per_split: int = Field(1_000_000, ge=1)
        starting_offsets: Literal["earliest", "latest"] = "earliest"
        trim_on_commit: bool = True

    class Worker(BaseModel):
        model_config = strict
        app: str | None = None
        name: str | None = None
        log_level: Literal["debug", "info", "warning", "error"] = "info"
        log_format: Literal["text", "logfmt", "json"] | None = None
        metrics_host: str = "127.0.0.1"
        metrics_port: int | None = Field(None, ge=0, le=65535)
        status_interval: Pos = 5.0

    class Settings(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="HEADRACE_", env_nested_delimiter="__", extra="forbid")
        provider: Provider = Provider()
        agent: Agent = Agent()
        cache: Cache = Cache()
        balancer: Balancer = Balancer()
        time: Time = Time()
        spark: Spark = Spark()
        worker: Worker = Worker()

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=Settings.file)

        file: ClassVar[Path | None] = None  # the file each load reads (bench only)

    return Settings


# -- the same sections in msgspec --------------------------------------------------------------


def msgspec_schema() -> Any:
    import msgspec
    from msgspec import Meta, Struct

    Count = Annotated[int, Meta(ge=1)]
    Text = str | float  # durations: converted after (msgspec has no per-field parser)

    class S(Struct, forbid_unknown_fields=True, kw_only=True):
        pass

    class Kafka(S):
        bootstrap_servers: str | list[str]
        topic: str
        group: str = "headrace"
        start: Literal["earliest", "latest"] = "earliest"
        records: Literal["headrace", "json", "msgpack", "text", "bytes"] = "headrace"
        namespace: str | None = None
        key_field: str | None = None
        compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "none"
        dead_letter_topic: str | None = None
        idempotent: bool = True

    class Retention(S):
        max_age: Text = "7d"
        max_records_per_queue: int | Literal["off"] = "off"
        interval: Text = "1m"

    class Provider(S):
        adapter: Literal["embedded", "kafka", "memory"] = "embedded"
        queues: Count = 8
        path: str | None = None
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
        kafka: Kafka | None = None
        retention: Retention = msgspec.field(default_factory=Retention)

    class Agent(S):
        get_queue_msgs_timer_period: Text = 0.1
        max_event_delivery_time: Text = 60.0
        delivery_retry_backoff: Text = 1.0
        stream_inactivity_period: Text = 1800.0
        fault_on_error: bool = False
        tune_gc: bool | None = None
        shutdown_timeout: Text = 10.0
        max_read_backoff: Text = 5.0
        lateness_sample_every: Count = 256

    class Cache(S):
        size: Count = 4096
        buckets: Count = 10
        slow_consumer_timeout: Text = 30.0

    class Balancer(S):
        lease_length: Text = 60.0
        renew_period: Text = 29.0
        refresh_period: Text = 5.0

    class Time(S):
        timestamp_by: str | None = None
        unit: Literal["s", "ms", "us"] = "s"
        over: str | None = None
        out_of_order: Text = 0.0
        late_arrival: Text = "off"
        early_arrival: Text = "off"
        action: Literal["adjust", "drop", "accept"] = "adjust"
        window: str | None = None
        allowed_lateness: Text = 0.0
        idle_timeout: Text = "off"

    class Spark(S):
        path: str | None = None
        max_records_per_trigger: Count | None = None
        max_rows_per_split: Count = 1_000_000
        starting_offsets: Literal["earliest", "latest"] = "earliest"
        trim_on_commit: bool = True

    class Worker(S):
        app: str | None = None
        name: str | None = None
        log_level: Literal["debug", "info", "warning", "error"] = "info"
        log_format: Literal["text", "logfmt", "json"] | None = None
        metrics_host: str = "127.0.0.1"
        metrics_port: Annotated[int, Meta(ge=0, le=65535)] | None = None
        status_interval: Text = 5.0

    class Document(S):
        provider: Provider = msgspec.field(default_factory=Provider)
        agent: Agent = msgspec.field(default_factory=Agent)
        cache: Cache = msgspec.field(default_factory=Cache)
        balancer: Balancer = msgspec.field(default_factory=Balancer)
        time: Time = msgspec.field(default_factory=Time)
        spark: Spark = msgspec.field(default_factory=Spark)
        worker: Worker = msgspec.field(default_factory=Worker)

    return Document


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libs", help="a folder holding pydantic-settings and msgspec (pip install --target)")
    args = parser.parse_args()
    if args.libs:
        sys.path.insert(1, args.libs)
    import tomllib

    from streams.runtime.config import load_config

    full = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)[0]
    work = Path(tempfile.mkdtemp())
    toml_file = work / "headrace.toml"
    toml_file.write_text(full)

    here = "import streams.runtime.config"
    print("import time, best of 5 (ms, cumulative -X importtime; after `import streams.runtime.config`):")
    print(
        f"  streams.runtime.config (the whole config + provider tree)  {import_ms(here, 'streams.runtime.config', None):8.1f}"
    )
    print(
        f"    of which config_schema                                    {import_ms(here, 'streams.runtime.config_schema', None):8.1f}"
    )
    print(f"    of which tomllib                                          {import_ms(here, 'tomllib', None):8.1f}")
    for module in ("pydantic_settings", "pydantic", "msgspec"):
        ms = import_ms(f"{here}; import {module}", module, args.libs)
        print(f"  + {module:<56} {ms:8.1f}" if ms != float("inf") else f"  + {module}: not installed")

    current = per_load_us(lambda: load_config(toml_file, environ={}))
    print("\nload the documented headrace.toml (µs per load, best of 5 rounds):")
    print(f"  {'':56} {'wall':>9} {'CPU':>9}")
    print(us_line("headrace (file, env, checks, typed sections and options)", current))

    try:
        settings_cls = pydantic_schema()
    except ImportError:
        settings_cls = None
        print("  pydantic-settings: not installed")
    if settings_cls is not None:
        with timed(1, freeze=False) as clock:
            settings_cls = pydantic_schema()
        print(us_line("pydantic-settings: building the models", per_call(clock.report()), "  (once, at import)"))
        settings_cls.file = toml_file
        print(us_line("pydantic-settings (file + env, typed sections only)", per_load_us(settings_cls, 500)))
    try:
        import msgspec

        document_cls = msgspec_schema()
    except ImportError:
        document_cls = None
        print("  msgspec: not installed")
    if document_cls is not None:
        doc = tomllib.loads(full)
        both = per_load_us(lambda: msgspec.convert(tomllib.loads(full), document_cls))
        print(us_line("tomllib + msgspec.convert (typed sections only)", both))
        print(us_line("  of which msgspec.convert", per_load_us(lambda: msgspec.convert(doc, document_cls))))

    print("\nthe mistakes test_config.py checks: the message each gives")
    kept = {"headrace": 0, "pydantic-settings": 0, "msgspec": 0}
    for text, environ, expected in MISTAKES:
        toml_file.write_text(text)
        print(f"  {text.strip() or environ}")
        try:
            load_config(toml_file, environ=environ)
        except Exception as exc:
            got = str(exc).replace(f"{toml_file}", "headrace.toml")
            kept["headrace"] += got.startswith(expected)
            print(f"    headrace:  {got}")
        if settings_cls is not None:
            saved = dict(os.environ)
            os.environ.update(environ)
            try:
                settings_cls()
                print("    pydantic:  (accepted)")
            except Exception as exc:
                got = str(exc)
                kept["pydantic-settings"] += got.startswith(expected)
                print(f"    pydantic:  {len(got.splitlines())} lines: {' | '.join(got.splitlines())}")
            finally:
                os.environ.clear()
                os.environ.update(saved)
        if document_cls is not None:
            merged = tomllib.loads(text)
            for name, value in environ.items():  # headrace's own merge: msgspec has none
                *sections, key = name.removeprefix("HEADRACE_").lower().split("__")
                table = merged
                for section in sections:
                    table = table.setdefault(section, {})
                table[key] = tomllib.loads(f"v = {value}")["v"]
            try:
                msgspec.convert(merged, document_cls)
                print("    msgspec:   (accepted: durations are checked after it)")
            except Exception as exc:
                kept["msgspec"] += str(exc).startswith(expected)
                print(f"    msgspec:   {exc}")
    print(f"\nmessages as the tests expect them, of {len(MISTAKES)}: " + ", ".join(f"{k} {v}" for k, v in kept.items()))
    for who, n in kept.items():
        timing.note(f"mistakes whose message is kept, {who} (of {len(MISTAKES)})", n)
    print(
        "lines of code (not blank, comment or docstring): config.py + config_schema.py "
        f"{lines_of(ROOT / 'streams/runtime/config.py', ROOT / 'streams/runtime/config_schema.py')}; "
        f"of which the value parsers and SCHEMA table (what a library would replace) "
        f"{_schema_lines()}"
    )
    timing.save_run(__file__, {}, params={"libs": args.libs})


def _schema_lines() -> int:
    text = (ROOT / "streams/runtime/config_schema.py").read_text()
    part = text[text.index("# -- value parsers") : text.index("_ALL_KEYS")]
    return sum(1 for line in part.splitlines() if line.strip() and not line.strip().startswith("#"))


if __name__ == "__main__":
    main()
