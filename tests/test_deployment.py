"""Our model in CTranslate2 (inference/deployment.py, `mhatrain export RUN --ctranslate2 DIR`): the converted
model computes our function, teacher-forced log-probabilities equal ours, on random models of every
architecture option and on the tiny trained model through the CLI."""

from __future__ import annotations

import sys

import pytest
import torch

from mhatrain.core.errors import MhatrainError
from mhatrain.data.tokens import EOS
from mhatrain.inference.deployment import SPM_FILE, Engine, export_ctranslate2, teacher_forced_log_probs
from mhatrain.inference.search import source_ids, translate_ids
from mhatrain.inference.trained import load_run

from .conftest import assert_clean_error, run_cli, small_model

pytest.importorskip("ctranslate2")

TOLERANCE = 1e-4  # largest |Δ log p| of a token in fp32 (measured ~1e-6)
SENTENCES = ["a man rides a red bike", "two dogs play in the snow", "the girl is reading"]


def largest_difference(engine: Engine, model, sources: list[list[int]], targets: list[list[int]]) -> float:
    theirs = engine.target_log_probs(sources, targets)
    ours = teacher_forced_log_probs(model, [source_ids(s, model.cfg.max_positions) for s in sources], targets)
    assert [len(t) for t in theirs] == [len(o) for o in ours] == [len(t) + 1 for t in targets]  # EOS scored too
    return max(abs(a - b) for t, o in zip(theirs, ours) for a, b in zip(t, o))


@pytest.mark.parametrize(
    "architecture",
    [dict(norm="post"), dict(norm="pre"), dict(norm="pre", tie=False), dict(norm="post", n_heads=2, d_head=8)],
    ids=["post-norm", "pre-norm", "untied", "d_head"],
)
def test_converted_model_scores_as_ours(tmp_path, toy_tokenizer, architecture):
    tokenizer, _ = toy_tokenizer
    model = small_model(tokenizer.vocab_size, seed=3, **architecture)
    engine = Engine.load(export_ctranslate2(model, tokenizer, tmp_path / "ct2"), "float32", threads=1)
    sources = tokenizer.encode(SENTENCES)
    targets = [[5, 9, 12, 7], [20, 4], list(range(4, 30))]  # any target: the model is random
    assert largest_difference(engine, model, sources, targets) <= TOLERANCE


def test_an_int8_export_leaves_the_model_unchanged(tmp_path, toy_tokenizer):
    tokenizer, _ = toy_tokenizer
    model = small_model(tokenizer.vocab_size, seed=5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_ctranslate2(model, tokenizer, tmp_path / "ct2", "int8")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_exported_tiny_model_translates_and_scores_as_ours(tiny_run, tmp_path):
    out = tmp_path / "deploy"
    result = run_cli("export", str(tiny_run), "--ctranslate2", str(out))
    assert result.returncode == 0, result.stderr + result.stdout
    assert "CTranslate2 loads it in" in result.stdout
    assert {"model.bin", "config.json", SPM_FILE} <= {p.name for p in out.iterdir()}
    run = load_run(tiny_run)
    engine = Engine.load(out, "float32", threads=1)
    sources = run.tokenizer.encode(SENTENCES)
    ours = translate_ids(run.model, sources, run.config.decode, "cpu", beam=1)
    assert engine.translate_ids(sources, run.config.decode, beam=1) == ours  # greedy: the same argmax
    assert largest_difference(engine, run.model, sources, ours) <= TOLERANCE
    assert all(EOS not in hyp for hyp in ours)


def test_int8_export_loads_and_translates(tiny_run, tmp_path):
    out = tmp_path / "deploy-int8"
    result = run_cli("export", str(tiny_run), "--ctranslate2", str(out), "--int8")
    assert result.returncode == 0, result.stderr + result.stdout
    assert "int8 weights" in result.stdout
    run = load_run(tiny_run)
    hyps = Engine.load(out, threads=1).translate_ids(run.tokenizer.encode(SENTENCES), run.config.decode, beam=2)
    assert len(hyps) == len(SENTENCES) and all(hyps)
    assert (out / "model.bin").stat().st_size < (tiny_run / "best.pt").stat().st_size / 2


def test_export_with_both_dest_and_ctranslate2_is_one_line(tiny_run, tmp_path):
    result = run_cli("export", str(tiny_run), str(tmp_path / "dest"), "--ctranslate2", str(tmp_path / "x"))
    assert_clean_error(result, "export --ctranslate2 DIR writes DIR: give no DEST")


def test_export_refuses_a_directory_that_holds_files(tiny_run, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("keep me")
    result = run_cli("export", str(tiny_run), "--ctranslate2", str(tmp_path / "taken"))
    assert_clean_error(result, "exists and is not an empty directory")
    assert run_cli("export", str(tiny_run)).returncode == 2  # neither DEST nor --ctranslate2


def test_missing_ctranslate2_is_one_line(tmp_path, toy_tokenizer, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    tokenizer, _ = toy_tokenizer
    with pytest.raises(MhatrainError, match=r"pip install 'mhatrain\[ctranslate2\]'"):
        export_ctranslate2(small_model(tokenizer.vocab_size), tokenizer, tmp_path / "x")


def test_the_benchs_ctranslate2_peer_translates_in_a_process_of_its_own(tmp_path, toy_tokenizer, monkeypatch):
    """bench decode's CTranslate2 peer (bench/deployed: engine_step, log_prob_check) loads no Translator in the
    bench's process, which a loaded one slows (docs/performance.md), and translates as the engine does in ours."""
    from mhatrain.bench import deployed
    from mhatrain.core.config import DecodeConfig
    from mhatrain.data.tokens import right_padded

    tokenizer, _ = toy_tokenizer
    model = small_model(tokenizer.vocab_size, seed=3)
    out = export_ctranslate2(model, tokenizer, tmp_path / "ct2")
    sources = [source_ids(s, model.cfg.max_positions) for s in tokenizer.encode(SENTENCES)]
    batch = torch.from_numpy(right_padded(sources))
    cfg = DecodeConfig(beam=2, max_len_a=1.0, max_len_b=5)
    here = Engine.load(out, "float32", threads=1).translate_ids(deployed.id_lists(batch), cfg, beam=2)

    def no_engine_here(*args, **kwargs):
        raise AssertionError("a Translator loaded in the bench's process")

    monkeypatch.setattr(Engine, "load", no_engine_here)
    step = deployed.engine_step(out, [batch, batch], 2, cfg, "fp32", "cpu")
    assert step() == [here, here]
    assert step() == [here, here]  # the process serves every sample
    assert deployed.log_prob_check(model, out, batch, here).passed  # the check before timing scores there too
