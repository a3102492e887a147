"""The project's modules import each other without a loop.

Every ``import`` counts, at module level or inside a function: an import deferred into
a function to dodge a circle is still a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "common", "producer", "processor", "dashboard", "infra", "loadtest", "demo", "bridge", "notifier",
)  # fmt: skip
# Each service runs from its own extra in its own container: it imports only itself and common.
SERVICES = ("producer", "processor", "dashboard", "bridge", "notifier")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(p): p
        for package in PACKAGES
        for p in sorted((ROOT / package).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (``from a import b`` is ``a.b`` if that is one)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif node.module in known:
                    found.add(node.module)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, or with a self-import."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_deferred_circle_and_passes_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_imports_of_counts_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import os\n\ndef f():\n    from producer.run import run\n")
    known = {"producer", "producer.run", "producer.workers"}
    assert imports_of(source, known) == {"producer.run"}


def test_the_project_has_no_import_loop():
    modules = project_modules()
    assert {"producer.__main__", "producer.workers", "processor.pipeline"} <= set(modules)
    known = set(modules)
    graph = {name: imports_of(path, known) - {name} for name, path in modules.items()}
    assert cycles(graph) == []


def test_a_service_imports_only_itself_and_common():
    modules = project_modules()
    known = set(modules)
    crossing = {
        name: sorted(m for m in imports_of(path, known) if m.split(".")[0] not in (top, "common"))
        for name, path in modules.items()
        if (top := name.split(".")[0]) in SERVICES
    }
    assert {name: found for name, found in crossing.items() if found} == {}
