"""The import graph of a Python package: rooms, layers, arrows and cycles.

Run from the repository root::

    python tools/import_graph.py            # table for sciml/
    python tools/import_graph.py --json OUT # also the graph as JSON

A *room* is a folder of the package (a subpackage) for modules below the root and
one room per module at the root. An *arrow* is an import from one room into another
(top-level and function-local imports alike: both tie the two together). A *cycle*
is a set of modules that import each other, directly or through others. *Layers*
number the rooms from the bottom: a room sits one layer above the highest room it
imports (rooms in a cycle share one layer).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ImportGraph:
    """Modules of a package and the imports between them."""

    package: str
    imports: dict[str, set[str]] = field(default_factory=dict)
    packages: set[str] = field(default_factory=set)

    def room(self, module: str) -> str:
        """The room of ``module``: its subpackage, or itself at the package root."""
        parent = module.rpartition(".")[0]
        if module in self.packages:
            return module
        return parent if parent != self.package else module

    def room_arrows(self) -> set[tuple[str, str]]:
        """Imports between different rooms, as (importer's room, imported room)."""
        return {
            (self.room(a), self.room(b))
            for a, targets in self.imports.items()
            for b in targets
            if self.room(a) != self.room(b)
        }


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at ``path`` inside the package folder ``root``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``tree`` imports, relative imports resolved."""
    found: set[str] = set()
    base = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            anchor = base
            for _ in range(max(node.level - 1, 0)):
                anchor = anchor.rpartition(".")[0]
            stem = node.module or ""
            prefix = f"{anchor}.{stem}".strip(".") if node.level else stem
            # "from pkg import mod" imports the module pkg.mod when it is one, else a name of pkg
            names = [
                f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in known else prefix
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def read_graph(root: Path) -> ImportGraph:
    """Parse every module under the package folder ``root``."""
    files = sorted(root.rglob("*.py"))
    names = {module_name(path, root): path for path in files}
    graph = ImportGraph(package=root.name)
    graph.packages = {name for name, path in names.items() if path.name == "__init__.py"}
    for name, path in names.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph.imports[name] = imported_modules(tree, name, name in graph.packages, set(names))
    return graph


def strongly_connected(nodes: Iterable[str], edges: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, each sorted, in no particular order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    sys.setrecursionlimit(10_000)

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
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
            components.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return components


def module_cycles(graph: ImportGraph) -> list[list[str]]:
    """Cycles among modules; a package importing its own submodules is not one."""
    edges = {
        a: {b for b in targets if not (a in graph.packages and b.startswith(a + "."))}
        for a, targets in graph.imports.items()
    }
    return [c for c in strongly_connected(edges, edges) if len(c) > 1]


def room_edges(graph: ImportGraph) -> dict[str, set[str]]:
    """Each room and the rooms it imports."""
    edges: dict[str, set[str]] = {graph.room(m): set() for m in graph.imports}
    for a, b in graph.room_arrows():
        edges[a].add(b)
    return edges


def room_cycles(graph: ImportGraph) -> list[list[str]]:
    """Sets of rooms that import each other, directly or through others."""
    edges = room_edges(graph)
    return [c for c in strongly_connected(edges, edges) if len(c) > 1]


def room_layers(graph: ImportGraph) -> dict[str, int]:
    """Each room's layer: 0 for rooms importing no other room, else one above its highest."""
    edges = room_edges(graph)
    rooms = set(edges)
    components = strongly_connected(rooms, edges)
    component_of = {room: i for i, members in enumerate(components) for room in members}
    layer: dict[int, int] = {}

    def height(i: int) -> int:
        if i not in layer:
            layer[i] = -1  # guards the recursion; components form a DAG
            below = {component_of[t] for r in components[i] for t in edges[r]} - {i}
            layer[i] = 1 + max((height(j) for j in below), default=-1)
        return layer[i]

    return {room: height(component_of[room]) for room in rooms}


def summary(graph: ImportGraph) -> dict[str, object]:
    """Rooms, layers, arrows and cycles, as numbers and lists."""
    layers = room_layers(graph)
    arrows = sorted(graph.room_arrows())
    return {
        "modules": len(graph.imports),
        "rooms": len(layers),
        "layers": 1 + max(layers.values(), default=-1),
        "room_arrows": len(arrows),
        "module_cycles": module_cycles(graph),
        "room_layers": dict(sorted(layers.items(), key=lambda item: (item[1], item[0]))),
        "arrows": [list(arrow) for arrow in arrows],
        "room_cycles": room_cycles(graph),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the import graph's figures; exit 1 when a module cycle exists."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", default="sciml", help="package folder")
    parser.add_argument("--json", type=Path, help="write the whole graph here as JSON")
    args = parser.parse_args(argv)
    root = Path(args.package).resolve()
    if not (root / "__init__.py").is_file():
        parser.error(f"{args.package} is not a package folder (no __init__.py)")
    figures = summary(read_graph(root))
    print(
        f"{figures['modules']} modules in {figures['rooms']} rooms on {figures['layers']} "
        f"layers, {figures['room_arrows']} arrows between rooms, "
        f"{len(figures['module_cycles'])} module cycles, "
        f"{len(figures['room_cycles'])} room cycles"
    )
    for layer in range(int(figures["layers"])):  # type: ignore[call-overload]
        rooms = [r for r, n in figures["room_layers"].items() if n == layer]  # type: ignore[attr-defined]
        print(f"  layer {layer}: {', '.join(rooms)}")
    for cycle in figures["module_cycles"]:  # type: ignore[attr-defined]
        print("  module cycle: " + " <-> ".join(cycle))
    for cycle in figures["room_cycles"]:  # type: ignore[attr-defined]
        print("  room cycle: " + " <-> ".join(cycle))
    if args.json:
        tmp = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp.write_text(json.dumps(figures, indent=1) + "\n")
        tmp.replace(args.json)
    return 1 if figures["module_cycles"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
