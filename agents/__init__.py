"""The pulling agents of a worker: one per queue it owns, reading the queue into a cache and
delivering to each subscription through its cursor (Orleans' persistent stream pulling agents).

- :class:`AgentManager` (``agents.manager``): the agents of one worker, following its balancer;
- :class:`PullingAgent` (``agents.pulling_agent``): one queue's read loop and checkpoint;
- :class:`StreamConsumer` (``agents.delivery``): delivery to one subscription;
- :class:`Activation`, :class:`TimedActivation` (``agents.activation``): what is delivered to;
- :class:`EventTimeObserver` (``agents.event_time_observer``): an event-time consumer's activation;
- :class:`AgentContext` (``agents.context``): what an agent needs from its provider.

Names load on first use, so importing one module of the package loads only what it needs.

>>> import agents
>>> agents.Activation.__name__
'Activation'
"""

from __future__ import annotations

import importlib

_WHERE = {
    "Activation": "agents.activation",
    "AgentContext": "agents.context",
    "AgentManager": "agents.manager",
    "EventTimeObserver": "agents.event_time_observer",
    "PullingAgent": "agents.pulling_agent",
    "StreamConsumer": "agents.delivery",
    "TimedActivation": "agents.activation",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'agents' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
