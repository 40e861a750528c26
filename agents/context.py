"""What a pulling agent needs from the provider that runs it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agents.registry import ConsumerRegistry
from spark_sink.protocols import HandoffSink
from streams.core.clock import WALL_CLOCK, Clock
from streams.core.deadletters import DeadLetterStore
from streams.core.observer import StreamFailureHandler
from streams.core.options import StreamProviderOptions
from streams.core.pubsub import PubSubStore


@dataclass(frozen=True)
class AgentContext:
    options: StreamProviderOptions
    registry: ConsumerRegistry
    pubsub: PubSubStore
    dead_letters: DeadLetterStore
    failure_handler: StreamFailureHandler
    # handoff stream name -> its sink, for consumer types that declare a handoff
    handoff_sinks: Mapping[str, HandoffSink] = field(default_factory=dict)
    worker_name: str | None = None  # named in the log context of every delivery
    clock: Clock = WALL_CLOCK  # the processing clock: ticks, watermark punctuation, completion
    # Per consumer type, the kinds of refusal its agents have warned of in this run (one
    # line per kind and type across the worker's queues: agents.hook_calls.HookLimits.warned).
    warned: dict[str, set[str]] = field(default_factory=dict)
