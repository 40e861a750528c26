"""The layers of docs/architecture.md, checked on the source.

The layers themselves are import-linter contracts in pyproject.toml (``make lint`` runs them, and
so does the first test here). What import-linter cannot say is checked by walking the imports:
no two files import each other (directly or around a loop), and no import hides inside a
function or behind ``TYPE_CHECKING`` to dodge either rule. Two deferrals are not dodges: a package ``__init__``
that resolves its public names lazily (a module ``__getattr__``, as anyio's do), and an import
deferred to the call that needs a heavy library (pyspark, matplotlib, aiokafka, pyarrow), so
that a worker loads no Spark (and no Arrow until something hands off) and a Spark executor no
Kafka client.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streams", "agents", "cache", "balancer", "spark_sink")
HEAVY = ("pyspark", "matplotlib", "aiokafka", "pyarrow")


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    nested: bool  # inside a function
    guarded: bool  # under TYPE_CHECKING


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[Import]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def targets(node: ast.Import | ast.ImportFrom) -> Iterator[str]:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
            return
        base = node.module or ""
        if node.level:
            head = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*head, base] if base else head)
        for alias in node.names:
            yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base

    def walk(node: ast.AST, nested: bool, guarded: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from walk(child, nested, True)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in targets(child):
                    if target.split(".")[0] in HEAVY:
                        yield Import(name, target.split(".")[0], child.lineno, nested, guarded)
                        continue
                    while target and target not in known:
                        target = target.rpartition(".")[0]
                    if target and target != name:
                        yield Import(name, target, child.lineno, nested, guarded)
            inner = nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from walk(child, inner, guarded)

    yield from walk(ast.parse(path.read_text()), False, False)


def all_imports() -> list[Import]:
    known = modules()
    return [imp for name, path in known.items() for imp in imports_of(name, path, known)]


def ours(imports: list[Import]) -> list[Import]:
    return [i for i in imports if i.target not in HEAVY]


def loads_heavy(imports: list[Import]) -> set[str]:
    """Our modules whose import (at module level, transitively) loads a heavy library."""
    heavy = {i.source for i in imports if i.target in HEAVY and not i.nested and not i.guarded}
    grew = True
    while grew:
        more = {i.source for i in imports if i.target in heavy and not i.nested and not i.guarded}
        grew = not more <= heavy
        heavy |= more
    return heavy


def lazy_root(path: Path) -> bool:
    return path.name == "__init__.py" and "def __getattr__" in path.read_text()


def test_the_layer_contracts_are_kept():
    # The contracts live in pyproject.toml; a broken one names the import that climbs.
    lint = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout[-3000:]
    assert "Contracts: 5 kept, 0 broken." in lint.stdout


def test_no_import_hides_in_a_function_or_behind_type_checking():
    known = modules()
    imports = all_imports()
    deferrable = loads_heavy(imports) | set(HEAVY)
    hidden = [
        f"{i.source}:{i.line} imports {i.target} {'in a function' if i.nested else 'under TYPE_CHECKING'}"
        for i in imports
        if (i.nested or i.guarded) and not lazy_root(known[i.source]) and i.target not in deferrable
    ]
    assert hidden == []


def test_no_two_files_import_each_other():
    graph: dict[str, set[str]] = {}
    for i in ours(all_imports()):
        if not i.guarded:
            graph.setdefault(i.source, set()).add(i.target)
    cycles = [sorted(c) for c in strongly_connected(graph) if len(c) > 1]
    assert cycles == []


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (the graph is a few hundred files)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in list(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(component)
    return found


def test_the_cycle_finder_finds_a_loop_of_three():
    # The check above is only as good as this: a loop through three files is one component.
    loops = strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert sorted(sorted(c) for c in loops if len(c) > 1) == [["a", "b", "c"]]


def test_the_architecture_page_names_every_module_and_nothing_gone():
    page = (ROOT / "docs" / "architecture.md").read_text()
    files = {str(path.relative_to(ROOT)) for path in modules().values() if path.name != "__init__.py"}
    named = set(re.findall(r"`((?:streams|agents|cache|balancer|spark_sink)/[\w/]+\.py)`", page))
    assert sorted(files - named) == []  # every module has its line
    assert sorted(named - files) == []  # and the page names no module that is gone


MAX_CLASS_LINES = 400  # docs/architecture.md: "a class is one job (none over 400 lines)"


def class_lengths() -> Iterator[tuple[str, int]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    assert node.end_lineno is not None
                    yield f"{path.relative_to(ROOT)}:{node.name}", node.end_lineno - node.lineno + 1


def test_no_class_is_over_400_lines() -> None:
    lengths = dict(class_lengths())
    assert len(lengths) > 100  # the walk found the project's classes
    too_long = {name: n for name, n in lengths.items() if n > MAX_CLASS_LINES}
    assert too_long == {}
    assert f"none over {MAX_CLASS_LINES} lines" in (ROOT / "docs" / "architecture.md").read_text()


def test_a_worker_on_the_embedded_store_loads_no_kafka_client(tmp_path: Path) -> None:
    # Every CLI command and an embedded worker start without aiokafka (a fifth of a second a
    # process): only a Kafka backend's user imports it, when the provider is made.
    script = f"""
import sys
import streams.cli.worker, streams.cli.status, streams.cli.state, streams.cli.produce, streams.cli.dlq
from streams import StreamProvider
provider = StreamProvider.embedded({str(tmp_path)!r})
assert "aiokafka" not in sys.modules, "loaded aiokafka"
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert run.stdout.strip() == "ok", run.stderr[-2000:]
