"""What a pulling agent needs from the provider that runs it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.core.deadletters import DeadLetterStore
from streams.core.failures import StreamFailureHandler
from streams.core.options import StreamProviderOptions
from streams.core.pubsub import PubSubStore
from streams.registry import ConsumerRegistry


@dataclass(frozen=True)
class AgentContext:
    options: StreamProviderOptions
    registry: ConsumerRegistry
    pubsub: PubSubStore
    dead_letters: DeadLetterStore
    failure_handler: StreamFailureHandler
    # handoff stream name -> a spark_sink.HandoffSink, for consumer types that declare a handoff
    handoff_sinks: Mapping[str, Any] = field(default_factory=dict)
    worker_name: str | None = None  # named in the log context of every delivery
