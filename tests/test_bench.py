"""`mhatrain bench`: every bench runs at --quick size and reports what it measured, consistently.

No timing assertions: only the structure of the results (every peer measured, ratios = peer median /
our median, equal-output checks pass, targets judged, JSON and Markdown written) and the pieces
the numbers rest on (peers with our weights compute our function, FLOP counts, memory in a fresh
process, alternation, the compile fallback).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import torch

from mhatrain.bench.against import role_module
from mhatrain.bench.cli_options import parse_precision
from mhatrain.bench.memory import Workload, peak_memory_mib
from mhatrain.bench.options import BenchOptions, check_options
from mhatrain.bench.report import OURS
from mhatrain.bench.runner import run_benches
from mhatrain.bench.timing import Summary, ready_step, time_alternating
from mhatrain.core.config import ModelConfig
from mhatrain.core.errors import MhatrainError
from mhatrain.data.tokens import PAD
from mhatrain.model.flops import forward_macs
from mhatrain.model.transformer import build_model

from .conftest import TINY, TOY, run_cli, train_argv

QUIET = dict(quick=True, memory=False, repeats=2, warmup=1, threads=1)
ONCE = dict(precisions=("fp32",), memory=False, repeats=1, warmup=0, threads=1)  # one fp32 sample of real data


def assert_consistent(result: dict, peers: set[str], unit: str) -> None:
    """Every case has every peer once, ratios are peer median / our median, checks passed, targets judged."""
    cases = {}
    for row in result["rows"]:
        cases.setdefault(row["case"], {})[row["peer"]] = row
    assert cases
    for case, rows in cases.items():
        assert set(rows) == peers, case
        ours = rows[OURS]["time"]["median"]
        for row in rows.values():
            t = row["time"]
            assert t["n"] >= 1 and 0 < t["min"] <= t["q1"] <= t["median"] <= t["q3"] <= t["max"]
            assert row["ratio"] == pytest.approx(t["median"] / ours)
            assert row["throughput"] == pytest.approx(row["work"] / t["median"])
            assert row["unit"] == unit
    assert result["checks"] and all(c["passed"] for c in result["checks"]), result["checks"]
    for target in result["targets"]:
        assert target["case"] in cases and target["value"] is not None
        assert target["passed"] == (target["value"] >= target["minimum"] if result["judged"] else None)


def test_attention_bench_through_the_cli_writes_json_and_markdown(tmp_path):
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    result = run_cli(
        "bench",
        "attention",
        "--quick",
        "--heads",
        "8,32",
        "--precision",
        "both",
        "--no-memory",
        "--repeats",
        "2",
        "--threads",
        "1",
        "--json",
        str(out_json),
        "--markdown",
        str(out_md),
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "mhatrain bench attention" in result.stdout
    # toy shapes: the full-size targets are recorded, not judged, and no PASS/MISS is shown
    assert "PASS" not in result.stdout and "MISS" not in result.stdout and "status" not in result.stdout
    assert "note: --quick: toy shapes and models, so no target is judged" in result.stdout
    payload = json.loads(out_json.read_text())
    assert payload["machine"]["torch_threads"] == 1
    (attention,) = payload["benches"]
    assert attention["bench"] == "attention"
    assert_consistent(attention, {OURS, "nn.MultiheadAttention", "article loop"}, "tokens/s")
    assert {r["case"] for r in attention["rows"]} == {"h=8 fp32", "h=32 fp32", "h=8 bf16", "h=32 bf16"}
    assert len(attention["checks"]) == 4  # one equal-output check per (h, precision)
    assert {(t["case"], t["peer"], t["minimum"]) for t in attention["targets"]} == {
        ("h=8 fp32", "nn.MultiheadAttention", 1.0),
        ("h=32 fp32", "nn.MultiheadAttention", 1.0),
        ("h=8 bf16", "nn.MultiheadAttention", 1.0),
        ("h=32 bf16", "nn.MultiheadAttention", 1.0),
    }
    markdown = out_md.read_text()
    assert "### mhatrain bench attention" in markdown and "| h=32 bf16 | article loop |" in markdown
    assert "PASS" not in markdown and "MISS" not in markdown and attention["judged"] is False


def test_targets_are_judged_at_full_size_and_only_there():
    from rich.console import Console

    from mhatrain.bench.report import BenchResult, Target, print_result

    def result(applies: bool) -> str:
        bench = BenchResult("attention", {})
        bench.add_case("h=8 fp32", {OURS: [1.0, 1.0], "peer": [2.0, 2.0]}, 10, "tokens/s")
        bench.targets.append(Target("h=8 fp32", "peer", "ratio", 1.5, "ours ≥ 1.5×"))
        bench.judge(applies)
        console = Console(file=io.StringIO(), width=200, color_system=None)
        print_result(bench, console)
        assert bench.targets[0].value == 2.0 and bench.targets[0].passed is (True if applies else None)
        return console.file.getvalue()

    def header(text: str) -> list[str]:
        return next(line for line in text.splitlines() if line.startswith("┃")).split()

    judged, quick = result(True), result(False)
    assert "PASS" in judged and "target" in header(judged) and "status" in header(judged)
    assert "PASS" not in quick and "MISS" not in quick
    assert "target" not in header(quick) and "status" not in header(quick)


@pytest.mark.parametrize("columns", [None, "90"])
def test_a_bench_table_off_a_terminal_keeps_to_columns_when_asked(columns, monkeypatch):
    """A log file keeps the whole table; `COLUMNS=90 mhatrain bench ... | less` gets 90 columns."""
    from rich.console import Console

    from mhatrain.bench.report import BenchResult, print_result

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    bench = BenchResult("attention", {})
    bench.add_case("h=8 fp32", {OURS: [1.0, 1.0], "nn.MultiheadAttention": [2.0, 2.0]}, 10, "tokens/s")
    console = Console(file=io.StringIO(), color_system=None, soft_wrap=True)  # as the CLI's, not a terminal
    print_result(bench, console)
    widths = [len(line) for line in console.file.getvalue().splitlines() if line.startswith(("┃", "│"))]
    if columns is None:
        assert max(widths) > console.width  # the natural width, not squeezed into 80 columns
    else:
        assert max(widths) <= int(columns)


def test_quick_leaves_the_memory_processes_out_unless_asked():
    """Each peak-memory process starts torch afresh: at --quick's sizes they were most of its time."""
    assert BenchOptions().memory is True and BenchOptions(quick=True).memory is False
    assert BenchOptions(quick=True, memory=True).memory is True and BenchOptions(memory=False).memory is False


def test_train_bench_reports_flops_against_the_measured_peak():
    pytest.importorskip("transformers")
    (result,) = run_benches(["train"], BenchOptions(precisions=("bf16",), **QUIET))
    raw = result.to_dict()
    assert_consistent(raw, {OURS, "nn.Transformer", "MarianMT"}, "tokens/s")
    assert any("nn.Transformer with our weights" in c.name for c in result.checks)
    peak_bf16 = result.settings["peak_bf16_gflops"]
    flops = result.settings["model_flops_per_target_token"] * result.settings["target_tokens_per_sample"]
    for row in result.rows:
        assert row.metrics["gflops"] * 1e9 == pytest.approx(flops / row.time.median, rel=1e-3)
        assert row.metrics["bf16_peak_share"] == pytest.approx(row.metrics["gflops"] / peak_bf16, rel=2e-3)
    assert {(t.peer, t.metric) for t in result.targets} == {
        ("nn.Transformer", "ratio"),
        ("MarianMT", "ratio"),
        (OURS, "bf16_peak_share"),
    }


def test_decode_bench_forces_equal_lengths_and_checks_the_cache():
    pytest.importorskip("transformers")
    (result,) = run_benches(["decode"], BenchOptions(precisions=("fp32",), **QUIET))
    assert_consistent(result.to_dict(), {OURS, "ours, no cache", "HF generate"}, "sentences/s")
    assert {r.case for r in result.rows} == {"greedy fp32", "beam 4 fp32"}
    tokens = {row.metrics["tokens_per_sentence"] for row in result.rows}
    assert tokens == {7.0}  # --quick: 6 tokens + EOS for every peer
    assert any("measures uniform lengths only" in note for note in result.notes)
    assert {(t.case, t.peer) for t in result.targets} == {
        ("beam 4 fp32", "ours, no cache"),
        ("beam 4 fp32", "HF generate"),
        ("greedy fp32", "HF generate"),
    }


def test_train_bench_on_real_batches_of_the_toy_corpus(spm_cache):
    pytest.importorskip("transformers")
    options = BenchOptions(config=TINY, overrides=(f"data.cache_dir={spm_cache}",), data_dir=TOY, batches=1, **ONCE)
    (result,) = run_benches(["train"], options)
    assert_consistent(result.to_dict(), {OURS, "nn.Transformer", "MarianMT"}, "tokens/s")
    assert "train" in result.settings["batches"] and "synthetic" not in result.settings["batches"]


def trained_tiny_run(tmp_path, spm_cache) -> Path:
    run_dir = tmp_path / "run"
    trained = run_cli(*train_argv(run_dir, "train.max_steps=30", "train.valid_bleu=false", spm_cache=spm_cache))
    assert trained.returncode == 0, trained.stderr + trained.stdout
    return run_dir


def test_decode_bench_times_ctranslate2_with_our_trained_weights(tmp_path, spm_cache):
    """The default protocol: a trained run on the real test split, ours against CTranslate2 in fp32 and int8."""
    pytest.importorskip("ctranslate2")
    run_dir = trained_tiny_run(tmp_path, spm_cache)
    options = BenchOptions(checkpoint=run_dir, max_sentences=6, memory=False, repeats=1, warmup=0, threads=1)
    (result,) = run_benches(["decode"], options)
    assert_consistent(result.to_dict(), {OURS, "CTranslate2"}, "sentences/s")
    assert {r.case for r in result.rows} == {"greedy fp32", "greedy int8", "beam 4 fp32", "beam 4 int8"}
    assert result.settings["weights"] == f"trained: {run_dir}"
    names = " ".join(c.name for c in result.checks)
    assert "teacher-forced log-probabilities" in names and "comparable tokens per sentence" in names
    for row in result.rows:
        assert row.metrics["tokens_per_sentence"] > 1 and row.metrics["bleu"] is not None
    assert {(t.case, t.peer, t.minimum) for t in result.targets} == {
        (r.case, "CTranslate2", 0.8 if r.case.endswith("fp32") else 1.0) for r in result.rows
    }
    assert not any("uniform lengths" in n for n in result.notes)


def test_a_failed_check_fails_the_command_after_writing_the_results(tmp_path, monkeypatch):
    from rich.console import Console

    import mhatrain.bench.attention_bench as attention
    from mhatrain.bench.report import Check
    from mhatrain.bench.runner import report_benches

    monkeypatch.setattr(attention, "check_same_output", lambda *args: Check("peers give our output", False, "Δ 1"))
    out = tmp_path / "bench.json"
    with pytest.raises(MhatrainError, match="1 correctness check"):
        report_benches(["attention"], BenchOptions(heads=(8,), precisions=("fp32",), **QUIET), Console(quiet=True), out)
    assert json.loads(out.read_text())["benches"][0]["checks"][0]["passed"] is False


def test_an_unknown_bench_is_a_one_line_error():
    result = run_cli("bench", "attentoin")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == "error: unknown bench 'attentoin': choose from attention, train, decode"


@pytest.mark.parametrize(
    "call, fragment",
    [
        (
            lambda: check_options(["attention"], BenchOptions(heads=(1, 3)), heads_given=True),
            "h=3 does not divide d_model=256",
        ),
        (
            lambda: check_options(["decode"], BenchOptions(heads=(8,)), heads_given=True),
            "--heads applies to `mhatrain bench attention` only",
        ),
        (
            lambda: check_options(["train"], BenchOptions(checkpoint=Path("x")), heads_given=False),
            "--checkpoint applies to",
        ),
        (lambda: parse_precision("fp16"), "--precision must be fp32, bf16, int8 or both"),
        (
            lambda: check_options(["train"], BenchOptions(precisions=("int8",)), heads_given=False),
            "--precision int8 applies to `mhatrain bench decode` only",
        ),
        (
            lambda: check_options(["train"], BenchOptions(random_weights=True), heads_given=False),
            "--random-weights applies to",
        ),
        (
            lambda: check_options(
                ["decode"], BenchOptions(random_weights=True, checkpoint=Path(".")), heads_given=False
            ),
            "--checkpoint and --random-weights exclude each other",
        ),
    ],
)
def test_bad_options_fail_before_measuring(call, fragment):
    with pytest.raises(MhatrainError) as caught:
        call()
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_decode_without_a_trained_run_says_how_to_give_one(tmp_path, monkeypatch):
    """The default protocol needs a trained model: runs/<config name> when --checkpoint is not given."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MhatrainError) as caught:
        check_options(["decode"], BenchOptions(config=TINY), heads_given=False)
    message = str(caught.value)
    assert "runs/tiny is not a run directory" in message and "--random-weights" in message and "\n" not in message
    assert parse_precision("fp32,int8") == ("fp32", "int8")


def test_missing_ctranslate2_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    (tmp_path / "config.yaml").write_text("")  # a run directory, as far as the options can tell
    with pytest.raises(MhatrainError, match=r"pip install 'mhatrain\[ctranslate2\]'"):
        check_options(["decode"], BenchOptions(config=TINY, checkpoint=tmp_path), heads_given=False)


def test_missing_transformers_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    with pytest.raises(MhatrainError, match=r"pip install 'mhatrain\[bench\]'"):
        check_options(["train"], BenchOptions(quick=True), heads_given=False)
    check_options(["attention"], BenchOptions(quick=True), heads_given=False)  # needs no transformers


def allocating_step(mib: int, compile: bool = False):
    """A workload whose step holds `mib` MiB of float32 at its peak (for the memory test)."""

    def step():
        return float(torch.ones(mib * 2**18).sum())

    return step


def test_peak_memory_is_measured_in_a_fresh_process():
    mib, note = peak_memory_mib(
        Workload(__name__, "allocating_step", {"mib": 64}), torch.device("cpu"), compile=False, threads=1
    )
    assert note == "" and 60 <= mib < 64 + 40


def test_peers_alternate_and_every_peer_goes_first():
    calls = []
    steps = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    samples = time_alternating(steps, repeats=3, warmup=0, device=torch.device("cpu"))
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(len(s) == 3 for s in samples.values())
    summary = Summary.of([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (summary.median, summary.q1, summary.q3, summary.min, summary.max) == (3.0, 2.0, 4.0, 1.0, 5.0)


def test_a_failing_compile_falls_back_to_eager():
    def build(compile: bool):
        if compile:
            raise RuntimeError("backend exploded")
        return lambda: None

    step, note = ready_step(build, compile=True)
    assert step() is None and "torch.compile failed" in note and note.endswith("eager")


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_torch_transformer_with_our_weights_is_our_model(norm):
    from mhatrain.bench.inputs import synthetic_pairs
    from mhatrain.bench.train_bench import check_torch_transformer
    from mhatrain.data.batches import collate

    cfg = ModelConfig(
        d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2, norm=norm, max_positions=64
    )
    batch = collate(synthetic_pairs(6, 50, seed=3), list(range(6)))
    check = check_torch_transformer(cfg, 50, batch, torch.device("cpu"), seed=1)
    assert check.passed, check.detail


@pytest.mark.parametrize("n_heads, d_head", [(4, None), (3, 16)])  # model.d_head: heads of 16 whatever h
def test_flop_count_is_the_models_matmul_weights_per_token(n_heads, d_head):
    """With one source and one target token, forward MACs = the weights of every Linear layer (each
    used once per token) + the attention products over a single position (over all heads' H·d_head)."""
    cfg = ModelConfig(
        d_model=32, n_heads=n_heads, d_head=d_head, d_ff=64, n_encoder_layers=2, n_decoder_layers=3, max_positions=64
    )
    model = build_model(cfg, 100, PAD)
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    width = n_heads * (d_head or cfg.d_model // n_heads)
    attention = 2 * width * (cfg.n_encoder_layers + 2 * cfg.n_decoder_layers)
    assert forward_macs(cfg, 100, torch.tensor([1]), torch.tensor([1])) == weights + attention


def test_flop_count_follows_each_layers_own_head_count():
    """A pruned model's layout (model.heads_per_layer): each module's weights and products count alone."""
    from mhatrain.core.config import HeadsPerLayer

    layout = HeadsPerLayer(enc_self=[4, 1], dec_self=[2, 0, 4], cross=[0, 3, 1])
    cfg = ModelConfig(
        d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=3, max_positions=64, heads_per_layer=layout
    )
    model = build_model(cfg, 100, PAD)
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    attention = 2 * 8 * sum(layout.enc_self + layout.dec_self + layout.cross)
    assert forward_macs(cfg, 100, torch.tensor([1]), torch.tensor([1])) == weights + attention


# ----------------------------------------------------------------------------- --against: an A/B of two checkouts

ROOT = Path(__file__).resolve().parents[1]


def test_against_times_another_checkouts_step_and_checks_it_computes_ours(tmp_path):
    """The other checkout (here a copy of this one) is imported beside ours and is the only peer."""
    import shutil

    shutil.copytree(ROOT / "mhatrain", tmp_path / "mhatrain", ignore=shutil.ignore_patterns("__pycache__"))
    options = BenchOptions(precisions=("fp32",), against=tmp_path, batches=1, **QUIET)
    (result,) = run_benches(["train"], options)
    peer = f"against {tmp_path.name}"  # not a git checkout: named after its folder
    assert_consistent(result.to_dict(), {OURS, peer}, "tokens/s")
    assert any(c.name.startswith(f"{peer} with our weights gives our loss and gradients") for c in result.checks)
    assert {(t.peer, t.minimum) for t in result.targets} >= {(peer, 1.4)}


FLAT_LAYOUT = "12cb0c2"  # the last commit whose package was flat (model.py, decode.py, step.py, ...)


def test_against_finds_each_role_in_a_checkout_from_before_the_layers(tmp_path):
    """A checkout of the flat package is still a peer: its model, search and step are found by role,
    and its update with our weights gives our loss and gradients."""
    import io
    import subprocess
    import tarfile

    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", FLAT_LAYOUT, "mhatrain"], capture_output=True, check=True
    ).stdout
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(tmp_path, filter="data")
    roles = {role: role_module(tmp_path, role) for role in ("model", "search", "step")}
    assert roles == {"model": "model", "search": "decode", "step": "step"}
    assert {role: role_module(ROOT, role) for role in roles} == {
        "model": "model.transformer",
        "search": "inference.search",
        "step": "training.step",
    }
    options = BenchOptions(precisions=("fp32",), against=tmp_path, batches=1, **QUIET)
    (result,) = run_benches(["train"], options)
    (check,) = [c for c in result.checks if "loss and gradients" in c.name]
    assert check.passed, check.detail


def test_against_notices_a_checkout_that_computes_another_loss(tmp_path):
    import shutil

    shutil.copytree(ROOT / "mhatrain", tmp_path / "mhatrain", ignore=shutil.ignore_patterns("__pycache__"))
    loss = tmp_path / "mhatrain" / "training" / "loss.py"
    loss.write_text(loss.read_text().replace("(1.0 - smoothing) * nll", "(1.0 - 2 * smoothing) * nll"))
    options = BenchOptions(precisions=("fp32",), against=tmp_path, batches=1, **QUIET)
    (result,) = run_benches(["train"], options)
    (check,) = [c for c in result.checks if "loss and gradients" in c.name]
    assert not check.passed


def copy_of_this_checkout(where: Path) -> Path:
    import shutil

    shutil.copytree(ROOT / "mhatrain", where / "mhatrain", ignore=shutil.ignore_patterns("__pycache__"))
    return where


def test_decode_against_times_another_checkouts_search_and_checks_its_translations(tmp_path):
    """The other checkout's model code and search, with our weights, are the only peer; same translations."""
    options = BenchOptions(precisions=("fp32",), against=copy_of_this_checkout(tmp_path), **QUIET)
    (result,) = run_benches(["decode"], options)
    peer = f"against {tmp_path.name}"
    assert_consistent(result.to_dict(), {OURS, peer}, "sentences/s")
    checks = [c for c in result.checks if "gives our translations" in c.name]
    assert len(checks) == 2 and all(c.passed for c in checks)  # greedy and beam 4
    assert not result.targets  # an A/B of two versions has no target


def test_decode_against_notices_a_checkout_that_translates_differently(tmp_path):
    decode = copy_of_this_checkout(tmp_path) / "mhatrain" / "inference" / "search.py"
    text = decode.read_text()
    assert "return (logits.argmax(-1),)" in text  # greedy search's choice of the next token
    decode.write_text(text.replace("return (logits.argmax(-1),)", "return (logits.topk(2).indices[:, 1],)"))
    options = BenchOptions(precisions=("fp32",), against=tmp_path, beams=(1,), **QUIET)
    (result,) = run_benches(["decode"], options)
    (check,) = [c for c in result.checks if "gives our translations" in c.name]
    assert not check.passed


def test_decode_against_in_int8_quantizes_with_the_other_checkouts_own_code(tmp_path):
    """An int8 A/B compares what each version quantizes, not only its search: the other model is quantized
    by the checkout's own inference.quantized (here one that marks what it made)."""
    from mhatrain.bench.decode_bench import ModelSource, their_search
    from mhatrain.core.config import ModelConfig

    quantized = copy_of_this_checkout(tmp_path) / "mhatrain" / "inference" / "quantized.py"
    text = quantized.read_text()
    assert "    quantized = copy.deepcopy(model).float().eval()\n" in text
    quantized.write_text(
        text.replace(
            "    quantized = copy.deepcopy(model).float().eval()\n",
            "    quantized = copy.deepcopy(model).float().eval()\n    quantized.made_by = 'theirs'\n",
        )
    )
    cfg = ModelConfig(d_model=32, n_heads=4, d_ff=64, n_encoder_layers=1, n_decoder_layers=1, max_positions=64)
    model, _ = their_search(ModelSource(cfg, 40), "cpu", 0, tmp_path, "int8")
    assert model.made_by == "theirs"
    assert isinstance(model.output, torch.ao.nn.quantized.dynamic.Linear)


@pytest.mark.parametrize(
    "names, path, fragment",
    [
        (["train"], "no-such-dir", "not a checkout of mhatrain"),
        (["decode"], "no-such-dir", "not a checkout of mhatrain"),
        (["attention"], ".", "--against applies to one bench, `mhatrain bench train` or `mhatrain bench decode`"),
        (["train", "decode"], ".", "--against applies to one bench"),
    ],
)
def test_bad_against_fails_before_measuring(names, path, fragment):
    with pytest.raises(MhatrainError) as caught:
        check_options(names, BenchOptions(against=Path(path)), heads_given=False)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_the_bf16_peak_share_of_an_fp32_row_is_left_out_where_bf16_is_the_slow_mode():
    from mhatrain.bench.train_bench import peak_shares

    fast_bf16 = {"fp32": 100e9, "bf16": 400e9}
    slow_bf16 = {"fp32": 100e9, "bf16": 1e9}
    assert peak_shares(50e9, fast_bf16, "fp32") == {"fp32_peak_share": 0.5, "bf16_peak_share": 0.125}
    assert peak_shares(50e9, slow_bf16, "fp32") == {"fp32_peak_share": 0.5}
    assert peak_shares(0.5e9, slow_bf16, "bf16") == {"fp32_peak_share": 0.005, "bf16_peak_share": 0.5}


def test_the_benches_leave_bf16_out_by_default_where_this_cpu_emulates_it(monkeypatch):
    from mhatrain.core import runtime

    speeds = {torch.float32: 1.0, torch.bfloat16: 25.0}  # seconds per probe matmul: no native bf16
    monkeypatch.setattr(runtime, "_matmul_seconds", lambda dtype, repeats=3: speeds[dtype])
    logged = []
    (result,) = run_benches(["attention"], BenchOptions(heads=(8,), **QUIET), log=logged.append)
    assert {row.case for row in result.rows} == {"h=8 fp32"}
    assert result.settings["precisions"] == ["fp32"]
    (note,) = [n for n in result.notes if n.startswith("bf16 left out")]
    assert "25× slower than fp32" in note and "--precision bf16" in note
    assert any(note in line for line in logged)
    # asked for by name, bf16 is measured; the decode bench's default (the config's precision) is kept to fp32
    assert BenchOptions(precisions=("fp32", "bf16")).chosen_precisions(("fp32", "bf16"), print) == (
        ("fp32", "bf16"),
        None,
    )
    assert BenchOptions().chosen_precisions(("bf16",), print)[0] == ("fp32",)
    assert BenchOptions().chosen_precisions(("fp32",), print) == (("fp32",), None)
    speeds[torch.bfloat16] = 0.5  # a CPU with native bf16 keeps both
    assert BenchOptions().chosen_precisions(("fp32", "bf16"), print) == (("fp32", "bf16"), None)
