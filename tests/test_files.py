"""Atomic writes: a failed write leaves the previous file as it was and says what went wrong."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from mhatrain.core.errors import MhatrainError
from mhatrain.core.files import atomic_write_json, atomic_write_text

from .conftest import ROOT, FullDisk, assert_clean_error


def test_full_disk_keeps_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    atomic_write_json(target, {"bleu": 1.0})

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(MhatrainError, match=r"cannot write .*report\.json: No space left on device"):
        atomic_write_json(target, {"bleu": 2.0})
    assert target.read_text() == '{\n  "bleu": 1.0\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_unwritable_location_is_a_clear_error_that_names_the_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(MhatrainError) as caught:
        atomic_write_text(blocker / "sub" / "out.txt", "data")
    assert str(caught.value) == (
        f"cannot write {blocker}/sub/out.txt: cannot create a file in {blocker}/sub (Not a directory)"
    )


def test_curves_into_a_directory_that_takes_no_files_names_the_file():
    """`curves --out /proc/c.png` said only "cannot write to /proc"."""
    from .conftest import run_cli

    result = run_cli("curves", str(ROOT / "results" / "ablate-multi30k" / "h08-seed1"), "--out", "/proc/c.png")
    assert_clean_error(result, "cannot write /proc/c.png: cannot create a file in /proc (")


def test_cli_refuses_an_output_directory_it_cannot_create(tmp_path):
    from .conftest import run_cli, train_argv

    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run_cli(*train_argv(blocker / "run"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: cannot create run directory")
    assert blocker.read_text() == "x"


def test_a_full_disk_during_torch_save_is_a_clear_error(tmp_path):
    # torch.save turns the OSError of a failed write into a RuntimeError; the cause is still reported.
    import torch

    from mhatrain.core.files import atomic_write

    target = tmp_path / "last.pt"
    target.write_bytes(b"previous")
    with pytest.raises(MhatrainError, match=r"cannot write .*last\.pt: No space left on device"):
        atomic_write(target, lambda f: torch.save({"w": torch.zeros(100_000)}, FullDisk(f, 10_000)), binary=True)
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_follow_the_umask_as_ordinary_files_do(tmp_path, umask, mode):
    """Colleagues on shared storage read the reports: an atomic write is no more private than open() is."""
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "report.md", "text\n")
        atomic_write_json(tmp_path / "report.json", {"a": 1})
        atomic_write_text(tmp_path / "report.md", "replaced\n")
        open(tmp_path / "plain.txt", "w").close()
    finally:
        os.umask(old)
    for name in ("report.md", "report.json", "plain.txt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


def test_a_trained_run_directory_is_readable_as_its_umask_allows(tiny_run):
    umask = os.umask(0)
    os.umask(umask)
    expected = 0o666 & ~umask
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tiny_run.rglob("*") if p.is_file()}
    assert {name: mode for name, mode in modes.items() if mode != expected} == {}
