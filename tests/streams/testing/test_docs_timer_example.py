"""docs/workers.md's timer example runs as written in the harness: ``self.timers.now()`` is
the harness's clock, so the "silent for 5 minutes" timer fires 300 s after the last event
by that clock (moved by each event, fired once); and a stream's saved state is readable after
a restart, before its activation is made again."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from streams import StreamId, StreamProvider, Timer
from streams.testing import Harness

WORKERS_MD = (Path(__file__).resolve().parents[3] / "docs" / "workers.md").read_text()


def _watchdog(provider: StreamProvider, alerts: list[tuple[Any, ...]]) -> type:
    """The docs' ``Watchdog``, its code block run as written, registered on ``provider``."""
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", WORKERS_MD, re.S) if "class Watchdog" in b]
    assert "self.timers.now() + 300" in block
    scope: dict[str, Any] = {"provider": provider, "alert": lambda *args: alerts.append(args)}
    exec(compile(block, "docs/workers.md", "exec"), scope)
    watchdog: type = scope["Watchdog"]
    return watchdog


async def test_the_docs_timer_fires_300_s_after_the_last_event_by_the_harness_clock() -> None:
    alerts: list[tuple[Any, ...]] = []
    provider = StreamProvider.memory()
    watchdog = _watchdog(provider, alerts)
    async with Harness(provider, start=1_000.0) as harness:
        await harness.publish("devices/d1", {"v": 1}, at=1_010.0)
        await harness.publish("devices/d1", {"v": 2}, at=1_100.0)  # moves the timer to 1,400
        await harness.advance_to(1_399.0)
        assert alerts == []
        (live,) = harness.instances(watchdog).values()
        assert [(t.name, t.time) for t in live.timers.pending()] == [("silent", 1_400.0)]
        await harness.advance_to(1_400.0)
        assert alerts == [("d1", "silent for 5 minutes", {"v": 2})]
        (fired,) = harness.emitted(watchdog, "on_timer")
        assert isinstance(fired.value, Timer) and (fired.value.name, fired.value.time) == ("silent", 1_400.0)
        await harness.advance(3_600.0)
        assert len(alerts) == 1  # fired once, then gone


async def test_saved_state_is_readable_after_a_restart_before_the_next_event() -> None:
    alerts: list[tuple[Any, ...]] = []
    provider = StreamProvider.memory(queues=2)
    watchdog = _watchdog(provider, alerts)
    async with Harness(provider, queues=2) as harness:
        await harness.publish("devices/d1", {"v": 1}, {"v": 2}, at=50.0)
        await harness.publish("devices/d2", {"v": 9}, at=60.0)
        await harness.restart()
        assert harness.instances(watchdog) == {}  # no event since: nothing activated yet
        d1 = harness.saved(watchdog, "devices/d1")
        assert d1 is not None and (d1.seen, d1.last) == (2, {"v": 2})  # type: ignore[attr-defined]
        assert [(t.name, t.time) for t in d1.timers.pending()] == [("silent", 350.0)]  # type: ignore[attr-defined]
        assert d1.device == "d1" and d1.timers.now() == 60.0  # type: ignore[attr-defined]
        assert harness.saved(watchdog, StreamId("devices", "d9")) is None
        await harness.advance_to(350.0)  # the restored timer fires with no new event
        assert alerts == [("d1", "silent for 5 minutes", {"v": 2})]
        await harness.restart()  # saves the fired timer's unit: the timer is gone from it
        again = harness.saved(watchdog, "devices/d1")
        assert again is not None and again.timers.pending() == [] and again.seen == 2  # type: ignore[attr-defined]
