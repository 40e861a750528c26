"""Scraping a metrics endpoint over loopback, and the samples it returned."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int, host: str = "127.0.0.1") -> Samples:
    """``GET http://host:port/metrics``, as ``{(sample name, labels): value}`` (blocking)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over every sample whose labels include ``labels``."""
    wanted = labels.items()
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= dict(have).items())


def by_label(samples: Samples, name: str, label: str) -> Mapping[str, float]:
    return {dict(have)[label]: v for (n, have), v in samples.items() if n == name}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
