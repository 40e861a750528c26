"""``streams.abc`` names every protocol an extension author implements: each public protocol
of a package's ``protocols.py`` is there, and each name there is a protocol (or the one base
class that gives an adapter's declared capabilities their defaults)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Protocol

import streams.abc

ROOT = Path(__file__).resolve().parents[2]
INTERNAL = {"agents.context.AgentContext"}  # what the provider gives its agents: nobody else implements it
BASES = {"ContainerQueueAdapter", "ReceiverDefaults"}  # classes to subclass: the declared capabilities' defaults


def _is_protocol(obj: object) -> bool:
    return inspect.isclass(obj) and bool(getattr(obj, "_is_protocol", False)) and obj is not Protocol


def test_every_public_protocol_of_a_protocols_module_is_in_streams_abc():
    missing = []
    for path in sorted(ROOT.glob("*/**/protocols.py")):
        if path.parts[len(ROOT.parts)] not in ("streams", "agents", "cache", "balancer", "spark_sink"):
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if _is_protocol(obj) and obj.__module__ == name and not attr.startswith("_"):
                if getattr(streams.abc, attr, None) is not obj:
                    missing.append(f"{name}.{attr}")
    assert sorted(set(missing) - INTERNAL) == []


def test_each_name_in_streams_abc_is_a_protocol():
    assert [n for n in streams.abc.__all__ if not _is_protocol(getattr(streams.abc, n))] == sorted(BASES)
    assert sorted(streams.abc.__all__) == streams.abc.__all__
