"""The command line end to end on the toy corpus: train, eval, translate, and clean errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mhatrain.console.command_options import int_list
from mhatrain.core.config import load_config
from mhatrain.core.errors import MhatrainError

from .conftest import ROOT, TINY, TOY, assert_clean_error, library_translations, run_cli, train_argv


def test_train_writes_a_self_contained_run_dir(tiny_run):
    names = {p.name for p in tiny_run.iterdir()}
    assert {"config.yaml", "spm.model", "best.pt", "last.pt", "metrics.jsonl", "train_summary.json"} <= names
    records = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    assert len(valid) == 4  # one per epoch
    assert {"loss", "lr", "tokens_per_s", "padding", "grad_norm"} <= train_records[0].keys()
    assert {"valid_loss", "valid_ppl", "valid_bleu", "bleu_signature"} <= valid[0].keys()
    assert valid[-1]["valid_loss"] < valid[0]["valid_loss"]
    assert max(r["valid_bleu"] for r in valid) > 80  # the toy task is learnable in seconds


def test_eval_scores_the_test_split(tiny_run):
    result = run_cli("eval", str(tiny_run), "--split", "test", "--beam", "3")
    assert result.returncode == 0, result.stderr
    report = json.loads((tiny_run / "eval" / "test.beam3.json").read_text())
    assert report["bleu"] > 80 and report["chrf"] > 80 and report["sentences"] == 100
    assert report["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert "case:lc" in report["bleu_lowercased_tokenized_signature"]
    hyps = (tiny_run / "eval" / "test.beam3.hyp.txt").read_text().splitlines()
    assert len(hyps) == 100
    assert "BLEU (sacreBLEU: cased, detokenised)" in result.stdout
    assert f"BLEU signature: {report['bleu_signature']}" in result.stdout


def test_translate_arguments_and_stdin(tiny_run):
    args = run_cli("translate", str(tiny_run), "The red cat sees the dog.", "The old man holds the hat.")
    assert args.returncode == 0, args.stderr
    sentences = ["The red cat sees the dog.", "The old man holds the hat."]
    assert args.stdout.splitlines() == library_translations(tiny_run, sentences)
    assert all(line.strip() for line in args.stdout.splitlines())
    piped = run_cli("translate", str(tiny_run), stdin="The red cat sees the dog.\nThe old man holds the hat.\n")
    assert piped.stdout.splitlines() == args.stdout.splitlines()


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["train", "no-such.yaml"], ["config file not found: no-such.yaml"]),
        (["train", str(TINY), "--set", "model.n_heads=3"], ["'model.n_heads' must divide model.d_model=64"]),
        (["train", str(TINY), "--set", "train.max_tokens"], ["expected section.key=value"]),
        (["eval", "/no/such/run"], ["run directory not found: /no/such/run"]),
        (["translate", "/no/such/run", "hello"], ["run directory not found"]),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(args, fragments):
    assert_clean_error(run_cli(*args), *fragments)


def test_translate_on_a_terminal_says_it_reads_the_terminal(tiny_run):
    """`mhatrain translate RUN` with no sentences waited silently for stdin; on a terminal it says so."""
    import pty

    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mhatrain", "translate", str(tiny_run)],
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    os.close(secondary)
    os.write(primary, b"The red car.\n\x04")  # a line, then Ctrl-D
    out, err = proc.communicate(timeout=120)
    os.close(primary)
    assert proc.returncode == 0, err
    assert err.splitlines() == [
        "reading sentences from the terminal, one per line; Ctrl-D ends the input and translates them"
    ]
    assert out.splitlines() == library_translations(tiny_run, ["The red car."])


def test_translate_rejects_empty_arguments_and_overlong_input(tiny_run):
    assert_clean_error(run_cli("translate", str(tiny_run), "  "), "argument 1: empty input")
    assert_clean_error(run_cli("translate", str(tiny_run), "x" * 20_000), "over the limit")


def test_blank_stdin_lines_give_blank_output_lines_and_the_rest_is_translated(tiny_run):
    """A file with empty lines is normal input: one output line per input line, as fairseq-interactive and Marian."""
    sentences = ["The red car.", "The hat."]
    result = run_cli("translate", str(tiny_run), stdin="The red car.\n\nThe hat.\n  \n\n")
    assert result.returncode == 0, result.stderr
    first, second = library_translations(tiny_run, sentences)
    assert result.stdout.split("\n") == [first, "", second, "", "", ""]
    assert result.stderr == ""
    only_blank = run_cli("translate", str(tiny_run), stdin="\n\n")
    assert (only_blank.returncode, only_blank.stdout) == (0, "\n\n")


def test_eval_unknown_split_is_a_clean_error(tiny_run):
    assert_clean_error(run_cli("eval", str(tiny_run), "--split", "nosuch"), "no files for split 'nosuch'")


def test_debug_shows_the_traceback():
    result = run_cli("--debug", "train", "no-such.yaml")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_version_names_the_package_version_and_exits():
    import mhatrain

    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(
        rf"mhatrain {re.escape(mhatrain.__version__)}( \(commit [0-9a-f]{{12}}(, modified)?\))?\n", result.stdout
    )


def test_python_dash_m_and_help():
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("train", "eval", "translate"):
        assert command in result.stdout


@pytest.mark.parametrize(
    "command, text",
    [
        ("ablate", "Needs pip install 'mhatrain[slurm]'."),
        ("train", "needs pip install 'mhatrain[tensorboard]'"),
        ("export", "needs pip install 'mhatrain[ctranslate2]'"),
    ],
)
def test_help_prints_square_brackets_as_written(command, text):
    """Rich markup took an extra such as `[slurm]` for a style and printed "pip install 'mhatrain'"."""
    result = run_cli(command, "--help", env={"COLUMNS": "300"})
    assert result.returncode == 0, result.stderr
    assert text in result.stdout


@pytest.mark.parametrize(
    "text, minimum, message",
    [
        ("8,x", 1, "--heads: 'x' is not an integer (give a comma-separated list of head counts)"),
        ("8,,16", 1, "--heads: '' is not an integer (give a comma-separated list of head counts)"),
        ("1,0", 1, "--heads: 0 is below 1 (give a comma-separated list of head counts)"),
        ("4,8,4", None, "--heads: 4 is given twice"),
        (" , ", None, "--heads: give a comma-separated list of head counts, e.g. --heads 1,4,8"),
    ],
)
def test_int_lists_are_parsed_in_one_place(text, minimum, message):
    with pytest.raises(MhatrainError) as caught:
        int_list(text, "--heads", "head counts", minimum)
    assert str(caught.value) == message


def test_int_list_keeps_the_order_given():
    assert int_list(" 32,1 ,-8", "--seeds", "seeds") == [32, 1, -8]


def test_bench_options_take_their_lists_from_the_one_parser():
    result = run_cli("bench", "attention", "--quick", "--heads", "8,x")
    assert_clean_error(result, "--heads: 'x' is not an integer")
    assert_clean_error(run_cli("bench", "decode", "--quick", "--beams", "0"), "--beams: 0 is below 1")


def test_eval_with_another_alpha_gets_its_own_file(tiny_run, tmp_path):
    import shutil

    run = Path(shutil.copytree(tiny_run, tmp_path / "run"))
    for alpha in (None, 1.0):
        args = ["eval", str(run), "--split", "test", "--beam", "2"] + ([] if alpha is None else ["--alpha", str(alpha)])
        result = run_cli(*args)
        assert result.returncode == 0, result.stderr + result.stdout
    default = json.loads((run / "eval" / "test.beam2.json").read_text())
    other = json.loads((run / "eval" / "test.beam2.alpha1.json").read_text())
    assert default["alpha"] == load_config(run / "config.yaml", check_paths=False).decode.alpha
    assert other["alpha"] == 1.0
    assert (run / "eval" / "test.beam2.alpha1.hyp.txt").is_file()


# ----------------------------------------------------------------------------- what a new user meets


def start_cli(*args: str, cwd: Path = ROOT) -> subprocess.Popen:
    """`python -m mhatrain ARGS` running in the background, its output unbuffered, with Ctrl-C's signal
    handled as in a terminal even when the suite itself was started in the background (a shell without
    job control starts background commands with SIGINT ignored, and Python keeps an inherited SIG_IGN)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "mhatrain", *args],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def test_ctrl_c_stops_eval_with_status_130_and_one_line(tiny_run, tmp_path):
    """`train && eval && ...` chains must stop when eval is interrupted: 130, as the shell expects."""
    run = Path(shutil.copytree(tiny_run, tmp_path / "run"))
    lines = (TOY / "train.en").read_text().splitlines() * 20  # long enough to be interrupted midway
    (tmp_path / "src.en").write_text("\n".join(lines) + "\n")
    (tmp_path / "ref.de").write_text("\n".join((TOY / "train.de").read_text().splitlines() * 20) + "\n")
    proc = start_cli("eval", str(run), "--src", str(tmp_path / "src.en"), "--ref", str(tmp_path / "ref.de"))
    first = proc.stdout.readline()  # printed once the model is loaded, before translating
    assert first.startswith("translating 40000 sentences"), first + proc.stderr.read()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert err.splitlines() == ["interrupted"], err
    assert "Traceback" not in out + err
    assert not list(run.glob("eval/src.*"))  # no report of the text it did not finish


def test_help_shows_no_type_after_flags():
    result = run_cli("train", "--help", env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert "--resume" in result.stdout and "--keep-batch" in result.stdout
    assert "<bool>" not in result.stdout


@pytest.mark.parametrize(
    "command, usage, shown",
    [
        ("train", "mhatrain train [OPTIONS] CONFIG", ["CONFIG", "--out", "PATH", "KEY=VALUE"]),
        ("average", "mhatrain average [OPTIONS] RUN_DIR [CHECKPOINTS...]", ["RUN_DIR", "CHECKPOINTS...", "N"]),
        ("eval", "mhatrain eval [OPTIONS] RUN_DIR", ["--beam", "N", "--alpha", "NUMBER", "best|last|averaged"]),
    ],
)
def test_help_writes_parameters_as_the_docs_do(command, usage, shown):
    """Typer wrote `{config}`, `<path>` and `<list[Path]>`; the README and docs/commands.md write CONFIG, PATH."""
    result = run_cli(command, "--help", env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert f"Usage: python -m {usage}" in result.stdout  # the tests run `python -m mhatrain`
    assert f"\n{usage}\n" in (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    words = result.stdout.split()
    assert all(word in words for word in shown), result.stdout
    assert not re.search(r"[{<][a-z_\[\]A-Z]+[}>]", result.stdout), result.stdout


def long_sentence() -> str:
    """A sentence of some 900 characters: far more pieces than the tiny model's 128 positions."""
    words = " ".join((TOY / "train.en").read_text().splitlines()[:60])
    return words[:920]


def test_long_inputs_are_translated_with_a_warning_that_counts_the_cut_ones(tiny_run, tmp_path):
    long = long_sentence()
    result = run_cli("translate", str(tiny_run), "A cat.", long, long)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: 2 of 3 sentences are longer than the model's 126 source pieces (model.max_positions=128): "
        "each was cut to its first 126 pieces, and its translation covers only that part"
    ]
    short = run_cli("translate", str(tiny_run), "A cat.")
    assert short.returncode == 0 and "warning" not in short.stderr


def test_attention_and_eval_src_warn_of_a_cut_sentence(tiny_run, tmp_path):
    long = long_sentence()
    maps = run_cli("attention", str(tiny_run), long, "--out", str(tmp_path / "maps"), "--kind", "cross")
    assert maps.returncode == 0, maps.stderr
    assert "warning: 1 of 1 sentence is longer than the model's 126 source pieces" in maps.stderr
    run = Path(shutil.copytree(tiny_run, tmp_path / "run"))
    (tmp_path / "src.en").write_text(f"A cat.\n{long}\n")
    (tmp_path / "ref.de").write_text("Eine Katze.\nLang.\n")
    evaluated = run_cli("eval", str(run), "--src", str(tmp_path / "src.en"), "--ref", str(tmp_path / "ref.de"))
    assert evaluated.returncode == 0, evaluated.stderr
    assert "warning: 1 of 2 sentences is longer than the model's 126 source pieces" in evaluated.stderr


def test_eval_given_a_file_says_it_is_not_a_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("a file\n")
    assert_clean_error(
        run_cli("eval", str(tmp_path / "notes.txt")), f"{tmp_path}/notes.txt is a file, not a run directory"
    )


def test_a_bad_set_value_on_the_command_line_is_blamed_on_the_set(tmp_path):
    result = run_cli(*train_argv(tmp_path / "run", "train.lr_factor=.nan"))
    assert_clean_error(result, "--set train.lr_factor=.nan: 'train.lr_factor' must be a finite number, got nan")
    assert "tiny.yaml" not in result.stderr


def test_a_diverging_run_without_a_checkpoint_does_not_name_one(tmp_path, spm_cache):
    out = tmp_path / "run"
    sets = ("train.lr_factor=1.0e+30", "train.max_bad_updates=2", "train.valid_every=1000")
    result = run_cli(*train_argv(out, *sets, spm_cache=spm_cache))
    assert result.returncode == 2, result.stderr
    error = result.stderr.splitlines()[-1]
    assert error.startswith("error: stopped: 2 updates in a row skipped"), result.stderr
    assert "no checkpoint was written" in error and "last good checkpoint" not in error
    assert not list(out.glob("*.pt"))


def test_export_into_a_file_is_a_clean_error(tiny_run, tmp_path):
    (tmp_path / "a-file").write_text("keep me\n")
    assert_clean_error(run_cli("export", str(tiny_run), str(tmp_path / "a-file")), "a-file is a file, not a directory")
    assert (tmp_path / "a-file").read_text() == "keep me\n"


def test_export_into_a_non_empty_directory_needs_overwrite_and_says_what_it_kept(tiny_run, tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "config.yaml").write_text("mine\n")
    (dest / "notes.md").write_text("mine too\n")
    result = run_cli("export", str(tiny_run), str(dest))
    assert_clean_error(result, f"{dest} is not empty", "--overwrite")
    assert (dest / "config.yaml").read_text() == "mine\n" and sorted(p.name for p in dest.iterdir()) == [
        "config.yaml",
        "notes.md",
    ]
    forced = run_cli("export", str(tiny_run), str(dest), "--overwrite")
    assert forced.returncode == 0, forced.stderr
    assert (dest / "config.yaml").read_text() != "mine\n" and (dest / "notes.md").read_text() == "mine too\n"
    assert "1 file already there was kept: notes.md" in forced.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli("export", str(tiny_run), str(empty)).returncode == 0


def test_attention_html_pages_of_two_sentences_do_not_overwrite_each_other(tiny_run, tmp_path):
    pages = []
    for sentence in ("The red cat sees the dog.", "The old man holds the hat."):
        result = run_cli("attention", str(tiny_run), sentence, "--out", str(tmp_path), "--kind", "cross", "--html")
        assert result.returncode == 0, result.stderr
        pages.append(next(line for line in result.stdout.splitlines() if line.startswith("html: "))[6:])
    assert pages[0] != pages[1]
    assert all(Path(page).is_file() and Path(page).parent == tmp_path for page in pages)
    assert "The red cat" in Path(pages[0]).read_text() and "The old man" in Path(pages[1]).read_text()


def test_ablate_checks_the_test_split_before_training(tmp_path, spm_cache):
    out = tmp_path / "study"
    result = run_cli(
        "ablate",
        str(TINY),
        "--heads",
        "4",
        "--out",
        str(out),
        "--set",
        f"data.cache_dir={spm_cache}",
        "--set",
        "data.test_split=nosuch",
    )
    assert_clean_error(result, "no files for split 'nosuch'")
    assert not list(tmp_path.rglob("*.pt")) and not list(tmp_path.rglob("metrics.jsonl"))
