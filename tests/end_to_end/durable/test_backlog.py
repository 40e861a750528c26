"""A backlog in the embedded store gives what the records alone give: a restart
after downtime finds records whose arrival (publish) times are an hour old, two streams in
one queue, and reads them with a timer period far shorter than the read; the queue knows
its tail, so its clock is the records' until a read reaches it."""

from __future__ import annotations

import pytest

from streams import StreamProvider
from streams.backends.embedded.adapter import EmbeddedAdapterFactory
from tests.agents.delivery.conftest import drained
from tests.agents.eventtime.backlog import HOUR, backlog_rows, collect, containers, counting_type, reference


@pytest.mark.parametrize("action", ["adjust", "accept"])
async def test_an_embedded_backlog_an_hour_old_gives_what_the_records_alone_give(tmp_path, action):
    rows = backlog_rows(30_000, HOUR, quiet_every=100, seed=23)
    async with EmbeddedAdapterFactory(tmp_path, queues=1) as factory:  # written while no worker ran
        adapter = await factory.create_adapter()
        queue = factory.get_queue_mapper().get_all_queues()[0]
        payloads = containers(rows)
        for start in range(0, len(payloads), 5_000):
            await adapter.queue_message_batches([(queue, sid, p) for sid, p in payloads[start : start + 5_000]])
    provider = StreamProvider.embedded(tmp_path, queues=1, get_queue_msgs_timer_period=0.001, cache_size=1_000)
    seen = counting_type(provider, action)
    async with provider:
        await drained(provider, 60)
        await collect(provider, seen)
        [agent] = provider.agents
        ticks = agent.ticks
    for key in ("busy", "quiet"):
        assert seen[key].all() == reference(rows, action, key).all(), key
    assert ticks > 0  # the quiet stream was ticked, at the records' clock
