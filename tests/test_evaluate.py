"""Scoring any text: `eval --src/--ref`, named sacreBLEU test sets from sacreBLEU's cache, and `score`."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import shutil

import pytest
import torch

from mhatrain.data.sources import load_split, split_name
from mhatrain.data.tokens import BOS, EOS
from mhatrain.inference.likelihood import read_sentence_file
from mhatrain.inference.trained import load_run

from .conftest import TOY, assert_clean_error, run_cli

SCORES = (
    "bleu",
    "bleu_signature",
    "chrf",
    "chrf_signature",
    "bleu_lowercased_tokenized",
    "bleu_lowercased_tokenized_signature",
    "sentences",
)


@pytest.fixture(scope="module")
def split_eval(tiny_run) -> dict:
    """`eval --split test --beam 2` of the shared tiny run (beam 2: files no other test writes)."""
    result = run_cli("eval", str(tiny_run), "--split", "test", "--beam", "2")
    assert result.returncode == 0, result.stderr
    return json.loads((tiny_run / "eval" / "test.beam2.json").read_text())


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_eval_of_a_file_pair_equals_eval_of_the_split_and_score_equals_both(tiny_run, split_eval, tmp_path):
    src, ref = tmp_path / "test.en.gz", tmp_path / "ref.de"
    src.write_bytes(gzip.compress((TOY / "test.en").read_bytes()))
    shutil.copy(TOY / "test.de", ref)
    files = run_cli("eval", str(tiny_run), "--src", str(src), "--ref", str(ref), "--beam", "2")
    assert files.returncode == 0, files.stderr
    report = json.loads((tiny_run / "eval" / "test.en.beam2.json").read_text())
    assert {key: report[key] for key in SCORES} == {key: split_eval[key] for key in SCORES}
    assert split_eval["sentences"] == 100 and split_eval["bleu"] > 80
    hyp = tiny_run / "eval" / "test.en.beam2.hyp.txt"
    assert hyp.read_text() == (tiny_run / "eval" / "test.beam2.hyp.txt").read_text()
    assert report["provenance"]["data"]["test.en"]["sha256"] == {str(src): sha256(src), str(ref): sha256(ref)}

    scored = run_cli("score", "--hyp", str(hyp), "--ref", str(ref), "--json", str(tmp_path / "score.json"))
    assert scored.returncode == 0, scored.stderr
    again = json.loads((tmp_path / "score.json").read_text())
    assert {key: again[key] for key in SCORES} == {key: split_eval[key] for key in SCORES}
    assert f"BLEU signature: {split_eval['bleu_signature']}" in scored.stdout
    assert again["provenance"]["data"]["references"]["sha256"] == {str(ref): sha256(ref)}


def test_a_sacrebleu_test_set_is_read_from_sacrebleus_cache(tiny_run, split_eval, tmp_path):
    cache = tmp_path / "sacrebleu"
    (cache / "wmt14").mkdir(parents=True)  # as `sacrebleu -t wmt14 -l en-de` leaves it
    shutil.copy(TOY / "test.en", cache / "wmt14" / "wmt14.en-de.src")
    shutil.copy(TOY / "test.de", cache / "wmt14" / "wmt14.en-de.ref")
    env = {"SACREBLEU": str(cache)}
    evaluated = run_cli(
        "eval", str(tiny_run), "--sacrebleu-set", "wmt14", "--langpair", "en-de", "--beam", "2", env=env
    )
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads((tiny_run / "eval" / "wmt14.en-de.beam2.json").read_text())
    assert {key: report[key] for key in SCORES} == {key: split_eval[key] for key in SCORES}
    assert (
        report["source"] == "sacrebleu:wmt14/en-de"
        and report["provenance"]["data"]["wmt14.en-de"]["langpair"] == "en-de"
    )
    scored = run_cli(
        "score",
        "--hyp",
        str(tiny_run / "eval" / "wmt14.en-de.beam2.hyp.txt"),
        "--sacrebleu-set",
        "wmt14",
        "--langpair",
        "en-de",
        "--json",
        str(tmp_path / "score.json"),
        env=env,
    )
    assert scored.returncode == 0, scored.stderr
    assert json.loads((tmp_path / "score.json").read_text())["bleu"] == split_eval["bleu"]

    empty = tmp_path / "empty-cache"
    empty.mkdir()
    for args in (
        ["eval", str(tiny_run), "--sacrebleu-set", "wmt14"],
        ["score", "--hyp", str(TOY / "test.de"), "--sacrebleu-set", "wmt14", "--langpair", "en-de"],
    ):
        assert_clean_error(
            run_cli(*args, env={"SACREBLEU": str(empty)}),
            f"sacreBLEU test set wmt14 en-de is not in sacreBLEU's cache {empty}",
        )
    assert_clean_error(
        run_cli("eval", str(tiny_run), "--sacrebleu-set", "wmt14", "--langpair", "de-en", env=env),
        "--langpair de-en: the model translates en-de",
    )
    assert_clean_error(
        run_cli("score", "--hyp", str(TOY / "test.de"), "--sacrebleu-set", "wmt99", "--langpair", "en-de"),
        "unknown sacreBLEU test set 'wmt99'",
    )


def test_bad_files_give_one_line(tiny_run, tmp_path):
    short, empty, missing = tmp_path / "short.de", tmp_path / "empty.de", tmp_path / "missing.de"
    short.write_text("Die katze.\n")
    empty.write_text("")
    hyp = ["score", "--hyp", str(TOY / "test.en")]
    assert_clean_error(
        run_cli(*hyp, "--ref", str(short)),
        f"line counts differ: --hyp {TOY / 'test.en'} has 100 lines, --ref {short} has 1 lines",
    )
    assert_clean_error(run_cli(*hyp, "--ref", str(empty)), f"{empty}: file is empty")
    assert_clean_error(run_cli(*hyp, "--ref", str(missing)), f"cannot read {missing}: No such file or directory")
    # eval reads its pair of files the same way
    assert_clean_error(
        run_cli("eval", str(tiny_run), "--src", str(TOY / "test.en"), "--ref", str(short)),
        f"line counts differ: --src {TOY / 'test.en'} has 100 lines, --ref {short} has 1 lines",
    )


def test_conflicting_options_give_one_line(tiny_run):
    assert_clean_error(run_cli("eval", str(tiny_run), "--src", str(TOY / "test.en")), "--src needs --ref")
    assert_clean_error(
        run_cli("eval", str(tiny_run), "--split", "test", "--src", str(TOY / "test.en"), "--ref", str(TOY / "test.de")),
        "--split and --src/--ref exclude each other",
    )
    assert_clean_error(run_cli("score", "--hyp", str(TOY / "test.de")), "give the references with --ref FILE")
    assert_clean_error(
        run_cli("score", "--hyp", str(TOY / "test.de"), "--sacrebleu-set", "wmt14"), "--sacrebleu-set needs --langpair"
    )


def test_a_run_written_before_a_config_key_existed_still_loads(tiny_run, tmp_path):
    """A checkpoint and config.yaml without keys added since (here model.d_head and
    train.gpu_checkpoint_minutes) load with those keys' defaults instead of being refused as another config."""
    import yaml

    from mhatrain.core.checkpoint import load_checkpoint, save_checkpoint

    run = tmp_path / "old-run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("eval", "heads", "snapshots"))
    state = load_checkpoint(run / "best.pt")
    del state["config"]["model"]["d_head"], state["config"]["train"]["gpu_checkpoint_minutes"]
    save_checkpoint(run / "best.pt", state)
    written = yaml.safe_load((run / "config.yaml").read_text())
    del written["model"]["d_head"], written["train"]["gpu_checkpoint_minutes"]
    (run / "config.yaml").write_text(yaml.safe_dump(written, sort_keys=False))

    result = run_cli("eval", str(run), "--split", "valid", "--beam", "1")
    assert result.returncode == 0, result.stderr
    assert json.loads((run / "eval" / "valid.beam1.json").read_text())["sentences"] > 0


def test_eval_writes_the_references_cross_entropy(tiny_run):
    """eval's cross-entropy of the validation references equals the validation loss training logged for
    the same checkpoint; its per-sentence file sums to it, and one sentence recomputed by hand agrees."""
    result = run_cli("eval", str(tiny_run), "--split", "valid", "--beam", "2")
    assert result.returncode == 0, result.stderr
    assert "reference cross-entropy" in result.stdout
    report = json.loads((tiny_run / "eval" / "valid.beam2.json").read_text())
    ce = report["cross_entropy"]
    logged = [
        r for r in map(json.loads, (tiny_run / "metrics.jsonl").read_text().splitlines()) if r.get("kind") == "valid"
    ]
    at_checkpoint = next(r for r in logged if r["step"] == report["update"])
    assert ce["nats_per_token"] == pytest.approx(at_checkpoint["valid_loss"], rel=1e-5)
    assert ce["perplexity"] == pytest.approx(math.exp(ce["nats_per_token"]), rel=1e-4)
    per_sentence = read_sentence_file((tiny_run / "eval" / ce["file"]).read_text())
    assert len(per_sentence.nll) == report["sentences"] == 100
    assert per_sentence.tokens.sum() == ce["tokens"]
    assert per_sentence.nll.sum() / per_sentence.tokens.sum() == pytest.approx(ce["nats_per_token"], rel=1e-6)

    run = load_run(tiny_run)
    corpus = load_split(run.config.data, split_name(run.config, "valid"))
    src, ref = (run.tokenizer.encode([text])[0] for text in (corpus.src[7], corpus.tgt[7]))
    with torch.no_grad():
        logits = run.model(torch.tensor([src + [EOS]]), torch.tensor([[BOS] + ref]))[0]
    by_hand = -torch.log_softmax(logits.double(), -1)[torch.arange(len(ref) + 1), torch.tensor(ref + [EOS])].sum()
    assert per_sentence.tokens[7] == len(ref) + 1
    assert per_sentence.nll[7] == pytest.approx(float(by_hand), rel=1e-4)
