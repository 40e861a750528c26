"""More keys than memory: a worker serving many streams with durable state, few active at a time.

Workload: an embedded store of 4 queues; a plain consumer type with two durable
fields (a count and a last value) is activated per stream. Phase 1 gives every one of
``--streams`` streams one event: each activation saves its state with the checkpoint and,
once idle for ``stream_inactivity_period`` (2 s here), is parked: deactivated, its state
left in the store only. Phase 2 is "a minute" of traffic on ``--active`` of the streams (1 %
by default), chosen at random, one event each: every one is a parked stream reactivated, its
state read back from the store before its event is taken. Last, the backlog: a replay (of a
day of devices, say) into a new store, every one of ``--streams`` new streams' events
published before its worker starts.

The events are published by a process of their own, as devices and services publish (a
client of the same store, or a producer to the same topic): started, its client open, before
the worker's clock starts, so the worker's CPU time and RSS below are its own. Each count is
checked: after phase 1 and the backlog every stream took its event exactly once, after phase
2 each chosen stream's restored count is its two events.

Printed:
- ``phase 1``: its time, and the new streams a second from the first ``on_next`` to the last,
  by wall clock and per CPU second of the worker's process (each stream's first contact: its
  record read, its activation made, its pub-sub and state looked up, its event taken, its state
  saved and, two seconds on, parked), the publisher writing beside it;
- ``rss``: the worker process's peak RSS above its RSS before the first stream, per stream
  and in all;
- ``store``: the SQLite file's size per stream;
- ``restore``: what reactivating a parked stream adds, the read of its state from the store
  and putting it into the new instance (the catalog's restore, timed around the call), median
  and 99th percentile;
- ``to on_next``: from the consumer's ``__init__`` (the activation made) to its first
  ``on_next`` (the state restored and the event delivered), stamped in the consumer's own
  hooks: this includes waiting behind the other streams of the same read, so it is a
  latency under load, not a cost;
- ``phase 2``: the phase's wall-clock and CPU time from the first ``on_next`` to the last
  (``bench/timing.py``'s Clock, stamped in the hook), and the share of its events the span
  covers (a rate under 90 % is refused);
- ``backlog``: the backlog's new streams a second from the first ``on_next`` to the last, by
  wall clock and per CPU second of the worker's process, nothing else writing.

With ``--kafka`` the same workload runs on a Kafka topic of 4 partitions (the test broker,
Tansu; the backlog on a topic of its own), its states in the worker's local state store (``state_dir``) and the changelog; then
two restarts, each timed from the provider's start to the first event of a parked stream
taken on every queue, and the changelog read in it (``KafkaChangelog.load``, timed around
the call, with the records it read):

- ``same machine``: a worker on the same ``state_dir``: it reads the changelog's tail;
- ``new owner``: a worker on an empty ``state_dir``: it builds its store from the changelog.

A restart's time is mostly the group's join, which the broker holds back for more members
to come: Tansu every join for half the group's session timeout (``--session-timeout``,
headrace's ``BalancerOptions.lease_length`` on Kafka, 10 s by default), Kafka an empty
group's first for ``group.initial.rebalance.delay.ms``.

With ``--standby`` too, a third: a worker on the first ``state_dir`` and one on an empty one,
both with ``standby_replicas=1``; the second takes half the queues and keeps standby copies of
the others. Once its copies are where the first worker's store is, the first leaves, and the
second takes its queues over: timed from that leaving to a parked stream's event taken on
every queue, with the changelog records its loads read (and those its standby copies read
before, while following).

Run: .venv/bin/python bench/durable_streams.py [--streams 1000000] [--active 0.01] [--kafka [--standby] [--session-timeout 10]]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.catalog import Catalog  # noqa: E402
from balancer.base import BalancerOptions  # noqa: E402
from bench import timing  # noqa: E402
from bench._common import peak_rss_mb, percentile, rss_mb  # noqa: E402
from bench.timing import Clock, cpu_figure, figure  # noqa: E402
from streams import Durable, StreamId, StreamProvider  # noqa: E402
from streams.backends.kafka.changelog import KafkaChangelog  # noqa: E402
from streams.core.ids import QueueId  # noqa: E402
from tests.kafka_broker import TansuBroker  # noqa: E402

QUEUES = 4
BATCH = 2000  # streams published per client call
SESSION: list[float | None] = [None]  # --session-timeout: the Kafka group's (None: headrace's default)


class Target(NamedTuple):
    """Where a worker reads and a publisher writes: the store (on Kafka, the worker's
    ``state_dir``), the broker (None: the embedded store) and the Kafka topic."""

    path: Path
    bootstrap: str | None = None
    topic: str = "devices"


class Hooks:
    """Stamps taken in the consumer's hooks (bench/timing.py's Clock for each phase)."""

    def __init__(self, streams: int) -> None:
        self.made: dict[str, float] = {}
        self.counts: dict[str, int] = {}  # each stream's count after its latest event
        self.reactivations: list[float] = []
        self.clock = Clock(streams, freeze=False)


def provider_for(
    path: Path, hooks: Hooks, bootstrap: str | None = None, standby_replicas: int = 0, topic: str = "devices"
) -> StreamProvider:
    if bootstrap is None:
        provider = StreamProvider.embedded(path, queues=QUEUES, stream_inactivity_period=2.0)
    else:
        session = SESSION[0]
        provider = StreamProvider.kafka(
            bootstrap,
            topic,
            queues=QUEUES,
            group_id=f"durable-bench-{topic}",
            state_dir=path,
            standby_replicas=standby_replicas,
            stream_inactivity_period=2.0,
            balancer_options=None
            if session is None
            else BalancerOptions(lease_length=session, renew_period=session / 3, refresh_period=1.0),
        )

    @provider.implicit("devices")
    class Device:
        count = Durable(0)
        last = Durable(None)

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key
            hooks.made[self.key] = time.perf_counter()

        def on_next(self, batch: Any) -> None:
            made = hooks.made.pop(self.key, None)
            if made is not None and self.count:  # restored: it had taken an event before
                hooks.reactivations.append(time.perf_counter() - made)
            hooks.clock.taken(len(batch))
            self.count += len(batch)
            self.last = batch.values[-1]
            hooks.counts[self.key] = self.count
            hooks.clock.result()

    return provider


async def publish(provider: StreamProvider, keys: Sequence[int]) -> None:
    for i in range(0, len(keys), BATCH):
        for key in keys[i : i + BATCH]:
            await provider.get_stream(StreamId("devices", str(key))).send(key)
        await provider.flush()


def publisher_main(target: Target, keys: Sequence[int], ready: Any, go: Any) -> None:
    """The publisher process: opens a client of ``target`` (no pulling agents), says it is
    ready, and on ``go`` sends one event to each stream of ``keys``."""

    async def main() -> None:
        provider = provider_for(target.path, Hooks(0), target.bootstrap, topic=target.topic)
        async with provider.client():
            ready.set()
            await anyio.to_thread.run_sync(go.wait)
            await publish(provider, keys)

    anyio.run(main)


class Publisher:
    """A publisher in a process of its own (as devices and services publish), so the worker's
    CPU time and RSS are its own: started, its client open, before :meth:`go`."""

    def __init__(self, target: Target, keys: Sequence[int]) -> None:
        context = multiprocessing.get_context("spawn")
        self.ready, self.go = context.Event(), context.Event()
        self.process = context.Process(target=publisher_main, args=(target, keys, self.ready, self.go))

    async def start(self) -> None:
        self.process.start()
        while not await anyio.to_thread.run_sync(self.ready.wait, 1.0):
            if not self.process.is_alive():
                raise RuntimeError(f"the publisher exited before it was ready (exit code {self.process.exitcode})")

    async def done(self) -> None:
        """Wait for every event to be written; a publisher that failed fails the run."""
        await anyio.to_thread.run_sync(self.process.join)
        if self.process.exitcode != 0:
            raise RuntimeError(f"the publisher exited with code {self.process.exitcode}")


async def published(target: Target, keys: Sequence[int]) -> Publisher:
    """A publisher of ``keys`` started, its client open, and told to go."""
    publisher = Publisher(target, keys)
    await publisher.start()
    publisher.go.set()
    return publisher


async def wait_taken(hooks: Hooks, seconds: float) -> None:
    with anyio.fail_after(seconds):
        while not hooks.clock.complete:
            await anyio.sleep(0.05)


def active_streams(provider: StreamProvider) -> int:
    return sum(len(agent.stream_ids()) for agent in provider.agents)


def timing_restores(into: list[float]) -> None:
    """Time each restore of a saved state (the catalog's, wrapped in place)."""
    restore = Catalog._restore

    def timed(self: Catalog, activation: Any, *args: Any) -> None:
        began = time.perf_counter()
        restore(self, activation, *args)
        if activation.stored:  # there was a state to restore
            into.append(time.perf_counter() - began)

    Catalog._restore = timed  # type: ignore[method-assign]


async def run(streams: int, active: float, path: Path, bootstrap: str | None, standby: bool = False) -> None:
    hooks = Hooks(streams)
    restores: list[float] = []
    timing_restores(restores)
    target = Target(path, bootstrap)
    provider = provider_for(path, hooks, bootstrap)
    publisher = Publisher(target, range(streams))
    await publisher.start()  # its client open before the worker starts
    base = rss_mb()
    async with provider:
        started = time.perf_counter()
        publisher.go.set()
        await wait_taken(hooks, 3600)
        taken_in = time.perf_counter() - started
        phase1_report = hooks.clock.report()
        await publisher.done()
        assert len(hooks.counts) == streams and set(hooks.counts.values()) == {1}, "phase 1: not one event each"
        # Every stream goes quiet and is parked (its state in the store only).
        with anyio.fail_after(600):
            while active_streams(provider):
                await anyio.sleep(0.5)
        phase1 = time.perf_counter() - started
        parked_rss = rss_mb()
        chosen = random.Random(35).sample(range(streams), max(1, int(streams * active)))
        hooks.clock = Clock(len(chosen), freeze=False)
        publisher = await published(target, chosen)
        await wait_taken(hooks, 600)
        report = hooks.clock.report()
        await publisher.done()
        # Each chosen stream's state restored exactly: its count is its two events.
        assert [hooks.counts[str(k)] for k in chosen] == [2] * len(chosen), "phase 2: a state not restored exactly"
    peak = peak_rss_mb()
    size = sum(f.stat().st_size for f in path.rglob("headrace.db*"))
    reactivations = sorted(hooks.reactivations)
    restores.sort()
    print(f"streams {streams:,}, active in phase 2 {len(chosen):,} ({active:.0%})")
    print(
        f"phase 1 (every stream one event, then parked): {phase1:.1f} s, of which taking the events {taken_in:.1f} s "
        f"(first to last on_next: {figure(phase1_report)} new streams/s, {cpu_figure(phase1_report)} per CPU second; "
        f"{phase1_report.wall:.2f} s wall, {phase1_report.cpu:.2f} s CPU; {phase1_report.coverage:.0%} of them in the span)"
    )
    print(
        f"rss: peak {peak - base:,.0f} MB above the start ({(peak - base) * 2**20 / streams:,.0f} B a stream); "
        f"with every stream parked {parked_rss - base:,.0f} MB ({(parked_rss - base) * 2**20 / streams:,.0f} B a stream)"
    )
    print(f"store: {size / 2**20:,.0f} MB ({size / streams:,.0f} B a stream)")
    timing.note("phase 1, new streams/s", phase1_report.rate or math.nan)
    timing.note("phase 1, new streams per CPU s", phase1_report.cpu_rate or math.nan)
    timing.note("peak RSS a stream, bytes", (peak - base) * 2**20 / streams)
    timing.note("store a stream, bytes", size / streams)
    timing.note("restore, median ms", percentile(restores, 0.5) * 1e3)
    timing.note("restore, p99 ms", percentile(restores, 0.99) * 1e3)
    print(
        f"restore ({len(restores):,} parked streams reactivated): median {percentile(restores, 0.5) * 1e3:.3f} ms, "
        f"p99 {percentile(restores, 0.99) * 1e3:.3f} ms"
    )
    print(
        f"to on_next: median {percentile(reactivations, 0.5) * 1e3:.1f} ms, "
        f"p99 {percentile(reactivations, 0.99) * 1e3:.1f} ms (behind the other streams of the same read)"
    )
    print(
        f"phase 2: {len(chosen):,} events in {report.wall:.2f} s wall, {report.cpu:.2f} s CPU, first to last "
        f"on_next ({figure(report)} events/s; the span covers {report.coverage:.0%} of them)"
    )
    if bootstrap is not None:
        given = Counter(range(streams)) + Counter(chosen)  # the events each stream has taken
        await restart(bootstrap, path, given, "same machine")
        await restart(bootstrap, path / "new-owner", given, "new owner")
        if standby:
            await standby_takeover(bootstrap, path, given)
    await backlog(streams, Target(path / "backlog", bootstrap, "devices-backlog"))


async def backlog(streams: int, target: Target) -> None:
    """A replay: one event to each of ``streams`` new streams, all published (by a publisher
    process) before the worker starts; timed from its first ``on_next`` to its last."""
    publisher = await published(target, range(streams))
    await publisher.done()
    hooks = Hooks(streams)
    async with provider_for(target.path, hooks, target.bootstrap, topic=target.topic):
        await wait_taken(hooks, 3600)
    report = hooks.clock.report()
    assert len(hooks.counts) == streams and set(hooks.counts.values()) == {1}, "backlog: not one event each"
    print(
        f"backlog ({streams:,} streams' events published before the worker started; first to last on_next): "
        f"{figure(report)} new streams/s, {cpu_figure(report)} per CPU second; "
        f"{report.wall:.2f} s wall, {report.cpu:.2f} s CPU; {report.coverage:.0%} of them in the span"
    )
    timing.note("backlog, new streams/s", report.rate or math.nan)
    timing.note("backlog, new streams per CPU s", report.cpu_rate or math.nan)


def timing_loads(into: list[tuple[float, float, int]]) -> None:
    """Time each queue's load of its states from the changelog (wrapped in place): when it
    began, how long it took, and the changelog records it read."""
    load = KafkaChangelog.load

    async def timed(self: KafkaChangelog, queue: QueueId) -> Any:
        began, read = time.perf_counter(), self.records_read
        try:
            return await load(self, queue)
        finally:
            into.append((began, time.perf_counter() - began, self.records_read - read))

    KafkaChangelog.load = timed  # type: ignore[method-assign]


async def taken_exactly(provider: StreamProvider, hooks: Hooks, keys: list[int], given: Counter[int]) -> None:
    """One event to each stream of ``keys``, taken by ``provider``'s worker; each stream's
    count then checked against the events it was given (its state restored exactly)."""
    await publish(provider, keys)
    await wait_taken(hooks, 600)
    assert hooks.counts == {str(k): given[k] for k in keys}, hooks.counts


async def restart(bootstrap: str, state_dir: Path, given: Counter[int], who: str) -> None:
    """A worker on ``state_dir`` after the last one left: from its start to a parked stream's
    event taken on every queue (one event to each of QUEUES * 4 parked streams), each
    stream's count then checked against the events it was given."""
    loads: list[tuple[float, float, int]] = []
    original = KafkaChangelog.load
    timing_loads(loads)
    streams = len(given)
    keys = random.Random(len(who)).sample(range(streams), QUEUES * 4)
    given.update(keys)
    hooks = Hooks(len(keys))
    try:
        began = time.perf_counter()
        async with provider_for(state_dir, hooks, bootstrap) as provider:
            await taken_exactly(provider, hooks, keys, given)
            ready = time.perf_counter() - began
    finally:
        KafkaChangelog.load = original  # type: ignore[method-assign]
    read = sum(n for _, _, n in loads)
    slowest = max((took for _, took, _ in loads), default=0.0)
    assigned = min((at for at, _, _ in loads), default=began) - began
    print(
        f"restart, {who}: {ready:.1f} s to a parked stream's event on every queue, of which {assigned:.1f} s "
        f"before the first queue was assigned (joining the group); the changelog read {read:,} record(s), "
        f"the slowest queue's load {slowest:.2f} s"
    )
    timing.note(f"restart {who}, s", ready)
    timing.note(f"restart {who}, changelog records read", read)
    timing.note(f"restart {who}, slowest load s", slowest)


def local_store(provider: StreamProvider) -> Any:
    """The worker's local state store (its agents' changelog's)."""
    return provider.agents[0].receiver.changelog.local


async def standby_takeover(bootstrap: str, state_dir: Path, given: Counter[int]) -> None:
    """The third restart of the module docstring: a worker that kept standby copies takes
    the queues of one that leaves."""
    loads: list[tuple[float, float, int]] = []
    original = KafkaChangelog.load
    timing_loads(loads)
    keys = random.Random(7).sample(range(len(given)), QUEUES * 4)
    given.update(keys)
    hooks = Hooks(len(keys))
    leave, left = anyio.Event(), anyio.Event()

    async def owner_until_it_leaves(*, task_status: Any) -> None:
        async with provider_for(state_dir, Hooks(1), bootstrap, standby_replicas=1) as owner:
            task_status.started(owner)
            await leave.wait()
        left.set()

    try:
        async with anyio.create_task_group() as tg:
            owner = await tg.start(owner_until_it_leaves)
            async with provider_for(state_dir / "standby", hooks, bootstrap, standby_replicas=1) as standby:
                with anyio.fail_after(600):
                    while not (owner.agents and standby.agents and len(owner.agents) < QUEUES):
                        await anyio.sleep(0.1)
                    theirs = [agent.queue.number for agent in owner.agents]
                    mine, copy = local_store(owner), local_store(standby)
                    while any((copy.offset(q) or -1) < (mine.offset(q) or 0) for q in theirs):
                        await anyio.sleep(0.1)
                followed = standby.agents[0].receiver.changelog.standby.records_read  # its standby copies'
                began = time.perf_counter()
                leave.set()
                await left.wait()  # the events are the standby's to take, not the leaving owner's
                await taken_exactly(standby, hooks, keys, given)
                ready = time.perf_counter() - began
    finally:
        KafkaChangelog.load = original  # type: ignore[method-assign]
    taken = [(took, n) for at, took, n in loads if at >= began]
    read, slowest = sum(n for _, n in taken), max((took for took, _ in taken), default=0.0)
    print(
        f"restart, new owner with a standby (queues {theirs} taken over from a worker that left): {ready:.1f} s "
        f"from its leaving to a parked stream's event on every queue; the changelog read {read:,} record(s), the "
        f"slowest queue's load {slowest:.2f} s (its standby copies had read {followed:,} record(s) while following)"
    )
    timing.note("restart new owner with a standby, s", ready)
    timing.note("restart new owner with a standby, changelog records read", read)
    timing.note("restart new owner with a standby, slowest load s", slowest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=1_000_000)
    parser.add_argument("--active", type=float, default=0.01)
    parser.add_argument("--dir", type=Path, default=None, help="where the store goes (default: a temporary one)")
    parser.add_argument("--kafka", action="store_true", help="on the test broker (Tansu), with two restarts")
    parser.add_argument("--standby", action="store_true", help="with --kafka: a third, onto a standby worker")
    parser.add_argument(
        "--session-timeout", type=float, default=None, help="with --kafka: the group's session timeout, s (default 10)"
    )
    args = parser.parse_args()
    SESSION[0] = args.session_timeout
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        if args.kafka:
            with TansuBroker() as broker:
                anyio.run(run, args.streams, args.active, Path(tmp), broker.bootstrap, args.standby)
        else:
            anyio.run(run, args.streams, args.active, Path(tmp), None)
    timing.save_run(__file__, {}, params=vars(args))


if __name__ == "__main__":
    main()
