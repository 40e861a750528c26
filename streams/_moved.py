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

import functools
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

# old module path -> where it lives now
MOVED: dict[str, str] = {
    "balancer.keyed": "streams.adapters.mapper",
    "streams.cli.simulate_input": "streams.cli.simulate",
    "agents.handoff": "agents.output",
    "agents.hook_calls": "agents.output",
    "agents.context": "agents.protocols",
    "agents.fate_counts": "agents.counters",
    "agents.holdback": "agents.merged_inputs",
    "agents.inline": "agents.delivery",
    "agents.input_view": "agents.merged_inputs",
    "agents.keyed_heap": "agents.checkpoint",
    "agents.latency": "agents.counters",
    "agents.letters": "agents.output",
    "agents.order": "agents.merged_inputs",
    "agents.pending": "agents.activation",
    "agents.receiver_calls": "agents.pulling_agent",
    "agents.redelivery": "agents.output",
    "agents.rewind": "agents.cursors",
    "agents.state": "agents.checkpoint",
    "agents.turns": "agents.timed",
    "balancer.best_fit": "balancer.deployment_based",
    "balancer.clock": "streams.core.clock",
    "balancer.dynamic": "balancer.deployment_based",
    "balancer.instances": "balancer.membership",
    "balancer.kafka_assignor": "balancer.kafka.assignor",
    "balancer.kafka_group": "balancer.kafka.group",
    "balancer.ownership": "balancer.leases",
    "balancer.static": "balancer.deployment_based",
    "spark_sink.compaction": "spark_sink.retention",
    "spark_sink.errors": "streams.core.errors",
    "spark_sink.kafka_log": "spark_sink.kafka.log",
    "spark_sink.kafka_records": "spark_sink.kafka.records",
    "spark_sink.kafka_sink": "spark_sink.kafka.sink",
    "spark_sink.kafka_storage": "spark_sink.kafka.storage",
    "spark_sink.memory_sink": "spark_sink.handoff",
    "spark_sink.segments": "spark_sink.log",
    "spark_sink.storage": "spark_sink.log",
    "spark_sink.writer": "spark_sink.log",
    "streams.adapters.embedded": "streams.embedded.adapter",
    "streams.adapters.embedded_queues": "streams.embedded.queues",
    "streams.adapters.embedded_receiver": "streams.embedded.queues",
    "streams.adapters.embedded_state": "streams.embedded.queues",
    "streams.adapters.generator": "streams.adapters.memory",
    "streams.adapters.group_commit": "streams.embedded.group_commit",
    "streams.adapters.kafka": "streams.kafka.adapter",
    "streams.adapters.kafka_receiver": "streams.kafka.receiver",
    "streams.adapters.kafka_records": "streams.kafka.records",
    "streams.adapters.kafka_repartition": "streams.kafka.repartition",
    "streams.adapters.kafka_state": "streams.kafka.state",
    "streams.backends": "streams.runtime.backends",
    "streams.backends.base": "streams.runtime.backends",
    "streams.backends.embedded": "streams.runtime.backends",
    "streams.backends.handoff": "streams.runtime.backends",
    "streams.backends.kafka": "streams.runtime.backends",
    "streams.backends.memory": "streams.runtime.backends",
    "streams.cli.demo.status": "streams.cli.demo.report",
    "streams.cli.demo.summary": "streams.cli.demo.report",
    "streams.cli.demo.traffic": "streams.cli.demo.pipeline",
    "streams.cli.dlq_windows": "streams.cli.dlq",
    "streams.cli.worker_startup": "streams.cli.worker",
    "streams.config": "streams.runtime.config",
    "streams.config_load": "streams.runtime.config",
    "streams.config_schema": "streams.runtime.config_schema",
    "streams.constructors": "streams.runtime.provider",
    "streams.core.deadletters_embedded": "streams.embedded.deadletters",
    "streams.core.failures": "streams.core.observer",
    "streams.core.outage": "streams.core.retry",
    "streams.core.pubsub_embedded": "streams.embedded.pubsub",
    "streams.core.store": "streams.embedded.store",
    "streams.core.store_turns": "streams.embedded.store",
    "streams.core.tokens": "streams.core.ids",
    "streams.eventtime.inputs": "streams.eventtime.parts",
    "streams.eventtime.merged_release": "streams.eventtime.release",
    "streams.eventtime.metrics": "streams.eventtime.results",
    "streams.eventtime.refusals": "streams.eventtime.ordering",
    "streams.kafka.admin": "streams.kafka.clients",
    "streams.kafka.outage": "streams.kafka.clients",
    "streams.kafka.reach": "streams.kafka.clients",
    "streams.observability.logs": "streams.runtime.logs",
    "streams.observability.metrics": "streams.runtime.metrics",
    "streams.observability.snapshot": "streams.runtime.snapshot",
    "streams.provider": "streams.runtime.provider",
    "streams.publisher": "streams.runtime.publisher",
    "streams.registry": "agents.registry",
    "streams.status": "streams.runtime.status",
    "streams.status_kafka": "streams.runtime.status_kafka",
    "streams.status_reporter": "streams.runtime.status",
    "streams.status_topic": "streams.runtime.status_kafka",
    "streams.stream": "streams.runtime.stream",
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
        home = importlib.import_module(self.home)
        if hasattr(home, "__path__") or not any(old.startswith(f"{spec.name}.") for old in MOVED):
            return home
        # An old package whose modules became one module: a package in name only, whose
        # attributes are the module's, so that its old submodules can still be imported.
        shim = types.ModuleType(spec.name, home.__doc__)
        shim.__path__ = []
        shim.__getattr__ = functools.partial(getattr, home)  # type: ignore[method-assign]
        return shim

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
