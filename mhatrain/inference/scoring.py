"""Scoring: sacreBLEU on detokenised output against the raw references, with signatures.

The same `score()` serves validation during training, `mhatrain eval` and `mhatrain score`; the
text it scores comes from a split of the config's source, from a pair of files, or from a named
sacreBLEU test set in sacreBLEU's cache.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from rich.table import Table
from sacrebleu.dataset import DATASETS
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.utils import SACREBLEU_DIR

from ..core import provenance
from ..core.errors import DataError, MhatrainError
from ..core.files import atomic_write_json
from ..data.sources import read_lines


def bleu_score(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
    """Cased, detokenised BLEU with the 13a tokenizer (sacreBLEU's default): (score, signature)."""
    metric = BLEU()
    return metric.corpus_score(hypotheses, [references]).score, str(metric.get_signature())


def score(hypotheses: list[str], references: list[str]) -> dict:
    """BLEU, chrF and a lowercased BLEU for comparison with papers that lowercase and tokenize."""
    bleu, bleu_signature = bleu_score(hypotheses, references)
    chrf_metric = CHRF()
    chrf = chrf_metric.corpus_score(hypotheses, [references]).score
    lower_metric = BLEU(lowercase=True, tokenize="13a")
    lower = lower_metric.corpus_score(hypotheses, [references]).score
    return {
        "bleu": round(bleu, 2),
        "bleu_signature": bleu_signature,
        "chrf": round(chrf, 2),
        "chrf_signature": str(chrf_metric.get_signature()),
        "bleu_lowercased_tokenized": round(lower, 2),
        "bleu_lowercased_tokenized_signature": str(lower_metric.get_signature()),
        "sentences": len(hypotheses),
    }


# ----------------------------------------------------------------------------- text to score


def read_aligned(files: dict[str, Path]) -> list[list[str]]:
    """The lines of each file (plain or .gz), which must be as many in every file; `files` maps the
    option that named a file (for messages, e.g. "--hyp") to its path."""
    texts = [read_lines(Path(path)) for path in files.values()]
    counts = {f"{option} {path}": len(text) for (option, path), text in zip(files.items(), texts)}
    if len(set(counts.values())) > 1:
        raise DataError("line counts differ: " + ", ".join(f"{name} has {n} lines" for name, n in counts.items()))
    return texts


def sacrebleu_test_set(name: str, langpair: str) -> tuple[Path, Path]:
    """Source and reference files of a named sacreBLEU test set, read from sacreBLEU's own cache (the
    SACREBLEU environment variable, default ~/.sacrebleu) as its `sacrebleu -t NAME -l PAIR` leaves
    them. Never downloads: fetch a set once with `sacrebleu -t NAME -l PAIR --echo src > /dev/null`."""
    if name not in DATASETS:
        close = difflib.get_close_matches(name, list(DATASETS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else " (see `sacrebleu --list`)"
        raise MhatrainError(f"--sacrebleu-set: unknown sacreBLEU test set {name!r}{hint}")
    if langpair not in DATASETS[name].langpairs:
        raise MhatrainError(
            f"--langpair: sacreBLEU test set {name} has no language pair {langpair!r} "
            f"(it has: {', '.join(sorted(DATASETS[name].langpairs))})"
        )
    stem = Path(SACREBLEU_DIR) / name / f"{name.replace('/', '_')}.{langpair}"
    src, ref = Path(f"{stem}.src"), Path(f"{stem}.ref")
    if not (src.is_file() and ref.is_file()):
        more = sorted(p.name for p in stem.parent.glob(f"{stem.name}.ref?*")) if src.is_file() else []
        why = (
            f"it holds several references ({', '.join(more)}); score one with --ref"
            if more
            else f"fetch it once with `sacrebleu -t {name} -l {langpair} --echo src > /dev/null`, or set SACREBLEU"
        )
        raise MhatrainError(f"sacreBLEU test set {name} {langpair} is not in sacreBLEU's cache {SACREBLEU_DIR}: {why}")
    return src, ref


def score_files(hyp: Path, ref: Path | None, sacrebleu_set: str | None, langpair: str | None) -> dict:
    """`mhatrain score`: score a hypothesis file against a reference file or a sacreBLEU test set's."""
    if (ref is None) == (sacrebleu_set is None):
        raise MhatrainError(
            "give the references with --ref FILE or --sacrebleu-set NAME --langpair SRC-TGT (one of them)"
        )
    if sacrebleu_set is not None:
        if langpair is None:
            raise MhatrainError("--sacrebleu-set needs --langpair, e.g. --langpair en-de")
        ref = sacrebleu_test_set(sacrebleu_set, langpair)[1]
    elif langpair is not None:
        raise MhatrainError("--langpair goes with --sacrebleu-set")
    hyps, refs = read_aligned({"--hyp": hyp, "--ref": ref})
    result = score(hyps, refs)
    result.update(
        hypotheses=str(hyp),
        references=str(ref),
        provenance=provenance.session(
            data={"hypotheses": provenance.files_record(hyp), "references": provenance.files_record(ref)}
        ),
    )
    return result


def write_scores(result: dict, json_path: Path | None, console) -> None:
    """`score --json FILE`: the scores, signatures and provenance as JSON (nothing without a FILE)."""
    if json_path is not None:
        atomic_write_json(json_path, result)
        console.print(f"report: {json_path}")


def show_scores(result: dict, title: str, console) -> None:
    """The three scores as a table, then their signatures."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("score", justify="right")
    table.add_row("BLEU (sacreBLEU: cased, detokenised)", f"{result['bleu']:.2f}")
    table.add_row("chrF", f"{result['chrf']:.2f}")
    table.add_row("BLEU lowercased, 13a-tokenised (for the literature)", f"{result['bleu_lowercased_tokenized']:.2f}")
    ce = result.get("cross_entropy")
    if ce:  # eval's: the model's likelihood of the references (score --hyp has none)
        table.add_row(
            "reference cross-entropy, nats/token (teacher-forced, no smoothing)", f"{ce['nats_per_token']:.4f}"
        )
        table.add_row("reference perplexity", f"{ce['perplexity']:.2f}")
    console.print(table)
    console.print(
        f"BLEU signature: {result['bleu_signature']}\nchrF signature: {result['chrf_signature']}\n"
        f"lowercased BLEU signature: {result['bleu_lowercased_tokenized_signature']}",
        highlight=False,
    )
