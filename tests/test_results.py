"""What results/ holds beside the studies' data: the shell scripts that drove them, which must still parse,
and no Python (code belongs in the package or in scripts/, where the tests and the layer check see it)."""

from __future__ import annotations

import subprocess

import pytest

from .conftest import ROOT

RESULTS = ROOT / "results"
SHELL_SCRIPTS = sorted(RESULTS.rglob("*.sh"))


def test_results_holds_shell_scripts_to_check():
    assert len(SHELL_SCRIPTS) >= 10  # the glob found the studies' scripts/ folders


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_study_script_parses(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_results_holds_no_python():
    assert [str(p.relative_to(ROOT)) for p in RESULTS.rglob("*.py")] == []
