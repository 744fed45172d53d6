#!/usr/bin/env bash
# The installed package, not the checkout: build a wheel, install it into an empty folder and check,
# from outside the checkout, that it has every module of the source tree and the attention page's
# templates (package data, mhatrain/analysis/templates), and that the page and the CLI work from it.
#     bash scripts/check_wheel.sh [PYTHON]      (default .venv/bin/python: its torch and the rest are used)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${1:-.venv/bin/python}"
PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"  # absolute; a venv's link kept (realpath would leave the venv)
SOURCE=$(pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/src"  # a copy of what a build reads: no build/ or egg-info left by an earlier build
cp -r pyproject.toml README.md mhatrain "$WORK/src/"
find "$WORK/src" -name __pycache__ -prune -exec rm -rf {} +
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$WORK/dist" "$WORK/src"
"$PYTHON" -m pip install --quiet --no-deps --target "$WORK/site" "$WORK"/dist/mhatrain-*.whl
cd "$WORK"  # not the checkout: `import mhatrain` must find the wheel's copy
PYTHONPATH="$WORK/site" "$PYTHON" - "$SOURCE" "$WORK/site" <<'PY'
import sys
from pathlib import Path

import numpy as np

import mhatrain
from mhatrain.analysis.page import AttentionView, render_page

source, site = Path(sys.argv[1]) / "mhatrain", Path(sys.argv[2]) / "mhatrain"
assert Path(mhatrain.__file__).resolve().is_relative_to(site.resolve()), f"imported {mhatrain.__file__}, not the wheel's"
wanted = {p.relative_to(source) for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
have = {p.relative_to(site) for p in site.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
missing = sorted(str(p) for p in wanted - have)
assert not missing, f"the wheel lacks {', '.join(missing)}"
view = AttentionView("cross", "cross", "target", "source", ["a"], ["b"], [1], np.ones((1, 2, 1, 1)))
page = render_page("b", "a", [view])
assert "/*{{" not in page and "{{data}}" not in page and "<script>" in page, "templates not filled in"
print(f"wheel: {len(have)} files, every one of the source tree's {len(wanted)}; the attention page renders")
PY
PYTHONPATH="$WORK/site" "$PYTHON" -m mhatrain --help >/dev/null
echo "wheel: mhatrain --help runs from the installed package"
