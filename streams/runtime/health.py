"""A worker's health for an orchestrator's probes: liveness and readiness, apart.

``headrace worker --metrics-port PORT`` serves them beside the metrics:

- ``GET /livez``: 200 ``live`` while the worker's event loop answers within
  :data:`LOOP_TIMEOUT` seconds, else 503 with what failed. A worker whose loop is stuck (a
  consumer blocking it with synchronous work) is restarted by a liveness probe; nothing else
  makes it fail, so a slow queue or a lost store never gets a worker killed.
- ``GET /readyz``: 200 ``ready: ...`` once the worker has joined, holds its queues and its
  agents read them; else 503 and one line saying why: starting, leaving (draining after
  SIGTERM), a queue failed (its agent stopped: ``headrace status`` says why), or a queue's
  store unreachable (its reads are being retried).

``/metrics`` answers the Prometheus metrics, ``/`` the status page
(:mod:`streams.runtime.page`), every other path 404.

>>> health = WorkerHealth()
>>> health.readiness_text(None)   # before the worker joined
(False, 'not ready: starting (not joined yet)')
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

import anyio.from_thread
import anyio.lowlevel

from streams.runtime.provider import StreamProvider

log = logging.getLogger("headrace.health")

LOOP_TIMEOUT = 5.0  # seconds the event loop has to answer a probe
LIVE_PATH = "/livez"
READY_PATH = "/readyz"

T = TypeVar("T")


class WorkerHealth:
    """What a worker's probes answer. The worker marks it :meth:`joined` once it reads its
    queues and :meth:`leaving` when it starts to hand them back; :meth:`attach` (on the
    event loop) gives it the provider to look at."""

    def __init__(self, timeout: float = LOOP_TIMEOUT) -> None:
        self.timeout = timeout  # seconds the event loop has to answer a probe
        self._provider: StreamProvider | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._joined = False
        self._leaving = False

    def attach(self, provider: StreamProvider) -> None:
        """Watch ``provider``; call it on the provider's event loop."""
        self._provider = provider
        self._token = anyio.lowlevel.current_token()

    def joined(self) -> None:
        """The worker has joined its cluster and reads its queues."""
        self._joined = True

    def leaving(self) -> None:
        """The worker is leaving (a signal): it drains and hands its queues back."""
        self._leaving = True

    # -- answers, from the HTTP server's threads ------------------------------------------
    def live(self) -> tuple[bool, str]:
        """``(live, one line)``: whether the event loop answered in time."""
        if self._token is None:
            return True, "live (no event loop to watch yet)"
        answered = _on_loop(self._token, lambda: True, self.timeout)
        if answered is None:
            return False, f"not live: the event loop did not answer in {self.timeout:g} s"
        return True, "live"

    def ready(self) -> tuple[bool, str]:
        """``(ready, one line)``: whether the worker holds its queues and reads them."""
        if self._token is None or self._provider is None:
            return self.readiness_text(None)
        provider = self._provider
        agents = _on_loop(self._token, lambda: _agent_states(provider), self.timeout)
        if agents is None:
            return False, f"not ready: the event loop did not answer in {self.timeout:g} s"
        return self.readiness_text(agents)

    def readiness_text(self, agents: list[tuple[int, str | None, bool]] | None) -> tuple[bool, str]:
        """The readiness of a worker whose agents are ``(queue, failure, unreachable)``
        (None: not attached yet).

        >>> health = WorkerHealth(); health.joined()
        >>> health.readiness_text([(0, None, False), (1, None, True)])
        (False, 'not ready: queue 1 unreachable (its reads are retried with back-off)')
        >>> health.readiness_text([(0, None, False), (1, None, False)])
        (True, 'ready: reading queues [0, 1]')
        """
        if self._leaving:
            return False, "not ready: leaving (finishing its deliveries, handing its queues back)"
        if not self._joined or agents is None:
            return False, "not ready: starting (not joined yet)"
        for queue, failure, _ in agents:
            if failure is not None:
                return False, f"not ready: queue {queue} failed: {failure}"
        for queue, _, unreachable in agents:
            if unreachable:
                return False, f"not ready: queue {queue} unreachable (its reads are retried with back-off)"
        queues = sorted(queue for queue, _, _ in agents)
        if not queues:
            return True, "ready: holds no queue now (the other workers hold them all)"
        return True, f"ready: reading queues {queues}"


def _agent_states(provider: StreamProvider) -> list[tuple[int, str | None, bool]]:
    """``(queue, failure, unreachable)`` of each of the provider's agents, read on its loop.
    On Kafka the cluster's outage counts for every queue: reads find nothing meanwhile."""
    cluster_away = provider.backend.cluster_away
    return [(a.queue.number, a.failure, a.unreachable or cluster_away) for a in provider.agents]


def _on_loop(token: anyio.lowlevel.EventLoopToken, fn: Callable[[], T], timeout: float) -> T | None:
    """``fn()`` run on the event loop of ``token``, from another thread; None when the loop
    has not run it within ``timeout`` seconds (it is stuck, or gone)."""
    done = threading.Event()
    result: list[T] = []

    def ask() -> None:
        try:
            result.append(anyio.from_thread.run_sync(fn, token=token))
        except Exception as exc:  # the loop has ended: nothing answers
            log.debug("health probe with no running loop: %r", exc)
        finally:
            done.set()

    # A thread of its own: a stuck loop keeps it waiting, not the HTTP server's thread.
    threading.Thread(target=ask, name="headrace-health-probe", daemon=True).start()
    if not done.wait(timeout) or not result:
        return None
    return result[0]
