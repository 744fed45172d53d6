"""The package's import graph, read with `ast` (nothing is imported): edges, layer order, cycles, sizes.

    python scripts/import_graph.py [PACKAGE_DIR]     (default: mhatrain next to this script's folder)

Every module is a node, named by its dotted path inside the package ("core.config", "cli"). An edge is
any import of another module of the package, at the top of a module and inside functions alike
(`from ..core.config import X`, `from . import search`, `import mhatrain.study.grid.points`), so an import
moved into a function body to hide a cycle still shows. Each node's layer is its subpackage's place in
the package's LAYERS (mhatrain/__init__.py, read from its text); a module may import from its own layer
and earlier ones only. A layer whose __init__.py has a LAYERS of its own is cut into rooms in that order
(study: grid → stats → reports → running), and the same rule holds between its rooms. Prints the
counts, the modules per subpackage, every import from a later layer, every cycle (a strongly connected
component of more than one module), the longest import chain and the largest modules and functions. Exits 1 when there is a back-import or a cycle (tests/test_layers.py runs it on the package).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT_MODULES = ("__init__", "__main__")  # the package's own files: outside the layer order


@dataclass
class Graph:
    package: Path
    layers: tuple[str, ...]
    files: dict[str, Path]  # node -> its file
    edges: dict[tuple[str, str], str] = field(default_factory=dict)  # (importer, imported) -> "top" | "function"

    sublayers: dict[str, tuple[str, ...]] = field(default_factory=dict)  # layer -> its own LAYERS, if any

    def layer(self, node: str) -> tuple[int, int]:
        """The place of a node in the layer order: its layer's in LAYERS (the package's root files come
        first), then, in a layer cut into rooms of its own (a LAYERS in its __init__.py), its room's."""
        head, *rest = node.split(".")
        if head in ROOT_MODULES:
            return (-1, 0) if head == "__init__" else (len(self.layers), 0)
        rooms = self.sublayers.get(head)
        if not rooms:
            return self.layers.index(head), 0
        if not rest:
            return self.layers.index(head), -1  # the layer's __init__: its docstring and LAYERS
        return self.layers.index(head), rooms.index(rest[0])  # ValueError for a module outside the rooms

    def back_imports(self) -> list[tuple[str, str, str]]:
        """(importer, imported, where) for every import of a later layer."""
        return sorted((a, b, w) for (a, b), w in self.edges.items() if self.layer(b) > self.layer(a))

    def successors(self, node: str) -> list[str]:
        return sorted(b for a, b in self.edges if a == node)


def read_layers(package: Path) -> tuple[str, ...]:
    """LAYERS of the package's __init__.py, as written there (a tuple of names)."""
    layers = _layers_of(package / "__init__.py")
    if layers is None:
        raise SystemExit(f"{package / '__init__.py'}: no LAYERS")
    return layers


def read_sublayers(package: Path, layers: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The layers cut into rooms: layer -> the LAYERS of its own __init__.py (study: grid → stats → ...)."""
    found = {layer: _layers_of(package / layer / "__init__.py") for layer in layers}
    return {layer: rooms for layer, rooms in found.items() if rooms}


def _layers_of(init: Path) -> tuple[str, ...] | None:
    if not init.is_file():
        return None
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LAYERS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return None


def node_files(package: Path) -> dict[str, Path]:
    """Node name -> file, for every module of the package (a subpackage's __init__ is the subpackage's node)."""
    files = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if len(parts) > 1 and parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    return files


def _resolve(base: list[str], names: list[str], files: dict[str, Path]) -> list[str]:
    """The nodes `from <base> import <names>` refers to: base itself, or modules named among names."""
    dotted = ".".join(base)
    targets = [f"{dotted}.{n}" if dotted else n for n in names]
    modules = [t for t in targets if t in files and t != "__init__"]
    if modules:
        return modules
    return [dotted] if dotted in files else []


def read_graph(package: Path) -> Graph:
    layers = read_layers(package)
    graph = Graph(package, layers, node_files(package), sublayers=read_sublayers(package, layers))
    for owner, path in graph.files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        in_function = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for inner in ast.walk(node)
        }
        here = list(path.relative_to(package).parts[:-1])  # the package the file is in
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level:
                base = here[: len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                targets = _resolve(base, [a.name for a in node.names], graph.files)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package.name:
                base = node.module.split(".")[1:]
                targets = _resolve(base, [a.name for a in node.names], graph.files)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == package.name and ".".join(parts[1:]) in graph.files:
                        targets.append(".".join(parts[1:]))
            for target in targets:
                if target == owner or target == "__init__":
                    continue
                where = "function" if id(node) in in_function else "top"
                if graph.edges.get((owner, target)) != "top":
                    graph.edges[owner, target] = where
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.successors(v):
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
            if len(component) > 1:
                result.append(sorted(component))

    sys.setrecursionlimit(max(1000, 10 * len(graph.files)))
    for v in sorted(graph.files):
        if v not in index:
            visit(v)
    return sorted(result)


def longest_chain(graph: Graph) -> list[str]:
    """The longest import path (in modules), when the graph has no cycle."""
    best: dict[str, list[str]] = {}

    def chain(v: str) -> list[str]:
        if v not in best:
            tails = [chain(w) for w in graph.successors(v)]
            best[v] = [v] + max(tails, key=len, default=[])
        return best[v]

    return max((chain(v) for v in sorted(graph.files)), key=len, default=[])


def largest_functions(graph: Graph, n: int = 5) -> list[tuple[int, str]]:
    found = []
    for name, path in graph.files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    return sorted(found, reverse=True)[:n]


def _layer_text(graph: Graph, layer: str) -> str:
    rooms = graph.sublayers.get(layer)
    return f"{layer} ({' → '.join(rooms)})" if rooms else layer


def modules_per_subpackage(graph: Graph) -> dict[str, int]:
    """How many modules each folder of the package holds (a subpackage's __init__ counts in it)."""
    counts: dict[str, int] = {}
    for path in graph.files.values():
        place = str(path.parent.relative_to(graph.package.parent))
        counts[place] = counts.get(place, 0) + 1
    return dict(sorted(counts.items()))


def main(argv: list[str]) -> int:
    package = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "mhatrain"
    if not (package / "__init__.py").is_file():
        print(f"{package}: not a package directory (no __init__.py)", file=sys.stderr)
        return 2
    graph = read_graph(package)
    lazy = sum(where == "function" for where in graph.edges.values())
    print(f"{package}: {len(graph.files)} modules, {len(graph.edges)} import edges ({lazy} only inside functions)")
    print(f"layers, first to last: {' → '.join(_layer_text(graph, layer) for layer in graph.layers)}")
    print("modules per subpackage:")
    for place, count in modules_per_subpackage(graph).items():
        print(f"  {count:3d}  {place}")
    back = graph.back_imports()
    print(f"imports from a later layer: {len(back)}")
    for a, b, where in back:
        print(f"  {a} -> {b}{'' if where == 'top' else '  (in a function)'}")
    found = cycles(graph)
    print(f"cycles (strongly connected components of more than one module): {len(found)}")
    for component in found:
        inside = sorted((a, b, w) for (a, b), w in graph.edges.items() if a in component and b in component)
        print(f"  {{{', '.join(component)}}}")
        for a, b, where in inside:
            print(f"    {a} -> {b}{'' if where == 'top' else '  (in a function)'}")
    if not found:
        chain = longest_chain(graph)
        print(f"longest import chain ({len(chain)} modules): {' → '.join(chain)}")
    sizes = sorted(
        ((len(p.read_text(encoding="utf-8").splitlines()), name) for name, p in graph.files.items()), reverse=True
    )
    print("largest modules (lines):")
    for lines, name in sizes[:8]:
        print(f"  {lines:5d}  {name}")
    print("largest functions (lines):")
    for lines, name in largest_functions(graph):
        print(f"  {lines:5d}  {name}")
    return 1 if back or found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
