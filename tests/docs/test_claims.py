"""Claims docs/architecture.md makes about the code, checked on the source: the agents call
what a protocol declares instead of probing for attributes, and every exception class of the
packages is a HeadraceError."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

from streams.core.errors import HeadraceError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streams", "agents", "cache", "balancer", "spark_sink")
PAGE = ROOT / "docs" / "architecture.md"
# What the agents may look up by name: hooks a user's consumer class may or may not define
# (an optional on_timer, on_activate, a declared event_time or handoff), and attributes of
# values the user's code returned. None is a member of a headrace protocol.
USER_HOOKS = {
    "on_timer",
    "on_activate",
    "on_deactivate",
    "on_next",
    "event_time",
    "handoff",
    "stream",
    "close",
    "token",
    "value",
    "__headrace_consumer_name__",
    "__qualname__",
    "__await__",
}


def protocol_members() -> dict[str, str]:
    """Every attribute and method a Protocol of the packages declares, with its protocol."""
    members: dict[str, str] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and any(ast.unparse(b).startswith("Protocol") for b in node.bases):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                            members[item.name] = node.name
                        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                            members[item.target.id] = node.name
    return members


def probes(source: str) -> list[tuple[int, str]]:
    """The ``getattr``/``hasattr`` calls of ``source`` that name an attribute: (line, name)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                found.append((node.lineno, node.args[1].value))
    return found


def test_the_agents_probe_no_protocol_object_for_an_attribute() -> None:
    members = protocol_members()
    assert {"gathers_containers", "positions", "queue_message_batches"} <= set(members)
    probed = [
        f"{path.relative_to(ROOT)}:{line}: {name} ({members[name]})"
        for path in sorted((ROOT / "agents").rglob("*.py"))
        for line, name in probes(path.read_text())
        if name in members and name not in USER_HOOKS
    ]
    assert probed == []
    unknown = {name for path in (ROOT / "agents").rglob("*.py") for _, name in probes(path.read_text())} - USER_HOOKS
    assert unknown == set()  # a new probe is either a user hook (listed above) or a declaration to make
    assert "finds no `getattr` or `hasattr` on a protocol object in `agents/`" in " ".join(PAGE.read_text().split())


def test_the_probe_finder_sees_a_probe_of_a_declared_attribute() -> None:
    # What the test above rests on.
    assert probes("x = getattr(receiver, 'gathers_containers', False)\nhasattr(m, 'positions')") == [
        (1, "gathers_containers"),
        (2, "positions"),
    ]


def exception_classes() -> list[type[BaseException]]:
    found = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            if info.name.endswith("__main__"):  # runs the CLI on import
                continue
            loaded = importlib.import_module(info.name)
            found += [
                cls
                for cls in vars(loaded).values()
                if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == loaded.__name__
            ]
    return found


def test_every_exception_class_of_the_packages_is_a_headrace_error() -> None:
    classes = exception_classes()
    assert len(classes) > 20  # the walk found the packages' errors
    assert sorted(f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, HeadraceError)) == []
    assert "every exception class of the packages derives from `HeadraceError`" in " ".join(PAGE.read_text().split())
