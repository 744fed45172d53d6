"""The package's import graph: edges, cycles and the largest modules, read with `ast` (nothing is imported).

    python scripts/import_graph.py [PACKAGE_DIR]     (default: mhatrain next to this script's folder)

Counts every relative import of a sibling module, at the top of a module and inside functions alike
(`from .x import y`, `from . import x`, `from .x.y import z`), so that an import moved into a
function body to break a cycle still shows as an edge. A subpackage (a folder with __init__.py,
such as bench/) counts as one node. Prints the number of edges, every cycle (a strongly connected
component of more than one module, with the edges inside it and whether they are top-level or
in a function) and the line counts of the largest modules.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def modules(package: Path) -> dict[str, list[Path]]:
    """Node name → its source files: each top-level module, and each subpackage as one node."""
    nodes = {path.stem: [path] for path in sorted(package.glob("*.py")) if path.stem != "__main__"}
    for sub in sorted(p for p in package.iterdir() if (p / "__init__.py").is_file()):
        nodes[sub.name] = sorted(sub.rglob("*.py"))
    nodes.pop("__init__", None)
    return nodes


def _target(node: ast.ImportFrom, owner: str, in_subpackage: bool, names: set[str]) -> list[str]:
    """The sibling nodes an ImportFrom of `owner` refers to."""
    level = node.level - (1 if in_subpackage else 0)  # `from ..x` inside bench/ is `from .x` of the package
    if level != 1:
        return [owner] if in_subpackage and node.level == 1 else []  # inside the subpackage itself
    if node.module:
        head = node.module.split(".")[0]
        return [head] if head in names else []
    return [alias.name for alias in node.names if alias.name in names]  # from . import x


def edges(package: Path) -> dict[tuple[str, str], str]:
    """(importer, imported) → "top" or "function" (top if any import of the pair is at module level)."""
    nodes = modules(package)
    names = set(nodes)
    found: dict[tuple[str, str], str] = {}
    for owner, files in nodes.items():
        for path in files:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            in_function = {
                id(inner)
                for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                for inner in ast.walk(node)
            }
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom):
                    continue
                for target in _target(node, owner, path.parent != package, names):
                    if target == owner:
                        continue
                    where = "function" if id(node) in in_function else "top"
                    if found.get((owner, target)) != "top":
                        found[owner, target] = where
    return found


def cycles(nodes: list[str], graph: dict[tuple[str, str], str]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm)."""
    succ = {n: sorted(b for a, b in graph if a == n) for n in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in succ[v]:
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

    sys.setrecursionlimit(max(1000, 10 * len(nodes)))
    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(result)


def main(argv: list[str]) -> int:
    package = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "mhatrain"
    if not (package / "__init__.py").is_file():
        print(f"{package}: not a package directory (no __init__.py)", file=sys.stderr)
        return 2
    nodes = modules(package)
    graph = edges(package)
    lazy = sum(where == "function" for where in graph.values())
    print(f"{package}: {len(nodes)} modules, {len(graph)} import edges ({lazy} only inside functions)")
    found = cycles(sorted(nodes), graph)
    print(f"cycles (strongly connected components of more than one module): {len(found)}")
    for component in found:
        inside = sorted((a, b, w) for (a, b), w in graph.items() if a in component and b in component)
        print(f"  {{{', '.join(component)}}}")
        for a, b, where in inside:
            print(f"    {a} -> {b}{'' if where == 'top' else '  (in a function)'}")
    sizes = sorted(
        ((sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files), name) for name, files in nodes.items()),
        reverse=True,
    )
    print("largest modules (lines):")
    for lines, name in sizes[:10]:
        print(f"  {lines:5d}  {name}{'/' if len(nodes[name]) > 1 or nodes[name][0].name == '__init__.py' else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
