"""The third-order alert handed to Spark: a windowless handoff whose durable fields
count a user's purchases and whose ``on_events`` returns only the alert. Across a SIGKILL and a
SIGTERM of ``headrace worker``, Spark reads each user's alert exactly once, with the total of
exactly three purchases."""

from __future__ import annotations

import signal
from pathlib import Path

from streams import StreamId
from tests.end_to_end.durable.test_durable_state import Worker, client


async def purchase(worker: Worker, user: str, t: float, amount: float) -> None:
    async with client(worker).client() as producer:
        await producer.get_stream(StreamId("purchases", user)).on_next({"t": t, "amount": amount})


async def test_the_alert_reaches_spark_exactly_once_across_sigkill_and_sigterm(spark, tmp_path: Path) -> None:
    store = tmp_path / "store"
    worker = Worker(tmp_path, HEADRACE_TEST_STORE=str(store))
    await purchase(worker, "ann", 1, 10.0)
    await purchase(worker, "ann", 2, 20.0)
    worker.start()
    await worker.wait_for("bought ann 2")
    worker.stop(signal.SIGKILL)  # its state may or may not be saved: either way, counted once
    await purchase(worker, "ann", 3, 5.0)
    await purchase(worker, "bob", 1, 1.0)
    await purchase(worker, "bob", 2, 2.0)
    worker.start()
    await worker.wait_for("bought ann 3")
    await worker.wait_for("bought bob 2")
    assert worker.stop(signal.SIGTERM) == 0
    await purchase(worker, "bob", 3, 3.0)
    await purchase(worker, "ann", 4, 7.0)  # a fourth: no second alert
    worker.start()
    await worker.wait_for("bought ann 4")
    assert worker.stop(signal.SIGTERM) == 0

    df = spark.read.format("headrace").option("path", str(store)).option("stream", "alerts").load()
    rows = sorted((r["stream_id"], r["user"], r["total"]) for r in df.collect())
    assert rows == [("purchases/ann", "ann", 35.0), ("purchases/bob", "bob", 6.0)]
