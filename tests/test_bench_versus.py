"""`mhatrain bench decode --checkpoint RUN --versus OTHER` (bench/versus.py): two trained runs, both with our
search, in one bench run. A pruned run (conftest's pruned_run) against the gated run it was cut from.

No timing assertions: each run's row carries its own parameters, best.pt bytes, tokens per sentence, BLEU
and target tokens/s, and the options that cannot go together fail in one line before anything is timed.
"""

from __future__ import annotations

import json

import pytest

from mhatrain.bench.report import OURS
from mhatrain.inference.trained import load_run
from mhatrain.model.transformer import count_parameters

from .conftest import assert_clean_error, run_cli, train_argv

CASES = {"greedy fp32", "greedy int8", "beam 4 fp32", "beam 4 int8"}  # the trained protocol's precisions


def test_versus_times_both_runs_and_gives_each_its_size_and_translation_quality(pruned_run, gated_run, tmp_path):
    """A run of the --quick bench's size (one sample, no memory processes) on 6 sentences of the toy test split."""
    out = tmp_path / "bench.json"
    result = run_cli(
        "bench", "decode", "--checkpoint", str(pruned_run), "--versus", str(gated_run), "--max-sentences", "6",
        "--repeats", "1", "--warmup", "0", "--no-memory", "--threads", "1", "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    assert "parameters" in result.stdout and "best.pt bytes" in result.stdout  # the table's columns
    (bench,) = json.loads(out.read_text())["benches"]
    other = str(gated_run)
    rows = {(row["case"], row["peer"]): row for row in bench["rows"]}
    assert set(rows) == {(case, peer) for case in CASES for peer in (OURS, other)}
    expected = {}
    for peer, run_dir in ((OURS, pruned_run), (other, gated_run)):
        model = load_run(run_dir).model
        expected[peer] = {
            "parameters": count_parameters(model),
            "checkpoint_bytes": (run_dir / "best.pt").stat().st_size,
        }
    assert expected[OURS]["parameters"] < expected[other]["parameters"]  # the pruned run is the smaller
    assert expected[OURS]["checkpoint_bytes"] < expected[other]["checkpoint_bytes"]
    for (case, peer), row in rows.items():
        metrics = row["metrics"]
        assert {k: metrics[k] for k in expected[peer]} == expected[peer], (case, peer)
        assert metrics["tokens_per_sentence"] >= 1 and metrics["bleu"] is not None
        assert metrics["tokens_per_s"] == pytest.approx(row["throughput"] * metrics["tokens_per_sentence"])
        ours = rows[case, OURS]["metrics"]["tokens_per_s"]
        assert metrics["tokens_per_s_ratio"] == pytest.approx(ours / metrics["tokens_per_s"])
        assert row["ratio"] == pytest.approx(row["time"]["median"] / rows[case, OURS]["time"]["median"])
    assert bench["settings"]["versus"].startswith(f"trained: {other}, ")
    assert "cross [0, 4]" in bench["settings"]["model"]  # ours is the pruned model, layer by layer
    assert "for both runs" in bench["settings"]["decode"]
    assert not bench["checks"] and not bench["targets"]  # different models: no equal-output check, no target
    assert not any("uniform lengths" in note for note in bench["notes"])  # real translations
    ratio = expected[OURS]["parameters"] / expected[other]["parameters"]
    assert any(n.startswith(f"ours/{other}: parameters {ratio:.3f}×") for n in bench["notes"]), bench["notes"]


@pytest.fixture(scope="module")
def other_tokenizer_run(tmp_path_factory, spm_cache):
    """A run of the tiny config with a vocabulary of its own (48 pieces, not 64): another tokenizer."""
    run = tmp_path_factory.mktemp("vocab48") / "run"
    sets = ("data.vocab_size=48", "train.max_steps=1", "train.valid_bleu=false")
    trained = run_cli(*train_argv(run, *sets, spm_cache=spm_cache))
    assert trained.returncode == 0, trained.stderr + trained.stdout
    return run


def test_versus_refuses_runs_with_different_tokenizers_in_one_line(pruned_run, other_tokenizer_run):
    result = run_cli(
        "bench", "decode", "--quick", "--checkpoint", str(pruned_run), "--versus", str(other_tokenizer_run),
        "--max-sentences", "2", "--repeats", "1", "--warmup", "0", "--precision", "fp32", "--beams", "1",
    )  # fmt: skip
    assert_clean_error(result, f"--versus {other_tokenizer_run}", "tokenizer (spm.model) differs")


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["decode", "--against", "."], ["--versus and --against exclude each other"]),
        (["decode", "--random-weights"], ["--versus and --random-weights exclude each other"]),
        (["train"], ["--versus applies to `mhatrain bench decode` only"]),
        (["decode", "--quick"], ["--versus times two trained runs", "--checkpoint RUN_DIR"]),
    ],
)
def test_versus_with_an_option_it_excludes_is_one_line(args, fragments, gated_run):
    result = run_cli("bench", *args, "--versus", str(gated_run))
    assert_clean_error(result, *fragments)


def test_versus_names_a_run_directory(pruned_run, tmp_path):
    result = run_cli("bench", "decode", "--checkpoint", str(pruned_run), "--versus", str(tmp_path / "nowhere"))
    assert_clean_error(result, f"--versus {tmp_path / 'nowhere'}: not a run directory")
