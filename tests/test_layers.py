"""The package's layers: every module imports only from its own layer and earlier ones (LAYERS in
mhatrain/__init__.py), and no import cycle exists, counting imports inside functions too.
scripts/import_graph.py reads the graph with ast; these tests run it on the package and on copies
with a planted fault, so a check that could not fail would show."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mhatrain"


def _import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


G = _import_graph()


def test_no_module_imports_from_a_later_layer():
    assert G.read_graph(PACKAGE).back_imports() == []


def test_no_import_cycle():
    assert G.cycles(G.read_graph(PACKAGE)) == []


def test_every_module_belongs_to_a_layer_and_every_layer_says_what_it_owns():
    graph = G.read_graph(PACKAGE)
    for node in graph.files:
        graph.layer(node)  # ValueError for a module outside LAYERS (a new top-level module, say)
    for layer in graph.layers:
        path = PACKAGE / layer / "__init__.py"
        if path.is_file():  # a layer is a subpackage, or one module (cli.py)
            assert ast.get_docstring(ast.parse(path.read_text())), f"{layer}/__init__.py: no docstring"
        else:
            assert (PACKAGE / f"{layer}.py").is_file(), layer


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "mhatrain"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _plant(path: Path, line: str) -> None:
    """Add an import inside a new function at the end of a module (imports in functions count too)."""
    path.write_text(path.read_text() + f"\n\ndef _planted():\n    {line}\n")


def test_a_planted_back_import_is_found(tmp_path, capsys):
    copy = _copy(tmp_path)
    _plant(copy / "core" / "config.py", "from ..study.grid import points")
    assert G.read_graph(copy).back_imports() == [("core.config", "study.grid.points", "function")]
    assert G.main([str(copy)]) == 1
    assert "core.config -> study.grid.points  (in a function)" in capsys.readouterr().out


def test_the_study_is_cut_into_rooms_in_their_order():
    graph = G.read_graph(PACKAGE)
    assert graph.sublayers == {"study": ("grid", "stats", "reports", "running")}
    rooms = {node.split(".")[1] for node in graph.files if node.startswith("study.")}
    assert rooms == {"grid", "stats", "reports", "running"}  # no module left in study/ itself
    for room in rooms:
        assert ast.get_docstring(ast.parse((PACKAGE / "study" / room / "__init__.py").read_text())), room


def test_a_planted_back_import_between_study_rooms_is_found(tmp_path, capsys):
    """The statistics may not import a report: study.stats comes before study.reports, although both are
    in the study layer."""
    copy = _copy(tmp_path)
    _plant(copy / "study" / "stats" / "significance.py", "from ..reports import markdown")
    assert G.read_graph(copy).back_imports() == [("study.stats.significance", "study.reports.markdown", "function")]
    assert G.main([str(copy)]) == 1
    assert "study.stats.significance -> study.reports.markdown  (in a function)" in capsys.readouterr().out


def test_a_module_outside_the_study_rooms_is_refused(tmp_path):
    copy = _copy(tmp_path)
    (copy / "study" / "loose.py").write_text('"""A module in no room."""\n')
    graph = G.read_graph(copy)
    with pytest.raises(ValueError):
        graph.layer("study.loose")


def test_no_two_modules_share_a_file_name():
    """A name says which module it is: a search for figures.py or report.py finds one file."""
    names = [p.name for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_a_planted_cycle_inside_one_layer_is_found(tmp_path):
    """data.tokenizer imports data.sources; planting the reverse closes a cycle within the data layer,
    which the layer order alone allows."""
    copy = _copy(tmp_path)
    _plant(copy / "data" / "sources.py", "from .tokenizer import Tokenizer")
    graph = G.read_graph(copy)
    assert graph.back_imports() == []
    assert G.cycles(graph) == [["data.sources", "data.tokenizer"]]
    assert G.main([str(copy)]) == 1


def test_the_package_as_it_is_passes_the_script():
    assert G.main([str(PACKAGE)]) == 0


def test_the_model_imports_nothing_from_the_data_layer():
    """The model is given its pad id (build_model's pad_id) and the token ids of a batch; it does not
    reach into data for PAD or Batch, so it can be read, tested and reused without the data layer."""
    graph = G.read_graph(PACKAGE)
    assert [(a, b) for a, b in graph.edges if a.startswith("model.") and b.startswith("data.")] == []
