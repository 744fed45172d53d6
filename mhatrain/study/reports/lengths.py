"""Test BLEU by source-sentence length, per h (in the manner of compare-mt's length buckets).

The test sentences are bucketed by the length of their source in words (whitespace-separated, as the
raw text has them); the corpus BLEU of every finished run that meets the study's measure (the runs the
tests count: run_records.measured_as_chosen; the others are named in a note) is recomputed on each bucket's sentences from
per-sentence sacreBLEU statistics (significance.sentence_statistics: the settings of the one scorer),
then averaged over the seeds of each h. Δ per bucket is h − h=8 over the seeds both have finished.
A bucket's BLEU is a corpus BLEU of fewer sentences: noisier than the whole test set's, the more so for
small buckets (their sizes are reported). Part of `mhatrain report` (report.md, report-lengths.csv).
"""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

from ...core.errors import MhatrainError
from ...core.files import atomic_write_text
from ...core.formatting import md_table, num, signed
from ..grid.run_records import MEASURE, measured_as_chosen, test_split
from ..stats import significance as S

# (fewest words, most words or None, label): compare-mt's style of buckets, sized for Multi30k captions
BUCKETS = ((1, 9, "≤ 9"), (10, 14, "10–14"), (15, 19, "15–19"), (20, None, "> 19"))
LENGTHS_CSV = "report-lengths.csv"


def bucket_of(words: int) -> int:
    """The index in BUCKETS of a source sentence of `words` words (an empty line counts as the shortest)."""
    for i, (_, most, _label) in enumerate(BUCKETS):
        if most is None or words <= most:
            return i
    raise AssertionError("the last bucket has no upper bound")


def length_analysis(study_dir: Path, runs: list, baseline: int = 8) -> dict | None:
    """Per h and bucket, the mean over seeds of the bucket's test BLEU and its difference to `baseline`;
    None before any run has test hypotheses. runs: run_records.RunRecord of the study's points."""
    finished = [r for r in runs if r.status == "done" and r.test_hypotheses]
    done = [r for r in finished if measured_as_chosen(r)]
    if not done:
        return None
    notes = [
        f"{r.name}: left out, as in the tests: its evaluated checkpoint is not the {MEASURE['name']} (the study's measure)"
        for r in finished
        if not measured_as_chosen(r)
    ]
    try:
        corpus = test_split(study_dir, done[0].run_dir)
    except MhatrainError as exc:
        return {"problem": f"test sources unavailable ({exc}): BLEU by length skipped"}
    members = [[] for _ in BUCKETS]
    for index, source in enumerate(corpus.src):
        members[bucket_of(len(source.split()))].append(index)
    per_run = []
    for run in done:
        hypotheses = (Path(study_dir) / run.test_hypotheses).read_text(encoding="utf-8").splitlines()
        if len(hypotheses) != len(corpus.tgt):
            notes.append(f"{run.name}: {len(hypotheses)} test hypotheses for {len(corpus.tgt)} references: left out")
            continue
        stats = S.sentence_statistics(hypotheses, corpus.tgt)
        bleu = [round(S.bleu_of(stats[index].sum(0)), 4) if index else None for index in members]
        per_run.append({"name": run.name, "heads": run.heads, "seed": run.seed, "bleu": bleu})
    by_run = {(r["heads"], r["seed"]): r["bleu"] for r in per_run}
    rows = []
    for h in sorted({r["heads"] for r in per_run}):
        seeds = [s for hh, s in by_run if hh == h]
        paired = [s for s in seeds if (baseline, s) in by_run]
        row = {"heads": h, "seeds": seeds, "bleu": [], "diff_to_baseline": [], "diff_seeds": paired}
        for b in range(len(BUCKETS)):
            values = [by_run[h, s][b] for s in seeds if by_run[h, s][b] is not None]
            row["bleu"].append(round(statistics.fmean(values), 2) if values else None)
            diffs = [
                by_run[h, s][b] - by_run[baseline, s][b]
                for s in paired
                if by_run[h, s][b] is not None and by_run[baseline, s][b] is not None
            ]
            row["diff_to_baseline"].append(round(statistics.fmean(diffs), 2) if diffs and h != baseline else None)
        rows.append(row)
    return {
        "method": "test sentences bucketed by source length in words; corpus BLEU (sacreBLEU statistics) of each "
        "bucket's sentences per run, mean over seeds per h; Δ: h − h=8 over the seeds both have",
        "baseline": baseline,
        "buckets": [
            {"label": label, "min_words": least, "max_words": most, "sentences": len(index)}
            for (least, most, label), index in zip(BUCKETS, members)
        ],
        "by_heads": rows,
        "runs": per_run,
        "notes": notes,
    }


def to_markdown(lengths: dict | None) -> list[str]:
    """report.md's section (nothing before any run has finished)."""
    if not lengths:
        return []
    if "problem" in lengths:
        return ["## Test BLEU by source length", "", lengths["problem"], ""]
    baseline = lengths["baseline"]
    headers = ["h", "seeds", *[f"{b['label']} words (n={b['sentences']})" for b in lengths["buckets"]]]
    rows = [
        [str(row["heads"]), ",".join(map(str, row["seeds"])), *[num(v) for v in row["bleu"]]]
        for row in lengths["by_heads"]
    ]
    rows += [
        [
            f"Δ h={row['heads']} − h={baseline}",
            ",".join(map(str, row["diff_seeds"])),
            *map(signed, row["diff_to_baseline"]),
        ]
        for row in lengths["by_heads"]
        if row["heads"] != baseline and any(v is not None for v in row["diff_to_baseline"])
    ]
    return [
        "## Test BLEU by source length (words), mean over seeds",
        "",
        md_table(headers, rows),
        "",
        f"Method: {lengths['method']}. Small buckets give noisy BLEU. Per run: {LENGTHS_CSV}.",
        "",
        *[f"- {note}" for note in lengths["notes"]],
        *([""] if lengths["notes"] else []),
    ]


def to_csv(lengths: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["run", "heads", "seeds", "bucket", "min_words", "max_words", "sentences", "bleu", "diff_to_h8"])
    for row in lengths["by_heads"]:
        for b, bucket in enumerate(lengths["buckets"]):
            writer.writerow(
                [
                    "mean",
                    row["heads"],
                    " ".join(map(str, row["seeds"])),
                    bucket["label"],
                    bucket["min_words"],
                    "" if bucket["max_words"] is None else bucket["max_words"],
                    bucket["sentences"],
                    "" if row["bleu"][b] is None else row["bleu"][b],
                    "" if row["diff_to_baseline"][b] is None else row["diff_to_baseline"][b],
                ]
            )
    for run in lengths["runs"]:
        for b, bucket in enumerate(lengths["buckets"]):
            writer.writerow(
                [
                    run["name"],
                    run["heads"],
                    run["seed"],
                    bucket["label"],
                    bucket["min_words"],
                    "" if bucket["max_words"] is None else bucket["max_words"],
                    bucket["sentences"],
                    "" if run["bleu"][b] is None else run["bleu"][b],
                    "",
                ]
            )
    return buffer.getvalue()


def write_csv(lengths: dict | None, study_dir: Path) -> list[Path]:
    """report-lengths.csv, when there is a length analysis to write."""
    if not lengths or "problem" in lengths:
        return []
    path = Path(study_dir) / LENGTHS_CSV
    atomic_write_text(path, to_csv(lengths))
    return [path]
