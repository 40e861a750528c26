"""A Kafka group balancer in a process of its own, for ``test_kafka_rejoin.py`` to SIGKILL:
``python -m tests.balancer.rejoin_member BOOTSTRAP TOPIC STATE_DIR WORKER``. It keeps its
membership beside a real local state store under STATE_DIR and prints, one JSON line each,
every change of its queues with its member id and generation; SIGTERM stops it cleanly."""

from __future__ import annotations

import json
import signal
import sys

import anyio

from balancer.protocols import QueueDistributionChange
from streams.backends.embedded.changelog_copy import open_changelog_copy
from streams.backends.kafka.balancer import GroupMember, KafkaGroupBalancer
from streams.backends.kafka.changelog import local_state_dir
from streams.backends.kafka.rejoin import Notes
from streams.backends.kafka.settings import KafkaSettings
from streams.core.ids import QueueId

SESSION = 10.0  # Tansu holds each join for half of it; a restart comes back well within it


async def main(bootstrap: str, topic: str, state_dir: str, worker: str) -> None:
    settings = KafkaSettings(bootstrap, topic, queues=4, state_dir=state_dir)
    store = open_changelog_copy(local_state_dir(settings))

    async def notes() -> Notes:
        return store

    balancer = KafkaGroupBalancer(settings, session_timeout=SESSION, notes=notes)

    async def listener(change: QueueDistributionChange) -> None:
        for queue in change.removed | change.lost:
            await balancer.release(queue)
        consumer = balancer._consumer
        member = GroupMember.of(consumer) if consumer is not None else GroupMember(None, None, -1)
        line = {
            "added": sorted(q.number for q in change.added),
            "removed": sorted(q.number for q in change.removed | change.lost),
            "owned": sorted(q.number for q in balancer.get_my_queues()),
            "member": member.member_id,
            "rejoined": None if balancer.rejoined is None else balancer.rejoined.member_id,
            "slot": str(store.path.parent),
        }
        print(json.dumps(line), flush=True)

    balancer.subscribe(listener)
    await balancer.initialize(worker, [QueueId(n) for n in range(4)])
    async with anyio.create_task_group() as tg:
        tg.start_soon(balancer.run)
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                break
        await balancer.shutdown()
        tg.cancel_scope.cancel()
    store.close()
    print(json.dumps({"stopped": True}), flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
