"""The command line end to end on the toy corpus: train, eval, translate, and clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mhatrain.cli import int_list
from mhatrain.config import load_config
from mhatrain.errors import MhatrainError

from .conftest import TINY, assert_clean_error, library_translations, run_cli


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


def test_translate_rejects_empty_input(tiny_run):
    assert_clean_error(run_cli("translate", str(tiny_run), "  "), "argument 1: empty input")
    assert_clean_error(run_cli("translate", str(tiny_run), stdin="The cat.\n\n"), "stdin line 2: empty input")
    assert_clean_error(run_cli("translate", str(tiny_run), "x" * 20_000), "over the limit")


def test_eval_unknown_split_is_a_clean_error(tiny_run):
    assert_clean_error(run_cli("eval", str(tiny_run), "--split", "nosuch"), "no files for split 'nosuch'")


def test_debug_shows_the_traceback():
    result = run_cli("--debug", "train", "no-such.yaml")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_python_dash_m_and_help():
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("train", "eval", "translate"):
        assert command in result.stdout


@pytest.mark.parametrize(
    "command, text",
    [("ablate", "Needs pip install 'mhatrain[slurm]'."), ("train", "needs pip install 'mhatrain[tensorboard]'")],
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
