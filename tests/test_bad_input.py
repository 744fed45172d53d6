"""The catalogue of bad input: every kind gives exit status 2, one line "error: ..." on stderr that
names the problem and where it is, no traceback, and leaves every existing file as it was.

Kinds (ids as in CASES; docs/troubleshooting.md explains each):
  config     config-missing, yaml-syntax, config-empty, config-not-mapping, config-not-utf8,
             unknown-section, unknown-key, wrong-type, section-not-mapping, heads-not-dividing,
             negative-size, dropout-ge-1, bad-choice, same-languages, length-over-positions,
             set-unknown-key, set-wrong-type, set-malformed, set-bad-device, data-dir-missing
  data       pair-file-missing, split-missing, line-counts-differ, empty-file, binary-file,
             not-utf8-line, corrupt-gzip, jsonl-missing-language, jsonl-invalid-json,
             jsonl-field-not-string, hub-missing-language, nothing-left-after-filtering
  runs       run-dir-missing, not-a-run-dir, no-checkpoint-yet, no-best-yet, no-averaged-yet,
             checkpoints-truncated, eval-best-damaged,
             checkpoints-garbage, checkpoints-pickle-garbage, checkpoint-runs-code, checkpoint-other-vocab, tokenizer-garbage,
             tokenizer-missing, run-config-edited, run-config-broken, resume-other-config,
             resume-other-vocab, resume-all-damaged, resume-nothing-there, train-over-a-run,
             out-dir-unwritable, attention-out-unwritable
  translate  empty-argument, overlong-argument, empty-stdin, stdin-not-utf8
  options    eval-beam-0, eval-alpha-negative, eval-checkpoint-bogus, eval-split-unknown,
             eval-set-changes-architecture, attention-layer-out-of-range, attention-layer-not-number,
             attention-kind-bogus, attention-empty-sentence, heads-metric-bogus,
             heads-checkpoint-bogus, heads-max-sentences-negative, unknown-command,
             unknown-option, missing-argument
Not here yet: the ablation command's cases (a kill mid-ablation, invalid --heads lists).

Each case runs the real CLI entry point (`mhatrain.cli.main`) with its own argv, stdio and exit
status in a process of its own, forked as every `run_cli` of the suite is (tests/forked.py);
test_forked_cli_matches_python_dash_m checks that a forked run and `python -m mhatrain` print the
same thing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from .conftest import ROOT, TINY, TOY, assert_clean_error, library_translations, run_cli, train_argv

# ----------------------------------------------------------------------------- a workspace per case


@dataclass
class Workspace:
    """Scratch copies a case may break: a trained run, the toy corpus, config files."""

    root: Path
    source_run: Path
    spm_cache: Path
    _made: dict = field(default_factory=dict)

    @property
    def run(self) -> Path:
        if "run" not in self._made:
            self._made["run"] = Path(shutil.copytree(self.source_run, self.root / "run"))
        return self._made["run"]

    @property
    def toy(self) -> Path:
        if "toy" not in self._made:
            self._made["toy"] = Path(shutil.copytree(TOY, self.root / "toy"))
        return self._made["toy"]

    @property
    def out(self) -> Path:
        return self.root / "out"

    def config(self, text: str | bytes, name: str = "c.yaml") -> str:
        path = self.root / name
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return str(path)

    def tiny(self, old: str, new: str) -> str:
        """configs/tiny.yaml with one edit, data paths absolute."""
        text = TINY.read_text().replace("local_dir: tests/data/toy", f"local_dir: {TOY}")
        assert old in text, old
        return self.config(text.replace(old, new, 1))

    def train(self, config: str | Path = TINY, *sets: str, out: Path | None = None) -> list[str]:
        return train_argv(out or self.out, *sets, spm_cache=self.spm_cache, config=config)

    def train_on_toy(self, *sets: str) -> list[str]:
        return self.train(TINY, f"data.local_dir={self.toy}", *sets)

    def checkpoints(self) -> list[Path]:
        return [self.run / n for n in ("best.pt", "last.pt", "last.prev.pt") if (self.run / n).exists()]


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def drop_last_line(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))


def set_vocab_fingerprint(path: Path, value: str) -> None:
    state = torch.load(path, weights_only=True)
    state["vocab_fingerprint"] = value
    torch.save(state, path)


class RunsCode:
    """Pickles to a call that would create a marker file if a checkpoint load ran code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def runs_code_checkpoints(ws: Workspace) -> None:
    for path in ws.checkpoints():
        torch.save({"format": 1, "model": {}, "payload": RunsCode(ws.root / "PWNED")}, path)


def jsonl(ws: Workspace, lines: list[str]) -> None:
    for lang in ("en", "de"):
        (ws.toy / f"valid.{lang}").unlink()
    (ws.toy / "valid.jsonl").write_text("".join(line + "\n" for line in lines))


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def blocker(ws: Workspace) -> Path:
    path = ws.root / "a-file"
    path.write_text("not a directory\n")
    return path


# ----------------------------------------------------------------------------- the catalogue


@dataclass
class Case:
    id: str
    make: Callable[[Workspace], list[str]]  # prepares the workspace, returns the CLI arguments
    expect: list[str]  # fragments of the error line: the problem and where it is ({root} = workspace)
    stdin: bytes = b""
    env: dict = field(default_factory=dict)  # extra environment ({root} = workspace)


def tiny_edit(id: str, old: str, new: str, *expect: str) -> Case:
    """`train` on configs/tiny.yaml with one edit (Workspace.tiny), saved as c.yaml: an error that names it."""
    return Case(id, lambda w: w.train(w.tiny(old, new)), ["c.yaml", *expect])


def on_run(id: str, argv: list[str], *expect: str) -> Case:
    """COMMAND RUN_DIR OPTIONS...: a command given the workspace's trained run after its first word."""
    return Case(id, lambda w: [argv[0], str(w.run), *argv[1:]], list(expect))


W = Workspace
CASES = [
    # --- config files and --set overrides
    Case("config-missing", lambda w: w.train(w.root / "absent.yaml"), ["config file not found", "absent.yaml"]),
    tiny_edit(
        "yaml-syntax",
        "d_ff: 128",
        "d_ff: [128",
        "c.yaml at line 8, column 3: invalid YAML",
        "flow sequence started at line 7",
    ),
    Case("config-empty", lambda w: w.train(w.config("# nothing but a comment\n")), ["c.yaml", "config file is empty"]),
    Case(
        "config-not-mapping",
        lambda w: w.train(w.config("- model\n- data\n")),
        ["c.yaml", "top level must be a mapping", "got list"],
    ),
    Case(
        "config-not-utf8",
        lambda w: w.train(w.config(TINY.read_bytes().replace(b"residual", b"r\xe9sidual"))),
        ["c.yaml", "not a UTF-8 text file"],
    ),
    tiny_edit("unknown-section", "model:", "modle:", "unknown section 'modle'", "did you mean 'model'"),
    tiny_edit("unknown-key", "n_heads: 4", "n_head: 4", "unknown key 'model.n_head'", "did you mean 'n_heads'"),
    tiny_edit("wrong-type", "d_model: 64", "d_model: wide", "'model.d_model' must be int, got str 'wide'"),
    Case(
        "section-not-mapping",
        lambda w: w.train(w.config("model: 64\n")),
        ["c.yaml", "section 'model' must be a mapping, got int"],
    ),
    tiny_edit("heads-not-dividing", "n_heads: 4", "n_heads: 3", "'model.n_heads' must divide model.d_model=64, got 3"),
    tiny_edit("negative-size", "d_ff: 128", "d_ff: -128", "'model.d_ff' must be positive, got -128"),
    tiny_edit("dropout-ge-1", "  dropout: 0.0", "  dropout: 1.0", "'model.dropout' must be in [0, 1), got 1.0"),
    tiny_edit("bad-choice", "norm: post", "norm: middle", "'model.norm' must be one of post, pre, got 'middle'"),
    tiny_edit(
        "same-languages", "tgt_lang: de", "tgt_lang: en", "'data.tgt_lang' must differ from data.src_lang ('en')"
    ),
    Case(
        "length-over-positions",
        lambda w: w.train(TINY, "data.max_length=200"),
        ["tiny.yaml", "'model.max_positions' must exceed data.max_length + 1 = 201, got 128"],
    ),
    Case(
        "set-unknown-key",
        lambda w: w.train(TINY, "train.max_token=5"),
        ["--set train.max_token=5", "unknown key 'train.max_token'", "did you mean 'max_tokens'"],
    ),
    Case(
        "set-wrong-type",
        lambda w: w.train(TINY, "train.max_steps=ten"),
        ["--set train.max_steps=ten", "'train.max_steps' must be int, got str 'ten'"],
    ),
    Case(
        "set-malformed",
        lambda w: w.train(TINY, "train.max_tokens"),
        ["--set train.max_tokens", "expected section.key=value"],
    ),
    Case(
        "set-bad-device",
        lambda w: w.train(TINY, "train.device=gpu"),
        ["'train.device' must be auto, cpu, cuda or cuda:N, got 'gpu'"],
    ),
    Case(
        "data-dir-missing",
        lambda w: w.train(TINY, f"data.local_dir={w.root / 'gone'}"),
        ["'data.local_dir' is not a directory", "gone"],
    ),
    # --- data files (a copy of the toy corpus, broken)
    Case(
        "pair-file-missing",
        lambda w: (w.toy.joinpath("valid.de").unlink(), w.train_on_toy())[1],
        ["found valid.en but not its pair valid.de", "{root}/toy"],
    ),
    Case(
        "split-missing", lambda w: w.train_on_toy("data.valid_split=dev2"), ["no files for split 'dev2'", "{root}/toy"]
    ),
    Case(
        "line-counts-differ",
        lambda w: (drop_last_line(w.toy / "train.de"), w.train_on_toy())[1],
        ["line counts differ", "{root}/toy/train.en has 2000 lines", "{root}/toy/train.de has 1999"],
    ),
    Case(
        "empty-file",
        lambda w: ((w.toy / "valid.en").write_bytes(b""), w.train_on_toy())[1],
        ["{root}/toy/valid.en: file is empty"],
    ),
    Case(
        "binary-file",
        lambda w: ((w.toy / "valid.en").write_bytes(bytes(range(256)) * 8), w.train_on_toy())[1],
        ["{root}/toy/valid.en: binary file (contains NUL bytes)"],
    ),
    Case(
        "not-utf8-line",
        lambda w: (replace_bytes(w.toy / "valid.de", 6, b"K\xe4se"), w.train_on_toy())[1],
        ["{root}/toy/valid.de:7: not valid UTF-8"],
    ),
    Case(
        "corrupt-gzip",
        lambda w: (w.toy.joinpath("valid.en").rename(w.toy / "valid.en.gz"), w.train_on_toy())[1],
        ["cannot read {root}/toy/valid.en.gz", "Not a gzipped file"],
    ),
    Case(
        "jsonl-missing-language",
        lambda w: (jsonl(w, ['{"en": "A cat.", "fr": "Un chat."}']), w.train_on_toy())[1],
        ["{root}/toy/valid.jsonl:1: missing language field 'de' (fields: en, fr)"],
    ),
    Case(
        "jsonl-invalid-json",
        lambda w: (jsonl(w, ['{"en": "a", "de": "b"}'] * 2 + ['{"en": "a", "de": ']), w.train_on_toy())[1],
        ["{root}/toy/valid.jsonl:3: invalid JSON"],
    ),
    Case(
        "jsonl-field-not-string",
        lambda w: (jsonl(w, ['{"translation": {"en": "a", "de": 5}}']), w.train_on_toy())[1],
        ["{root}/toy/valid.jsonl:1: field 'de' must be a string"],
    ),
    Case(
        "hub-missing-language",
        lambda w: (
            w.root.joinpath("hub").mkdir(),
            w.root.joinpath("hub", "train.jsonl").write_text('{"en": "a", "fr": "b"}\n'),
            w.train(TINY, "data.local_dir=null", f"data.dataset={w.root / 'hub'}"),
        )[2],
        ["hub:{root}/hub/train: no fields 'en'/'de' or 'translation' (columns: en, fr)"],
        env={
            "HF_HOME": "{root}/hf",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        },
    ),
    Case(
        "nothing-left-after-filtering",
        lambda w: w.train_on_toy("data.max_length=1"),
        ["{root}/toy/train.en+train.de: no training pairs left after filtering"],
    ),
    # --- run directories and checkpoints (a copy of a trained tiny run, broken)
    Case("run-dir-missing", lambda w: ["eval", str(w.root / "absent")], ["run directory not found: {root}/absent"]),
    Case(
        "not-a-run-dir",
        lambda w: ["translate", str(w.toy), "A cat."],
        ["{root}/toy is not a mhatrain run directory (no config.yaml)"],
    ),
    Case(
        "no-checkpoint-yet",
        lambda w: ([p.unlink() for p in w.checkpoints()], ["eval", str(w.run)])[1],
        ["{root}/run: no checkpoint yet"],
    ),
    Case(  # stopped before its first validation: last.pt, no best.pt
        "no-best-yet",
        lambda w: ((w.run / "best.pt").unlink(), ["eval", str(w.run)])[1],
        [
            "{root}/run: no best.pt yet (written at the first validation); last.pt of update 364 is there: --checkpoint last"
        ],
    ),
    Case(
        "no-averaged-yet",
        lambda w: ["eval", str(w.run), "--checkpoint", "averaged"],
        [
            "{root}/run: no averaged.pt yet (`mhatrain average` makes it); best.pt of update ",
            " and last.pt of update 364 are there: --checkpoint best or last",
        ],
    ),
    Case(
        "checkpoints-truncated",
        lambda w: ([truncate(p) for p in w.checkpoints()], ["translate", str(w.run), "A cat."])[1],
        [
            "{root}/run: no readable checkpoint: best.pt: damaged or not a mhatrain checkpoint (PytorchStreamReader "
            "failed reading zip archive: failed finding central directory); last.pt: damaged",
            "last.prev.pt: damaged",
        ],
    ),
    Case(
        "eval-best-damaged",
        lambda w: (truncate(w.run / "best.pt"), ["eval", str(w.run)])[1],
        [
            "{root}/run/best.pt: damaged or not a mhatrain checkpoint (PytorchStreamReader failed reading zip archive",
            "the best checkpoint cannot be evaluated (--checkpoint last evaluates the latest training state)",
        ],
    ),
    Case(
        "checkpoints-garbage",
        lambda w: ([p.write_bytes(os.urandom(4096)) for p in w.checkpoints()], ["translate", str(w.run), "A cat."])[1],
        ["{root}/run: no readable checkpoint: best.pt: damaged or not a mhatrain checkpoint"],
    ),
    Case(  # garbage that opens like a pickle makes torch.load warn before it fails: still one line
        "checkpoints-pickle-garbage",
        lambda w: (
            [p.write_bytes(b"\x80\x70" + bytes(range(256)) * 16) for p in w.checkpoints()],
            ["translate", str(w.run), "A cat."],
        )[1],
        ["{root}/run: no readable checkpoint: best.pt: damaged or not a mhatrain checkpoint"],
    ),
    Case(
        "checkpoint-runs-code",
        lambda w: (runs_code_checkpoints(w), ["translate", str(w.run), "A cat."])[1],
        [
            "{root}/run: no readable checkpoint: best.pt: damaged or not a mhatrain checkpoint "
            "(refused by the weights-only loader: Unsupported global"
        ],
    ),
    Case(
        "checkpoint-other-vocab",
        lambda w: (set_vocab_fingerprint(w.run / "best.pt", "0123456789abcdef"), ["translate", str(w.run), "A cat."])[
            1
        ],
        ["{root}/run: checkpoint was made with a different vocabulary than spm.model"],
    ),
    Case(
        "tokenizer-garbage",
        lambda w: (
            (w.run / "spm.model").write_bytes(b"not a sentencepiece model"),
            ["translate", str(w.run), "A cat."],
        )[1],
        ["cannot load tokenizer {root}/run/spm.model"],
    ),
    Case(
        "tokenizer-missing",
        lambda w: ((w.run / "spm.model").unlink(), ["eval", str(w.run)])[1],
        ["{root}/run: tokenizer spm.model is missing"],
    ),
    Case(
        "run-config-edited",
        lambda w: (replace_in(w.run / "config.yaml", "d_model: 64", "d_model: 128"), ["eval", str(w.run)])[1],
        ["{root}/run/best.pt: made with a different config: model.d_model (64 vs 128)"],
    ),
    Case(
        "run-config-broken",
        lambda w: (
            replace_in(w.run / "config.yaml", "d_model: 64", "d_model: [64"),
            ["translate", str(w.run), "A cat."],
        )[1],
        ["{root}/run/config.yaml at line", "invalid YAML"],
    ),
    Case(
        "resume-other-config",
        lambda w: w.train(TINY, "model.d_ff=256", out=w.run) + ["--resume"],
        ["{root}/run/last.pt: made with a different config: model.d_ff (128 vs 256)"],
    ),
    Case(
        "resume-other-vocab",
        lambda w: (
            set_vocab_fingerprint(w.run / "last.pt", "0123456789abcdef"),
            w.train(TINY, out=w.run) + ["--resume"],
        )[1],
        ["{root}/run/last.pt: made with a different vocabulary (tokenizer differs)"],
    ),
    Case(
        "resume-all-damaged",
        lambda w: ([truncate(w.run / n) for n in ("last.pt", "last.prev.pt")], w.train(TINY, out=w.run) + ["--resume"])[
            1
        ],
        ["no readable checkpoint in {root}/run", "{root}/run/last.prev.pt: damaged"],
    ),
    Case(
        "resume-nothing-there",
        lambda w: (w.out.mkdir(), w.train(TINY) + ["--resume"])[1],
        ["nothing to resume in {root}/out: not a run directory (no config.yaml)"],
    ),
    Case(
        "train-over-a-run",
        lambda w: w.train(TINY, out=w.run),
        ["{root}/run already holds a training run: pass --resume"],
    ),
    Case(
        "out-dir-unwritable",
        lambda w: w.train(TINY, out=blocker(w) / "run"),
        ["cannot create run directory {root}/a-file/run"],
    ),
    Case(
        "attention-out-unwritable",
        lambda w: ["attention", str(w.run), "A cat.", "--out", str(blocker(w) / "maps")],
        [
            "cannot write {root}/a-file/maps/attention-",
            ".png: cannot create a file in {root}/a-file/maps (Not a directory)",
        ],
    ),
    # --- translate input
    on_run("empty-argument", ["translate", "A cat.", "   "], "argument 2: empty input"),
    on_run(
        "overlong-argument",
        ["translate", "cat " * 5000],
        "argument 1: input of 20000 characters is over the limit of 10000",
    ),
    Case("empty-stdin", lambda w: ["translate", str(w.run)], ["no input: give sentences as arguments or on stdin"]),
    Case(
        "stdin-not-utf8",
        lambda w: ["translate", str(w.run)],
        ["stdin line 2: not valid UTF-8 (byte 1)"],
        stdin=b"A cat.\nK\xe4se.\n",
    ),
    # --- command options
    on_run("eval-beam-0", ["eval", "--beam", "0"], "Invalid value for '--beam'"),
    on_run("eval-alpha-negative", ["eval", "--alpha", "-1"], "Invalid value for '--alpha'"),
    on_run(
        "eval-checkpoint-bogus",
        ["eval", "--checkpoint", "newest"],
        "--checkpoint must be best, last or averaged, got 'newest'",
    ),
    on_run("eval-split-unknown", ["eval", "--split", "nosuch"], "no files for split 'nosuch'", str(TOY)),
    on_run(
        "eval-set-changes-architecture",
        ["eval", "--set", "model.n_heads=8"],
        "--set model.n_heads=8: the model was trained with model.n_heads=4",
    ),
    on_run(
        "attention-layer-out-of-range",
        ["attention", "A cat.", "--layer", "9"],
        "--layer 9: encoder self-attention has layers 1..2",
    ),
    on_run(
        "attention-layer-not-number",
        ["attention", "A cat.", "--layer", "first"],
        "--layer must be a layer number (from 1) or all, got 'first'",
    ),
    on_run(
        "attention-kind-bogus",
        ["attention", "A cat.", "--kind", "self"],
        "--kind must be enc-self, dec-self, cross or all, got 'self'",
    ),
    on_run("attention-empty-sentence", ["attention", " "], "empty sentence"),
    on_run("heads-metric-bogus", ["heads", "--metric", "accuracy"], "--metric must be bleu or loss, got 'accuracy'"),
    on_run(
        "heads-checkpoint-bogus",
        ["heads", "--checkpoint", "first"],
        "--checkpoint must be best, last or averaged, got 'first'",
    ),
    on_run("heads-max-sentences-negative", ["heads", "--max-sentences", "-1"], "Invalid value for '--max-sentences'"),
    Case("unknown-command", lambda w: ["trian", str(TINY)], ["No such command 'trian'"]),
    on_run("unknown-option", ["eval", "--bem", "3"], "No such option: --bem", "eval --help"),
    Case("missing-argument", lambda w: ["translate"], ["Missing argument 'RUN_DIR'", "translate --help"]),
]


def replace_bytes(path: Path, line: int, data: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[line] = data
    path.write_bytes(b"\n".join(lines))


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_catalogue_has_at_least_30_kinds_each_in_the_troubleshooting_table():
    assert len({case.id for case in CASES}) == len(CASES) >= 30
    table = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert [case.id for case in CASES if f"\n| {case.id} |" not in table] == []


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_one_clean_line_and_damages_nothing(case, tmp_path, tiny_run, spm_cache):
    ws = Workspace(tmp_path, tiny_run, spm_cache)
    args = case.make(ws)
    before = snapshot(tmp_path)
    env = {key: value.replace("{root}", str(tmp_path)) for key, value in case.env.items()}
    result = run_cli(*args, stdin=case.stdin, env=env)
    assert_clean_error(result, *(f.replace("{root}", str(tmp_path)) for f in case.expect))
    after = snapshot(tmp_path)
    assert {name: after.get(name) for name in before} == before, "an existing file was changed or removed"
    assert not (tmp_path / "PWNED").exists()


def test_forked_cli_matches_python_dash_m(tmp_path, tiny_run):
    """The suite's forked runner and a real `python -m mhatrain` process print the same."""
    for args in (["eval", str(tiny_run), "--beam", "0"], ["translate", str(tmp_path), "A cat."]):
        forked, real = run_cli(*args), run_cli(*args, fresh=True)
        assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)


def test_a_forked_run_past_its_timeout_is_killed_and_the_next_run_is_served(tmp_path, tiny_run, spm_cache):
    ws = Workspace(tmp_path, tiny_run, spm_cache)
    args = ws.train(TINY, "train.max_epochs=1000")
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(*args, timeout=3)
    result = run_cli("eval", str(ws.out), "--beam", "0")
    assert_clean_error(result, "Invalid value for '--beam'")


def test_a_damaged_best_checkpoint_is_named_and_last_pt_used_instead(tmp_path, tiny_run):
    run = Path(shutil.copytree(tiny_run, tmp_path / "run"))
    truncate(run / "best.pt")
    result = run_cli("translate", str(run), "The red cat sees the dog.")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == library_translations(run, ["The red cat sees the dog."], "last")
    assert result.stderr.startswith(f"warning: {run}/best.pt: damaged or not a mhatrain checkpoint (")
    assert result.stderr.rstrip().endswith("; using last.pt instead")


def test_a_run_without_best_pt_is_translated_with_last_pt_and_says_so(tmp_path, tiny_run):
    """Stopped before its first validation: translate uses last.pt, and says so, since eval would refuse."""
    run = Path(shutil.copytree(tiny_run, tmp_path / "run"))
    (run / "best.pt").unlink()
    result = run_cli("translate", str(run), "The red cat sees the dog.")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == library_translations(run, ["The red cat sees the dog."], "last")
    assert result.stderr.splitlines() == [f"note: {run} has no best.pt yet; using last.pt (update 364)"]
