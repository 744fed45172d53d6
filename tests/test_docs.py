"""The generated reference pages match the code (docs/commands.md and docs/configuration.md), and the README's
commands run in the shell its install leaves."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from mhatrain.core import config

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def make_docs():
    spec = importlib.util.spec_from_file_location("make_docs", ROOT / "scripts" / "make_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_pages_are_what_the_script_writes(make_docs):
    for path, text in make_docs.pages().items():
        committed = path.read_text(encoding="utf-8") if path.is_file() else ""
        assert committed == text, f"{path.relative_to(ROOT)} is stale: run python scripts/make_docs.py"


def test_every_config_key_has_a_comment_saying_what_it_means(make_docs):
    comments = make_docs._key_comments(Path(config.__file__).read_text(encoding="utf-8"))
    for section in config.SECTIONS:
        cls = config._section_class(section)
        for f in dataclasses.fields(cls):
            assert comments.get((cls.__name__, f.name)), f"{section}.{f.name} has no comment in mhatrain/config.py"


def test_the_pages_name_every_command_and_every_key(make_docs):
    import typer

    from mhatrain.cli import app

    commands = make_docs.commands_markdown()
    for name in typer.main.get_command(app).commands:
        assert f"\n## mhatrain {name}\n" in commands
    configuration = make_docs.configuration_markdown()
    for section in config.SECTIONS:
        assert f"\n## {section}\n" in configuration
        for f in dataclasses.fields(config._section_class(section)):
            assert f"| `{f.name}` |" in configuration, f"{section}.{f.name}"


def test_check_reports_a_stale_page_and_writes_nothing(make_docs, tmp_path, monkeypatch, capsys):
    stale = tmp_path / "commands.md"
    stale.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(make_docs, "pages", lambda: {stale: "new\n"})
    monkeypatch.setattr(make_docs, "ROOT", tmp_path)
    assert make_docs.main(["--check"]) == 1
    assert "stale: commands.md" in capsys.readouterr().out and stale.read_text() == "old\n"
    assert make_docs.main([]) == 0 and stale.read_text() == "new\n"


def test_the_readmes_commands_run_in_the_shell_its_install_leaves():
    """The install builds .venv; a bare `mhatrain` in the quick start needs it activated first."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line.strip() for block in re.findall(r"```bash\n(.*?)```", readme, re.S) for line in block.splitlines()]
    install = next(i for i, line in enumerate(lines) if "python3 -m venv .venv" in line)
    bare = [i for i, line in enumerate(lines) if line.startswith("mhatrain ")]
    activate = [i for i, line in enumerate(lines) if re.match(r"(source|\.) \.venv/bin/activate\b", line)]
    assert bare, "the README runs no mhatrain command"
    assert activate and install < activate[0] < bare[0], "activate .venv before the first bare `mhatrain`"
