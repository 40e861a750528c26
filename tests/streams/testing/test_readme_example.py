from streams import StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy, Sum, Tumbling
from streams.testing import Harness

provider = StreamProvider.memory(queues=4)  # your app's provider: the harness runs its consumer types


@provider.implicit("tolls")
class BoothTotals:
    event_time = EventTime(
        OrderingPolicy(timestamp_by="time", out_of_order=5, late_arrival=60, action="drop"),
        Tumbling(60),
        Sum(),
        select="toll",
    )

    def __init__(self, stream_id):
        self.booth = stream_id.key

    async def on_window(self, result):
        print(self.booth, result.start, result.value)


async def test_booth_totals():
    async with Harness(provider) as harness:  # processing clock at 0
        await harness.publish("tolls/b-1", {"time": 10, "toll": 2.0}, {"time": 50, "toll": 3.0}, at=55)
        await harness.publish("tolls/b-1", {"time": 30, "toll": 9.0}, at=56)  # 20 s below the newest
        await harness.publish("tolls/b-1", {"time": 70, "toll": 1.0}, at=70)  # watermark 65: [0, 60) closes
        assert [(w.start, w.end, w.value) for w in harness.windows(BoothTotals)] == [(0, 60, 5.0)]
        assert [(x.reason, x.value) for x in harness.dead_letters()] == [("out_of_order", {"time": 30, "toll": 9.0})]

        await harness.advance(120)  # two silent minutes: late arrival moves the watermark to 190 - 60
        assert [w.value for w in harness.windows(BoothTotals)] == [5.0, 1.0]
        assert harness.watermarks(BoothTotals) == {StreamId("tolls", "b-1"): 130.0}
