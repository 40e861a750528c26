"""Every docstring example in the packages runs as written."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ["streams", "agents", "cache", "balancer", "spark_sink"]


def modules_with_examples() -> list[str]:
    names = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        names.append(name)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, f"{name}.")]
    finder = doctest.DocTestFinder()
    return [
        name
        for name in names
        if not name.endswith(".__main__")  # running it is the command itself
        and any(test.examples for test in finder.find(importlib.import_module(name)))
    ]


@pytest.mark.parametrize("module", modules_with_examples())
def test_docstring_examples_hold(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
