"""The examples in the observability modules' docstrings run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", [
    "agents.latency",
    "streams.observability.snapshot",
    "streams.observability.metrics",
    "streams.observability.logs",
    "streams.cli.demo.summary",
    "streams.cli.demo.traffic",
])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
