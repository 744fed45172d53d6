"""Head roles over a corpus: the measures on hand-made attention, padding, classes, the CLI, the report."""

from __future__ import annotations

import json
import math

import pytest
import torch

from mhatrain.analysis.roles import classify, role_counts, role_records, row_measures, study_role_measures
from mhatrain.data.batches import collate
from mhatrain.data.tokens import BOS, EOS, Encoded

from .conftest import run_cli


def one_example(p: torch.Tensor, kind: str, keys: list[int]):
    """[Tq, Tk] probabilities of one head, one sentence → measures (means over rows)."""
    Tq, Tk = p.shape
    query = torch.ones(1, Tq, dtype=torch.bool)
    key_valid = torch.ones(1, Tq, Tk, dtype=torch.bool)
    if kind == "dec-self":
        key_valid &= torch.ones(Tq, Tk, dtype=torch.bool).tril()
    sink = torch.tensor([[k in (EOS, BOS) for k in keys]], dtype=torch.float)
    sums = row_measures(p[None, None, None], query, key_valid, sink, kind)
    rows, normalised_rows = float(sums.pop("_rows")), float(sums.pop("_normalised_rows"))
    return {
        name: float(v[0, 0]) / (normalised_rows if name == "entropy_normalised" else rows) for name, v in sums.items()
    }


def test_a_previous_token_head_is_positional():
    T = 5
    p = torch.zeros(T, T)
    p[0, 0] = 1.0
    for i in range(1, T):
        p[i, i - 1] = 1.0
    m = one_example(p, "dec-self", [BOS, 5, 6, 7, 8])
    assert m["previous"] == pytest.approx(4 / 5) and m["same"] == pytest.approx(1 / 5)
    assert m["confidence"] == pytest.approx(1.0) and m["entropy"] == pytest.approx(0.0)
    assert m["sink"] == pytest.approx(2 / 5)  # rows 0 and 1 look at <s>
    assert classify(m, "dec-self") == "positional"


def test_an_end_of_sentence_sink_and_a_diffuse_head():
    keys = [5, 6, 7, EOS]
    sink = torch.zeros(4, 4)
    sink[:, 3] = 1.0
    assert classify(one_example(sink, "enc-self", keys), "enc-self") == "sink"
    uniform = torch.full((4, 4), 0.25)
    m = one_example(uniform, "enc-self", keys)
    assert m["entropy"] == pytest.approx(math.log(4)) and m["entropy_normalised"] == pytest.approx(1.0)
    assert classify(m, "enc-self") == "diffuse"
    content = torch.tensor([[0.05, 0.85, 0.05, 0.05]] * 4)  # mostly one content word
    assert classify(one_example(content, "enc-self", keys), "enc-self") == "other"


def test_cross_attention_on_the_proportional_diagonal_is_positional():
    T, S = 4, 7  # rows i look at source position round(i · 6 / 3) = 2i
    p = torch.zeros(T, S)
    for i in range(T):
        p[i, 2 * i] = 1.0
    m = one_example(p, "cross", [5, 6, 7, 8, 9, 10, EOS])
    assert m["diagonal"] == pytest.approx(1.0)
    assert classify(m, "cross") == "positional"
    p = torch.zeros(T, S)
    p[:, 0] = 1.0  # always the first source word
    assert one_example(p, "cross", [5, 6, 7, 8, 9, 10, EOS])["diagonal"] == pytest.approx(1 / 4)


def test_padding_rows_and_keys_do_not_count(tiny_run):
    """A batch of two padded sentences gives the row-weighted mean of the two sentences alone."""
    from mhatrain.analysis.roles import measure_roles
    from mhatrain.inference.trained import load_run

    run = load_run(tiny_run)
    run.model.eval()
    pairs = Encoded.from_lists([[5, 6, 7], [8, 9, 10, 11, 12, 13]], [[14, 15], [16, 17, 18, 19, 20]], [0, 1])
    both = measure_roles(run.model, [collate(pairs, [0, 1])])
    alone = [measure_roles(run.model, [collate(pairs, [i])]) for i in (0, 1)]
    rows = {"enc-self": (4, 7), "dec-self": (3, 6), "cross": (3, 6)}  # query rows of each sentence
    for kind, (a, b) in rows.items():
        for name in ("entropy", "confidence", "previous", "sink"):
            expected = (a * alone[0][kind][name] + b * alone[1][kind][name]) / (a + b)
            torch.testing.assert_close(both[kind][name], expected, rtol=1e-4, atol=1e-5)


def test_heads_roles_command_and_the_study_report(tiny_run, tmp_path):
    result = run_cli("heads", str(tiny_run), "--roles", "--max-sentences", "30", "--out", str(tmp_path / "h"))
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads((tmp_path / "h" / "roles-valid.json").read_text())
    config = json.loads(json.dumps(report))  # plain JSON
    n_heads = config["n_heads"]
    assert report["sentences"] == 30
    for kind in ("enc-self", "dec-self", "cross"):
        heads = [r for r in report["heads"] if r["kind"] == kind]
        assert sum(report["counts"][kind].values()) == len(heads) and len(heads) % n_heads == 0
        assert all(0 <= r["sink"] <= 1 + 1e-4 and r["confidence"] >= 1 / 64 for r in heads)
    assert "Head roles over 30 sentences" in result.stdout and "enc-self:" in result.stdout
    for record in report["heads"]:
        assert record["role"] == role_by_the_docstring(record), record
    for kind, counts in report["counts"].items():
        roles = [r["role"] for r in report["heads"] if kind in ("all", r["kind"])]
        assert counts == {role: roles.count(role) for role in ("sink", "positional", "diffuse", "other")}, kind


def role_by_the_docstring(record: dict) -> str:
    """A head's class as roles.py's docstring states the rule, from the measures its record saved."""
    if record["sink"] >= 0.5:
        return "sink"
    if record["kind"] == "cross":
        positional = record["diagonal"]
    else:
        positional = max(record["previous"], record["same"], record["next"])
    if positional >= 0.5:
        return "positional"
    return "diffuse" if record["entropy_normalised"] >= 0.75 else "other"


def test_the_measures_of_one_sentence_are_those_of_its_attention_maps(tiny_run):
    """measure_roles on one unpadded pair, recomputed here row by row from the maps of attention_maps."""
    from mhatrain.analysis.maps import FIELDS, KINDS, attention_maps
    from mhatrain.analysis.roles import measure_roles
    from mhatrain.inference.trained import load_run

    run = load_run(tiny_run)
    run.model.eval()
    batch = collate(Encoded.from_lists([[5, 6, 7, 8, 9, 10]], [[14, 15, 16]], [0]), [0])
    measured = measure_roles(run.model, [batch])
    attention = attention_maps(run.model, batch.src, batch.tgt_in)
    src, tgt = batch.src[0].tolist(), batch.tgt_in[0].tolist()  # source + </s>; <s> + target
    for kind in KINDS:
        keys, sink = (tgt, BOS) if kind == "dec-self" else (src, EOS)
        for layer, maps in enumerate(getattr(attention, FIELDS[kind])):
            for head, p in enumerate(maps[0].double().tolist()):  # p: [Tq][Tk]
                rows = [row_measures_by_hand(row, i, keys, sink, kind, len(src), len(tgt)) for i, row in enumerate(p)]
                for name in rows[0]:
                    values = [r[name] for r in rows if r[name] is not None]
                    expected = pytest.approx(sum(values) / len(values), abs=1e-5)
                    assert float(measured[kind][name][layer, head]) == expected, (kind, layer, head, name)


def row_measures_by_hand(row: list[float], i: int, keys: list[int], sink: int, kind: str, S: int, T: int) -> dict:
    """The measures of query row i (roles.py's docstring); entropy_normalised is None where the row may
    attend to one key only (dec-self's first row), which the mean leaves out."""
    allowed = i + 1 if kind == "dec-self" else len(keys)
    entropy = -sum(x * math.log(x) for x in row if x > 0)
    measures = {
        "entropy": entropy,
        "entropy_normalised": entropy / math.log(allowed) if allowed >= 2 else None,
        "confidence": max(row),
        "previous": row[i - 1] if 0 < i <= len(row) else 0.0,
        "same": row[i] if i < len(row) else 0.0,
        "next": row[i + 1] if i + 1 < len(row) else 0.0,
        "sink": sum(x for x, key in zip(row, keys) if key == sink),
    }
    if kind == "cross":  # source keys within one position of j = i · (S - 1) / (T - 1)
        measures["diagonal"] = sum(x for j, x in enumerate(row) if abs(j - i * (S - 1) / (T - 1)) <= 1)
    return measures


def test_role_records_number_layers_and_heads_from_one():
    means = {
        "cross": {
            name: torch.zeros(2, 3)
            for name in ("entropy", "entropy_normalised", "confidence", "previous", "same", "next", "sink", "diagonal")
        }
    }
    records = role_records(means)
    assert [(r["layer"], r["head"]) for r in records] == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]
    assert {r["role"] for r in records} == {"other"}


def _record(kind, role="other", **measures):
    base = dict.fromkeys(("entropy_normalised", "confidence", "previous", "same", "next", "sink"), 0.0)
    return {"kind": kind, "layer": 1, "head": 1, **base, **measures, "role": role}


def test_role_counts_list_each_kind_then_all():
    records = [_record("enc-self", "sink"), _record("dec-self"), _record("enc-self"), _record("cross", "positional")]
    counts = role_counts(records)
    assert list(counts) == ["enc-self", "dec-self", "cross", "all"]
    assert counts["enc-self"] == {"sink": 1, "positional": 0, "diffuse": 0, "other": 1}
    assert counts["all"] == {"sink": 1, "positional": 1, "diffuse": 0, "other": 2}


def test_study_role_measures_average_every_head_of_every_run_per_kind():
    one = {"heads": [_record("enc-self", previous=0.6, same=0.1, sink=0.2), _record("cross", diagonal=0.5, next=0.9)]}
    two = {"heads": [_record("enc-self", next=0.2, confidence=0.4, sink=0.4), _record("cross", diagonal=0.3)]}
    measures = study_role_measures({"h08-seed1": one, "h08-seed2": two})
    assert measures["enc-self"] == pytest.approx(
        {"entropy_normalised": 0.0, "confidence": 0.2, "neighbour": 0.4, "sink": 0.3}
    )
    # cross-attention has no neighbour measure (its keys are the source), but the diagonal
    assert measures["cross"] == pytest.approx(
        {"entropy_normalised": 0.0, "confidence": 0.0, "diagonal": 0.4, "sink": 0.0}
    )
    assert study_role_measures({}) is None
