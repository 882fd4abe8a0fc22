"""The source tree's layers: every import (at module level, under TYPE_CHECKING or inside a
function) runs down the layers or stays within one, and no module imports itself through
others. The layers, bottom to top, are what `README.md`'s architecture section describes."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src" / "lockgate"

# Bottom to top; a module may import from its own layer or any layer below.
LAYERS: tuple[frozenset[str], ...] = (
    # values, bounds and the parts every layer reads
    frozenset(
        {
            "conversation",
            "errors",
            "events",
            "jsonlimits",
            "sse",
            "eventstream",
            "credentials",
            "interrupts",
            "files",
            "defaults",
            "version",
        }
    ),
    # the seams and the rules on them
    frozenset(
        {
            "transport",
            "codec",
            "http",
            "sdk",
            "retry",
            "gate",
            "grammar",
            "schemas",
            "tools",
            "gateway",
            "telemetry",  # the tracer seam the proxy and the client report to
        }
    ),
    # the agent: the client, the loop and the repair fixture, the display
    frozenset({"client", "loop", "context", "fixture", "session", "display"}),
    # the lab's vocabulary, below the providers that render it
    frozenset({"scripted"}),
    frozenset({"providers"}),
    # recorded traffic: the cassette format, recording, faults and importers
    frozenset({"cassette"}),
    # the gate on the wire, on every provider's gateway
    frozenset({"proxy"}),
    # the lab runs scenarios through the providers
    frozenset({"lab"}),
    frozenset({"cli", "__main__", "pytest_plugin"}),
    frozenset({"lockgate"}),  # the package's public surface (imported on first use)
)


def _module(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The lockgate modules `path` imports, anywhere in the file."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and node.module.startswith("lockgate"):
                target = node.module
            else:
                continue
            # `from . import process` imports the module `process`, not its package; a
            # name that is no module (`from .events import Usage`) imports `target`.
            submodules = {f"{target}.{alias.name}" for alias in node.names}
            modules = {name for name in submodules if name in MODULES}
            found.update(modules)
            if len(modules) < len(submodules):
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("lockgate"))
    return {name for name in found if _known(name)} - {module}


MODULES = {_module(path): path for path in SOURCE.rglob("*.py")}


def _known(name: str) -> bool:
    return name in MODULES


def _layer(module: str) -> int:
    parts = module.split(".")
    key = "lockgate" if len(parts) == 1 else parts[1]
    for number, layer in enumerate(LAYERS):
        if key in layer:
            return number
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and the README)")


GRAPH = {module: _imports(path) for module, path in MODULES.items()}


def test_every_module_has_a_layer() -> None:
    for module in GRAPH:
        _layer(module)


def test_no_import_runs_back_up_the_layers() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if _layer(target) > _layer(module)
    )
    assert upward == []


def test_no_module_imports_itself_through_others() -> None:
    """No cycle in the import graph (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    assert cycles == []


def test_the_graph_is_read_at_all() -> None:
    # The checks above pass vacuously on an empty graph: this one cannot.
    assert len(GRAPH) > 40
    assert "lockgate.codec" in GRAPH["lockgate.client"]
    assert "lockgate.scripted.renderer" in GRAPH["lockgate.providers.chat.render"]
