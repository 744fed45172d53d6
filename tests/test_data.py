"""Data sources, their errors, filtering, the tokenizer cache and token-budget batches."""

from __future__ import annotations

import gzip
import json

import pytest

from mhatrain import data as D
from mhatrain.config import DataConfig
from mhatrain.errors import DataError

from .conftest import TOY


def cfg_for(directory, **kw) -> DataConfig:
    return DataConfig(local_dir=str(directory), train_split="train", valid_split="valid", **kw)


def write_pair(directory, split, src_lines, tgt_lines, gz=False):
    for lang, lines in (("en", src_lines), ("de", tgt_lines)):
        text = "".join(line + "\n" for line in lines).encode()
        path = directory / f"{split}.{lang}{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(text) if gz else text)


def test_plain_and_gzipped_files_give_the_same_pairs(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_pair(tmp_path / "a", "train", ["a b", "c"], ["x y", "z"])
    write_pair(tmp_path / "b", "train", ["a b", "c"], ["x y", "z"], gz=True)
    plain, zipped = D.load_split(cfg_for(tmp_path / "a"), "train"), D.load_split(cfg_for(tmp_path / "b"), "train")
    assert (plain.src, plain.tgt) == (zipped.src, zipped.tgt) == (["a b", "c"], ["x y", "z"])


def test_release_names_are_found_for_validation_and_test(tmp_path):
    write_pair(tmp_path, "val", ["v"], ["w"], gz=True)
    write_pair(tmp_path, "test_2016_flickr", ["t"], ["u"], gz=True)
    cfg = DataConfig(local_dir=str(tmp_path))
    assert D.load_split(cfg, "validation").src == ["v"]
    assert D.load_split(cfg, "test").tgt == ["u"]


def test_jsonl_with_fields_and_translation_dicts(tmp_path):
    rows = [{"en": "a", "de": "b"}, {"translation": {"en": "c", "de": "d"}}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    corpus = D.load_split(cfg_for(tmp_path), "train")
    assert (corpus.src, corpus.tgt) == (["a", "c"], ["b", "d"])


def test_missing_split_names_what_was_looked_for(tmp_path):
    with pytest.raises(DataError, match=r"no files for split 'train' \(looked for train\.en\[\.gz\]"):
        D.load_split(cfg_for(tmp_path), "train")


def test_missing_partner_file(tmp_path):
    (tmp_path / "train.en").write_text("a\n")
    with pytest.raises(DataError, match=r"found train\.en but not its pair train\.de"):
        D.load_split(cfg_for(tmp_path), "train")


def test_unequal_line_counts_name_both_files_and_counts(tmp_path):
    write_pair(tmp_path, "train", ["a", "b", "c"], ["x", "y"])
    with pytest.raises(DataError) as err:
        D.load_split(cfg_for(tmp_path), "train")
    message = str(err.value)
    assert "train.en has 3 lines" in message and "train.de has 2" in message


def test_undecodable_bytes_name_the_line(tmp_path):
    (tmp_path / "train.en").write_bytes(b"fine\nalso fine\nbad \xff byte\n")
    (tmp_path / "train.de").write_text("a\nb\nc\n")
    with pytest.raises(DataError, match=r"train\.en:3: not valid UTF-8"):
        D.load_split(cfg_for(tmp_path), "train")


def test_binary_empty_and_truncated_gzip_files(tmp_path):
    (tmp_path / "train.en").write_bytes(b"\x00\x01\x02")
    (tmp_path / "train.de").write_text("a\n")
    with pytest.raises(DataError, match="binary file"):
        D.load_split(cfg_for(tmp_path), "train")
    (tmp_path / "train.en").write_text("")
    with pytest.raises(DataError, match="file is empty"):
        D.load_split(cfg_for(tmp_path), "train")
    (tmp_path / "train.en").unlink()
    (tmp_path / "train.en.gz").write_bytes(gzip.compress(b"a\n" * 100)[:20])
    with pytest.raises(DataError, match=r"cannot read .*train\.en\.gz"):
        D.load_split(cfg_for(tmp_path), "train")


def test_jsonl_errors_name_the_line(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"en": "a", "de": "b"}\n{"en": "a"}\n')
    with pytest.raises(DataError, match=r"train\.jsonl:2: missing language field 'de'"):
        D.load_split(cfg_for(tmp_path), "train")
    (tmp_path / "train.jsonl").write_text('{"en": "a", "de": "b"}\nnot json\n')
    with pytest.raises(DataError, match=r"train\.jsonl:2: invalid JSON"):
        D.load_split(cfg_for(tmp_path), "train")


class FakeDataset:
    def __init__(self, columns: dict):
        self.columns = columns
        self.column_names = list(columns)

    def __getitem__(self, name):
        return self.columns[name]


def test_hub_fields_and_translation_dicts(monkeypatch):
    import datasets

    tables = {
        "fields": FakeDataset({"en": ["a"], "de": ["b"]}),
        "nested": FakeDataset({"translation": [{"en": "c", "de": "d"}]}),
        "other": FakeDataset({"text": ["e"]}),
    }
    calls = []

    def fake_load(name, config=None, split=None):
        calls.append((name, config, split))
        return tables[name]

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    assert D.load_split(DataConfig(dataset="fields"), "train").tgt == ["b"]
    assert D.load_split(DataConfig(dataset="nested", dataset_config="de-en"), "test").src == ["c"]
    assert calls[1] == ("nested", "de-en", "test")
    with pytest.raises(DataError, match="no fields 'en'/'de' or 'translation'"):
        D.load_split(DataConfig(dataset="other"), "train")


def test_hub_failure_suggests_local_files(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="cannot load hub dataset 'x/y' split 'train'.*data.local_dir"):
        D.load_split(DataConfig(dataset="x/y"), "train")


@pytest.fixture(scope="module")
def toy_tokenizer(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    cfg = DataConfig(local_dir=str(TOY), vocab_size=64, cache_dir=str(cache))
    path = D.train_or_load_tokenizer(cfg, D.load_split(cfg, "train"), log=lambda *_: None)
    return D.Tokenizer(path), cfg


def test_tokenizer_is_cached_and_reused(toy_tokenizer):
    tokenizer, cfg = toy_tokenizer
    messages = []
    again = D.train_or_load_tokenizer(cfg, D.load_split(cfg, "train"), log=messages.append)
    assert again == tokenizer.path and "reusing cached" in messages[0]
    other = D.train_or_load_tokenizer(
        DataConfig(**{**cfg.__dict__, "vocab_size": 60}), D.load_split(cfg, "train"), log=lambda *_: None)
    assert other != tokenizer.path


def test_tokenizer_round_trips_and_reserves_special_ids(toy_tokenizer):
    tokenizer, _ = toy_tokenizer
    text = "The red cat sees the dog."
    assert tokenizer.decode(tokenizer.encode([text])) == [text]
    assert [tokenizer.sp.id_to_piece(i) for i in (D.PAD, D.UNK, D.BOS, D.EOS)] == ["<pad>", "<unk>", "<s>", "</s>"]


def test_filtering_counts_empty_and_long_pairs(toy_tokenizer):
    tokenizer, _ = toy_tokenizer
    corpus = D.Corpus("x", ["The cat.", "", "The dog " * 40, "The hat."], ["Die katze.", "Die", "Die hund", ""])
    kept = D.encode_corpus(tokenizer, corpus, max_length=30)
    assert (len(kept), kept.dropped_empty, kept.dropped_long, kept.index) == (1, 2, 1, [0])


def test_batches_respect_budget_cover_data_and_are_deterministic():
    lengths = [(i * 7) % 23 + 2 for i in range(500)]
    batches = D.batch_indices(lengths, max_tokens=120, seed=3, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(len(b) * max(lengths[i] for i in b) <= 120 for b in batches)
    assert batches == D.batch_indices(lengths, max_tokens=120, seed=3, epoch=0)
    assert batches != D.batch_indices(lengths, max_tokens=120, seed=3, epoch=1)
    assert D.batch_indices(lengths, 120) == D.batch_indices(lengths, 120)


def test_length_bucketing_keeps_padding_low(toy_tokenizer):
    tokenizer, cfg = toy_tokenizer
    data = D.encode_corpus(tokenizer, D.load_split(cfg, "train"), max_length=64)
    pad = cells = 0
    for indices in D.batch_indices(D.pair_lengths(data), 400, seed=1):
        batch = D.collate(data, indices)
        p, c = batch.padding_cells
        pad, cells = pad + p, cells + c
        assert batch.tgt_in[:, 0].eq(D.BOS).all()
        assert (batch.tgt_out == D.EOS).sum() == len(indices)
    assert pad / cells < 0.25
