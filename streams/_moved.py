"""Old module paths that still import, for one release: each is the module now at its new home.

The packages were regrouped (``streams/runtime``, ``streams/embedded``, ``streams/kafka``, and so
on); code that imports a module by its old path keeps working and is told, once, where it went:

>>> import sys, warnings
>>> _ = sys.modules.pop("streams.provider", None)  # as in a process that never imported it
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     from streams.provider import StreamProvider
>>> StreamProvider.__module__
'streams.runtime.provider'
>>> print(caught[0].message)
streams.provider moved to streams.runtime.provider: import it from there (the old path goes in the next release)

The public names (``from streams import StreamProvider``) never moved.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

# old module path -> where it lives now
MOVED: dict[str, str] = {
    "streams.kafka.outage": "streams.kafka.clients",
    "streams.adapters.generator": "streams.adapters.memory",
    "agents.state": "agents.checkpoint",
    "streams.embedded.state": "streams.embedded.queues",
    "agents.turns": "agents.timed",
    "spark_sink.memory_sink": "spark_sink.handoff",
    "spark_sink.errors": "streams.core.errors",
    "spark_sink.storage": "spark_sink.log",
    "spark_sink.writer": "spark_sink.log",
    "agents.handoff": "spark_sink.handoff",
    "streams.embedded.receiver": "streams.embedded.queues",
    "balancer.clock": "streams.core.clock",
    "agents.inline": "agents.delivery",
    "streams.cli.demo.status": "streams.cli.demo.report",
    "streams.cli.demo.summary": "streams.cli.demo.report",
    "streams.cli.demo.traffic": "streams.cli.demo.pipeline",
    "streams.cli.worker_startup": "streams.cli.worker",
    "streams.cli.dlq_windows": "streams.cli.dlq",
    "streams.runtime.constructors": "streams.runtime.provider",
    "streams.embedded.store_turns": "streams.embedded.store",
    "streams.kafka.reach": "streams.kafka.clients",
    "streams.kafka.admin": "streams.kafka.clients",
    "streams.core.outage": "streams.core.retry",
    "streams.core.tokens": "streams.core.ids",
    "streams.core.failures": "streams.core.observer",
    "balancer.ownership": "balancer.leases",
    "balancer.instances": "balancer.membership",
    "balancer.dynamic": "balancer.deployment_based",
    "balancer.static": "balancer.deployment_based",
    "balancer.best_fit": "balancer.deployment_based",
    "spark_sink.segments": "spark_sink.log",
    "spark_sink.mark_retention": "spark_sink.retention",
    "spark_sink.compaction": "spark_sink.retention",
    "agents.latency": "agents.counters",
    "agents.fate_counts": "agents.counters",
    "agents.receiver_calls": "agents.pulling_agent",
    "agents.keyed_heap": "agents.checkpoint",
    "agents.rewind": "agents.cursors",
    "agents.input_view": "agents.merged_inputs",
    "agents.holdback": "agents.merged_inputs",
    "agents.order": "agents.merged_inputs",
    "agents.pending": "agents.activation",
    "agents.redelivery": "agents.hook_calls",
    "agents.letters": "agents.hook_calls",
    "agents.context": "agents.protocols",
    "streams.eventtime.inputs": "streams.eventtime.parts",
    "streams.eventtime.metrics": "streams.eventtime.results",
    "streams.eventtime.refusals": "streams.eventtime.ordering",
    "streams.eventtime.merged_release": "streams.eventtime.release",
    "streams.backends.kafka": "streams.runtime.backends",
    "streams.backends.embedded": "streams.runtime.backends",
    "streams.backends.handoff": "streams.runtime.backends",
    "streams.backends.memory": "streams.runtime.backends",
    "streams.backends.base": "streams.runtime.backends",
    "streams.provider": "streams.runtime.provider",
    "streams.stream": "streams.runtime.stream",
    "streams.publisher": "streams.runtime.publisher",
    "streams.config": "streams.runtime.config",
    "streams.config_load": "streams.runtime.config",
    "streams.config_schema": "streams.runtime.config_schema",
    "streams.constructors": "streams.runtime.provider",
    "streams.status": "streams.runtime.status",
    "streams.status_reporter": "streams.runtime.status",
    "streams.status_kafka": "streams.runtime.status_kafka",
    "streams.status_topic": "streams.runtime.status_kafka",
    "streams.observability.logs": "streams.runtime.logs",
    "streams.observability.metrics": "streams.runtime.metrics",
    "streams.observability.snapshot": "streams.runtime.snapshot",
    "streams.backends": "streams.runtime.backends",
    "streams.registry": "agents.registry",
    "streams.core.store": "streams.embedded.store",
    "streams.core.store_turns": "streams.embedded.store",
    "streams.core.deadletters_embedded": "streams.embedded.deadletters",
    "streams.core.pubsub_embedded": "streams.embedded.pubsub",
    "streams.adapters.embedded": "streams.embedded.adapter",
    "streams.adapters.embedded_queues": "streams.embedded.queues",
    "streams.adapters.embedded_receiver": "streams.embedded.queues",
    "streams.adapters.embedded_state": "streams.embedded.queues",
    "streams.adapters.group_commit": "streams.embedded.group_commit",
    "streams.adapters.kafka": "streams.kafka.adapter",
    "streams.adapters.kafka_receiver": "streams.kafka.receiver",
    "streams.adapters.kafka_records": "streams.kafka.records",
    "streams.adapters.kafka_repartition": "streams.kafka.repartition",
    "streams.adapters.kafka_state": "streams.kafka.state",
    "spark_sink.kafka_log": "spark_sink.kafka.log",
    "spark_sink.kafka_records": "spark_sink.kafka.records",
    "spark_sink.kafka_sink": "spark_sink.kafka.sink",
    "spark_sink.kafka_storage": "spark_sink.kafka.storage",
    "balancer.kafka_group": "balancer.kafka.group",
    "balancer.kafka_assignor": "balancer.kafka.assignor",
}


class _MovedLoader(importlib.abc.Loader):
    def __init__(self, home: str) -> None:
        self.home = home

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.home}: import it from there (the old path goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.home)

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # the module at its new home is already executed


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds an old module path before the file system does, so a moved module loads once."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        head, _, tail = fullname, "", ""
        while head and head not in MOVED:  # a module inside a moved package moved with it
            head, _, last = head.rpartition(".")
            tail = f"{last}.{tail}" if tail else last
        if not head:
            return None
        home = f"{MOVED[head]}.{tail}" if tail else MOVED[head]
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(home))


def install() -> None:
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
