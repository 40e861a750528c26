from streams import Durable, StreamId, StreamProvider
from streams.testing import Harness

provider = StreamProvider.memory()
alerts = []


@provider.implicit("orders")
class ThirdOrderAlert:
    orders = Durable(0)  # saved with the queue's checkpoint, restored before the next event
    total = Durable(0.0)

    def __init__(self, stream_id):
        self.user = stream_id.key  # a plain attribute: made anew by every activation

    def on_next(self, batch):
        for order in batch.values:
            self.orders += 1
            self.total += order["amount"]
            if self.orders == 3:  # a side effect: at least once, so keyed to be idempotent
                alerts.append((f"{self.user}-third-order", round(self.total, 2)))


async def test_the_alert_survives_a_restart():
    async with Harness(provider) as harness:
        await harness.publish("orders/ann", {"amount": 10.0}, {"amount": 20.0})
        await harness.restart()  # a new worker: new instances, the saved fields restored
        await harness.publish("orders/ann", {"amount": 5.0})
        assert alerts == [("ann-third-order", 35.0)]
        assert harness.instances(ThirdOrderAlert)[StreamId("orders", "ann")].orders == 3
