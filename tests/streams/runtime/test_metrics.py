"""Prometheus metrics of a running worker, scraped over loopback: every figure matches what
was published (records per queue, events by fate, watermarks, failures, dead letters)."""

from __future__ import annotations

import time
from collections import Counter

import anyio
import pytest

from streams import ConfigurationError, StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.observability import serve_metrics
from tests.agents.delivery.conftest import drained
from tests.streams.runtime.helpers import Samples, by_label, free_port, scrape, total, value

WORKER = "w-metrics"


def make_provider(path) -> StreamProvider:
    provider = StreamProvider.embedded(
        path,
        queues=2,
        worker_name=WORKER,
        max_event_delivery_time=0.2,
        delivery_retry_backoff=0.01,
        lateness_sample_every=1,
    )

    @provider.implicit("sensors")
    class RoomCounts:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="t", out_of_order=5, early_arrival=60), Tumbling(10), Count(), group_by="room"
        )

        def __init__(self, stream_id):
            pass

        def on_window(self, result):
            pass

    @provider.implicit("flaky")
    class Flaky:
        def __init__(self, stream_id):
            pass

        def on_next(self, batch):
            if any(v == "boom" for v in batch.values):
                raise RuntimeError("boom")

    return provider


async def test_scrape_reports_what_was_published(tmp_path):
    provider = make_provider(tmp_path / "store")
    now = time.time()
    s1, s2, flaky = StreamId("sensors", "s1"), StreamId("sensors", "s2"), StreamId("flaky", "f1")
    queue_of = {sid: provider.mapper.get_queue_for_stream(sid).number for sid in (s1, s2, flaky)}
    records: Counter[int] = Counter()
    async with provider:
        with serve_metrics(provider, port=0) as server:
            for first in (0, 10):  # two batches of ten readings, in order, 30 s to 11 s ago
                await provider.get_stream(s1).on_next_batch(
                    [{"t": now - 30 + first + i, "room": "a"} for i in range(10)]
                )
                records[queue_of[s1]] += 1
            await provider.get_stream(s1).on_next({"t": now + 3600, "room": "a"})  # an hour early
            await provider.get_stream(s2).on_next_batch([{"t": now - 30 + i, "room": "b"} for i in range(5)])
            await provider.get_stream(flaky).on_next_batch(["fine"])
            await provider.get_stream(flaky).on_next_batch(["boom", "boom too"])
            records.update([queue_of[s1], queue_of[s2], queue_of[flaky], queue_of[flaky]])
            adapter = await provider.factory.create_adapter()
            await adapter.queue_message_batch(provider.mapper.get_queue_for_stream(s2), s2, b"\x00not a container")
            records[queue_of[s2]] += 1
            await drained(provider)

            samples = await anyio.to_thread.run_sync(scrape, server.port)

            assert value(samples, "headrace_agents_running", worker=WORKER) == 2
            assert by_label(samples, "headrace_queue_records_read_total", "queue") == {
                str(q): records[q] for q in (0, 1)
            }
            assert total(samples, "headrace_eventtime_events_total") == 26
            assert total(samples, "headrace_eventtime_early_events_total") == 1
            assert total(samples, "headrace_eventtime_adjusted_events_total") == 0
            assert total(samples, "headrace_eventtime_activations") == 2
            # Each queue's lowest watermark: newest timestamp - out_of_order, per stream.
            marks = {queue_of[s1]: now - 30 + 19 - 5, queue_of[s2]: now - 30 + 4 - 5}
            if queue_of[s1] == queue_of[s2]:
                marks = {queue_of[s1]: min(marks.values())}
            got = by_label(samples, "headrace_eventtime_watermark_timestamp_seconds", "queue")
            assert {int(q): round(w, 3) for q, w in got.items()} == {q: round(w, 3) for q, w in marks.items()}
            # Delivered: s1's three records, s2's one and the flaky consumer's first; one failed.
            assert total(samples, "headrace_batches_delivered_total") == 5
            assert value(samples, "headrace_delivery_failures_total", worker=WORKER, queue=str(queue_of[flaky])) == 1
            letters = by_label(samples, "headrace_dead_letters", "reason")
            assert (letters["undecodable"], letters["early_arrival"], letters["delivery_failed"]) == (1, 1, 2)
            assert sum(letters.values()) == 4
            for q in ("0", "1"):
                reads = value(samples, "headrace_queue_read_seconds_count", worker=WORKER, queue=q)
                assert reads >= 1
                assert value(samples, "headrace_queue_read_seconds_bucket", worker=WORKER, queue=q, le="+Inf") == reads
            assert (
                total(samples, "headrace_cache_batches") == sum(records.values()) - 1
            )  # the corrupt one is not cached
            assert value(samples, "headrace_cache_max_batches", worker=WORKER, queue="0") == 4096
            # Observed lateness, every event sampled: the 26 events (the early one at 0 s), the
            # oldest 30 s behind its arrival (within the sketch's 2 % and the time to publish).
            assert total(samples, "headrace_eventtime_sampled_events") == 26
            worst = value_max(samples, "headrace_eventtime_lateness_seconds", "0.999")
            assert 30 * 0.98 <= worst <= (time.time() - now + 30) * 1.02
            assert value_max(samples, "headrace_eventtime_lateness_seconds", "0.5") < worst
            assert value_max(samples, "headrace_eventtime_disorder_seconds", "0.999") == 0.0  # in order per stream

    # The endpoint is gone with its context; the worker has left.
    with pytest.raises(OSError):
        await anyio.to_thread.run_sync(scrape, server.port)


def value_max(samples: Samples, name: str, quantile: str) -> float:
    """The largest sample of ``name`` with that quantile label, over queues and types."""
    return max(v for (n, labels), v in samples.items() if n == name and dict(labels)["quantile"] == quantile)


async def test_a_worker_that_left_reports_no_agents(tmp_path):
    provider = make_provider(tmp_path / "store")
    async with provider:
        pass
    with serve_metrics(provider, port=0) as server:
        samples = await anyio.to_thread.run_sync(scrape, server.port)
    assert value(samples, "headrace_agents_running", worker=WORKER) == 0
    assert by_label(samples, "headrace_dead_letters", "reason")["undecodable"] == 0


async def test_bad_or_busy_port_is_a_configuration_error(tmp_path):
    provider = make_provider(tmp_path / "store")
    with pytest.raises(ConfigurationError, match="from 0 to 65535"):
        serve_metrics(provider, port=70000)
    with serve_metrics(provider, port=free_port()) as server:
        with pytest.raises(ConfigurationError, match=f"cannot serve metrics on 127.0.0.1:{server.port}"):
            serve_metrics(provider, port=server.port)


def test_metric_names_say_their_unit():
    """A point in time is ..._timestamp_seconds (its help says POSIX); the cache sizes say they count batches."""
    from streams.runtime.metrics import METRICS

    posix = {name for name, (_, doc) in METRICS.items() if "POSIX" in doc}
    assert (
        posix
        == {name for name in METRICS if name.endswith("_timestamp_seconds")}
        == {
            "headrace_eventtime_watermark_timestamp_seconds",
            "headrace_eventtime_input_watermark_timestamp_seconds",
        }
    )
    cache_sizes = {name for name in METRICS if name.startswith("headrace_cache_") and "pressure" not in name}
    assert cache_sizes == {"headrace_cache_batches", "headrace_cache_max_batches"}
