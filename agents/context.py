"""What a pulling agent needs from the provider that runs it."""

from __future__ import annotations

from dataclasses import dataclass

from streams.consumers import ConsumerRegistry
from streams.deadletters import DeadLetterStore
from streams.failures import StreamFailureHandler
from streams.options import StreamProviderOptions
from streams.pubsub import PubSubStore


@dataclass(frozen=True)
class AgentContext:
    options: StreamProviderOptions
    registry: ConsumerRegistry
    pubsub: PubSubStore
    dead_letters: DeadLetterStore
    failure_handler: StreamFailureHandler
