from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from balancer import ManualClock, TableLeaseProvider, TableMembership
from balancer.leases import MemoryLeaseTable
from balancer.membership import MemoryMemberTable
from streams.backends.embedded.balancer import SqliteLeaseProvider, SqliteMembership
from streams.backends.embedded.store import EmbeddedStore


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000.0)


@pytest.fixture
def stores(tmp_path) -> Iterator[Callable[[], EmbeddedStore]]:
    """Opens the same embedded store again, as another process would (own connections)."""
    opened: list[EmbeddedStore] = []

    def open_store() -> EmbeddedStore:
        opened.append(EmbeddedStore(tmp_path / "store"))
        return opened[-1]

    yield open_store
    for store in opened:
        store.close()


@pytest.fixture(params=["memory", "sqlite"])
def membership_factory(request, clock, stores) -> Callable[..., TableMembership]:
    """Oracles that share one membership table: each call is another process."""
    if request.param == "memory":
        table = MemoryMemberTable()
        return lambda suspicion_timeout=30.0: TableMembership(table, clock=clock, suspicion_timeout=suspicion_timeout)
    return lambda suspicion_timeout=30.0: SqliteMembership(stores(), clock=clock, suspicion_timeout=suspicion_timeout)


@pytest.fixture(params=["memory", "sqlite"])
def lease_factory(request, clock, stores) -> Callable[[], TableLeaseProvider]:
    """Lease providers that share one lease table: each call is another process."""
    if request.param == "memory":
        table = MemoryLeaseTable()
        return lambda: TableLeaseProvider(table, clock=clock)
    return lambda: SqliteLeaseProvider(stores(), clock=clock)
