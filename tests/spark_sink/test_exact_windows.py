"""Sub-second windows equal Spark SQL's ``window()`` to the microsecond: 100 ms, 250 ms and
1.5 s windows, tumbling and hopping, over millisecond timestamps on their edges, computed by
the core and by Spark in the shared session (docs/event-time.md, "Exact time")."""

from __future__ import annotations

from types import SimpleNamespace as Ev

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streams.core.micros import to_micros
from streams.eventtime import Count, Hopping, OrderingPolicy, Processor, Sum, Tumbling
from tests.streams.eventtime.exact_cases import EDGE_MS, WINDOWS_MS, windows_reference

pytestmark = pytest.mark.spark

T0_MS = 1_714_564_800_000  # epoch milliseconds, as Kafka carries them


@pytest.mark.parametrize(("size", "hop", "spark_size", "spark_hop"), WINDOWS_MS)
def test_sub_second_windows_equal_spark_s_window_to_the_microsecond(
    spark: SparkSession, size: int, hop: int, spark_size: str, spark_hop: str | None
) -> None:
    rows = [(T0_MS + t, f"k{t % 3}", t % 7) for t in EDGE_MS]
    frame = spark.createDataFrame(rows, "ms long, key string, value long").withColumn("ts", F.timestamp_millis("ms"))
    window = F.window("ts", spark_size) if spark_hop is None else F.window("ts", spark_size, spark_hop)
    theirs = sorted(
        (r.start, r.end, r.key, r.n, r.total)
        for r in frame.groupBy(window.alias("w"), "key")
        .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        .select(F.unix_micros("w.start").alias("start"), F.unix_micros("w.end").alias("end"), "key", "n", "total")
        .collect()
    )
    spec = Tumbling(size / 1000) if size == hop else Hopping(size / 1000, hop / 1000)
    results = {}
    for name, reducer in (("n", Count()), ("total", Sum())):
        p = Processor(OrderingPolicy(timestamp_by="t", unit="ms"), spec, reducer, group_by="key", select="v")
        events = [
            Ev(value={"t": ms, "key": k, "v": v}, event_time=0.0, arrival_time=0.0, token=i)
            for i, (ms, k, v) in enumerate(rows)
        ]
        out = p.on_events(events)
        results[name] = {
            (to_micros(w.start), to_micros(w.end), w.key): w.value for w in out.windows + p.flush().windows
        }
    ours = sorted((s, e, k, n, results["total"][(s, e, k)]) for (s, e, k), n in results["n"].items())
    assert ours == theirs
    # and every window the exact reference has, by its bounds
    assert {s for s, *_ in ours} == {(T0_MS + s) * 1000 for s, _, _ in windows_reference(EDGE_MS, size, hop)}
