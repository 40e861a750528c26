"""Property: without faults, every published event reaches every subscriber exactly once per
subscription, in publication order per stream, whatever the interleaving and batching."""

from __future__ import annotations

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams import StreamId, StreamProvider
from tests.agents.delivery.conftest import Recorder

operations = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=5),  # stream
        st.lists(
            st.integers(min_value=-(2**63), max_value=2**64 - 1), min_size=1, max_size=4
        ),  # one on_next_batch, or on_next if 1
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=operations,
    queues=st.integers(min_value=1, max_value=4),
    subscribers=st.integers(min_value=1, max_value=3),
    cache_size=st.sampled_from([4, 16, 4096]),
)
def test_every_event_reaches_every_subscriber_once_in_order(ops, queues, subscribers, cache_size):
    async def scenario() -> None:
        provider = StreamProvider.memory(queues=queues, cache_size=cache_size, cache_buckets=min(4, cache_size))
        sids = [StreamId("p", str(i)) for i in range(6)]
        recorders = {sid: [Recorder() for _ in range(subscribers)] for sid in sids}
        expected: dict[StreamId, list[int]] = {sid: [] for sid in sids}
        async with provider:
            for sid in sids:
                for rec in recorders[sid]:
                    await provider.get_stream(sid).subscribe(rec)
            for stream_no, values in ops:
                stream = provider.get_stream(sids[stream_no])
                if len(values) == 1:
                    await stream.on_next(values[0])
                else:
                    await stream.on_next_batch(values)
                expected[sids[stream_no]].extend(values)
            with anyio.fail_after(10):
                await provider.drain()
        for sid in sids:
            for rec in recorders[sid]:
                assert rec.values == expected[sid]
                tokens = [e.token for e in rec.events]
                assert tokens == sorted(set(tokens))

    anyio.run(scenario)
