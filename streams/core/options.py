"""Settings of a stream provider and its agents (Orleans' defaults in brackets)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from streams.core.errors import ConfigurationError


@dataclass(frozen=True)
class StreamProviderOptions:
    """Every runtime setting, with Orleans' defaults.

    >>> StreamProviderOptions(cache_size=1024).cache_size
    1024
    """

    get_queue_msgs_timer_period: float = 0.1  # agent poll period [100 ms]
    cache_size: int = 4096  # batches per agent cache
    cache_buckets: int = 10
    # What a producer can make a worker hold, in bytes. No record headrace writes is larger than
    # max_event_size (a container over it is split; one event over it is refused), and a record
    # read that is larger is dead-lettered ``too_large`` with a prefix of its bytes. Kafka's own
    # default record limit (message.max.bytes) is 1 MiB too.
    max_event_size: int = 1024 * 1024
    # An agent's cache stops its reads (backpressure) once it holds this many bytes of records,
    # as it does at cache_size batches: a topic of large records cannot take a worker past it.
    cache_max_bytes: int = 64 * 1024 * 1024
    max_event_delivery_time: float = 60.0  # per batch, per consumer, retries included [1 min]
    delivery_retry_backoff: float = 1.0  # first wait before retrying a failed delivery; doubles
    stream_inactivity_period: float = 1800.0  # [30 min]
    fault_on_error: bool = False  # fault an explicit subscription whose consumer raises
    shutdown_timeout: float = 10.0  # draining in-flight deliveries at shutdown
    max_read_backoff: float = 5.0  # ceiling of the read-retry back-off (plus up to 20 % jitter)
    # Detach a consumer holding a full cache this long: it goes on from the durable queue and
    # the others from the cache. Queues that cannot be re-read (memory) ignore it.
    slow_consumer_timeout: float | None = 30.0
    # While a worker (a provider that runs pulling agents) runs, tune the process's garbage
    # collector for many long-lived activations (agents.gc_policy; docs/workers.md). By
    # default (None) a worker tunes it unless the application manages it itself (disabled,
    # objects frozen, thresholds of its own) outside `headrace worker`. True tunes it
    # anyway; False never does (the process keeps CPython's collector as it was).
    tune_gc: bool | None = None
    # One event in this many is sampled into the lateness and disorder sketch that
    # `headrace status` shows and `--advise` reads (streams.eventtime.lateness).
    lateness_sample_every: int = 256

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
                raise ConfigurationError(f"{f.name} must be positive, got {value!r}")

    def differing_from_defaults(self) -> frozenset[str]:
        """The names of the fields set to something other than their default.

        >>> sorted(StreamProviderOptions(cache_size=1024, cache_buckets=10).differing_from_defaults())
        ['cache_size']
        """
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) != f.default)

    @classmethod
    def from_kwargs(cls, **kwargs: object) -> StreamProviderOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown provider option {unknown[0]!r}; known options: {', '.join(sorted(known))}"
            )
        return cls(**kwargs)  # type: ignore[arg-type]
