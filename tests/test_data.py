"""Data sources, their errors, filtering, the tokenizer cache and token-budget batches."""

from __future__ import annotations

import gzip
import json
import logging
import os

import numpy as np
import pytest
import torch

from mhatrain.core.config import DataConfig
from mhatrain.core.errors import DataError
from mhatrain.data.batches import Prefetcher, batch_indices, collate, pair_lengths
from mhatrain.data.encode import encode_corpus, encoded_cache_dir
from mhatrain.data.sources import Corpus, load_split
from mhatrain.data.tokenizer import train_data_key, train_or_load_tokenizer
from mhatrain.data.tokens import BOS, EOS, PAD, UNK, Encoded, TokenTable


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
    plain, zipped = load_split(cfg_for(tmp_path / "a"), "train"), load_split(cfg_for(tmp_path / "b"), "train")
    assert (plain.src, plain.tgt) == (zipped.src, zipped.tgt) == (["a b", "c"], ["x y", "z"])


def test_release_names_are_found_for_validation_and_test(tmp_path):
    write_pair(tmp_path, "val", ["v"], ["w"], gz=True)
    write_pair(tmp_path, "test_2016_flickr", ["t"], ["u"], gz=True)
    cfg = DataConfig(local_dir=str(tmp_path))
    assert load_split(cfg, "validation").src == ["v"]
    assert load_split(cfg, "test").tgt == ["u"]


def test_jsonl_with_fields_and_translation_dicts(tmp_path):
    rows = [{"en": "a", "de": "b"}, {"translation": {"en": "c", "de": "d"}}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    corpus = load_split(cfg_for(tmp_path), "train")
    assert (corpus.src, corpus.tgt) == (["a", "c"], ["b", "d"])


@pytest.mark.parametrize(
    "files, message",
    [
        ({}, r"no files for split 'train' \(looked for train\.en\[\.gz\]"),
        ({"train.en": b"a\n"}, r"found train\.en but not its pair train\.de"),
        ({"train.en": b"fine\nalso fine\nbad \xff byte\n", "train.de": b"a\nb\nc\n"}, r"train\.en:3: not valid UTF-8"),
        ({"train.en": b"\x00\x01\x02", "train.de": b"a\n"}, "binary file"),
        ({"train.en": b"", "train.de": b"a\n"}, "file is empty"),
        ({"train.en.gz": gzip.compress(b"a\n" * 100)[:20], "train.de": b"a\n"}, r"cannot read .*train\.en\.gz"),
        ({"train.jsonl": b'{"en": "a", "de": "b"}\n{"en": "a"}\n'}, r"train\.jsonl:2: missing language field 'de'"),
        ({"train.jsonl": b'{"en": "a", "de": "b"}\nnot json\n'}, r"train\.jsonl:2: invalid JSON"),
    ],
    ids=["no-split", "no-partner", "not-utf8", "binary", "empty", "truncated-gzip", "jsonl-field", "jsonl-syntax"],
)
def test_a_broken_split_is_one_error_that_names_its_file(tmp_path, files, message):
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(DataError, match=message):
        load_split(cfg_for(tmp_path), "train")


def test_unequal_line_counts_name_both_files_and_counts(tmp_path):
    write_pair(tmp_path, "train", ["a", "b", "c"], ["x", "y"])
    with pytest.raises(DataError) as err:
        load_split(cfg_for(tmp_path), "train")
    message = str(err.value)
    assert "train.en has 3 lines" in message and "train.de has 2" in message


def test_hub_fields_and_translation_dicts_are_read_by_column(monkeypatch):
    import datasets

    tables = {
        "fields": datasets.Dataset.from_dict({"en": ["a", "a2"], "de": ["b", "b2"]}),
        "nested": datasets.Dataset.from_dict({"translation": [{"en": "c", "de": "d"}, {"en": "c2", "de": "d2"}]}),
        "other": datasets.Dataset.from_dict({"text": ["e"]}),
        "no-de": datasets.Dataset.from_dict({"translation": [{"en": "c", "fr": "d"}]}),
        "numbers": datasets.Dataset.from_dict({"en": [1], "de": [2]}),
    }
    calls = []

    def fake_load(name, config=None, split=None):
        calls.append((name, config, split))
        return tables[name]

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    assert load_split(DataConfig(dataset="fields"), "train").tgt == ["b", "b2"]
    nested = load_split(DataConfig(dataset="nested", dataset_config="de-en"), "test")
    assert (nested.src, nested.tgt) == (["c", "c2"], ["d", "d2"])
    assert calls[1] == ("nested", "de-en", "test")
    with pytest.raises(DataError, match="no fields 'en'/'de' or 'translation'"):
        load_split(DataConfig(dataset="other"), "train")
    with pytest.raises(DataError, match="missing language field 'de' in 'translation' \\(fields: en, fr\\)"):
        load_split(DataConfig(dataset="no-de"), "train")
    with pytest.raises(DataError, match="field 'en' must hold strings"):
        load_split(DataConfig(dataset="numbers"), "train")


@pytest.fixture
def local_dataset(tmp_path, monkeypatch):
    """`datasets` offline with its cache in tmp_path, and a dataset folder (train.jsonl, translation dicts)
    that `datasets.load_dataset` reads as it reads one from the hub: returns (folder, write(rows))."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    folder = tmp_path / "corpus"
    folder.mkdir()

    def write(rows: list[tuple[str, str]], mtime: float = 1_700_000_000) -> None:
        path = folder / "train.jsonl"
        path.write_text("".join(json.dumps({"translation": {"en": s, "de": t}}) + "\n" for s, t in rows))
        os.utime(path, (mtime, mtime))  # `datasets` keys its cache by a local file's path and mtime

    return folder, write


ROWS = [(f"source {i}", f"Ziel {i}") for i in range(6)]


def test_a_local_dataset_folder_loads_through_datasets_with_a_selected_split(local_dataset):
    """The hub path for real, offline: datasets.load_dataset reads the folder, a split slice selects its
    rows in order, and the source fingerprint (the key of the tokenizer and encoded caches) follows the file."""
    from mhatrain.data.sources import source_fingerprint

    folder, write = local_dataset
    write(ROWS)
    cfg = DataConfig(dataset=str(folder), local_dir=None)
    corpus = load_split(cfg, "train[2:5]")
    assert (corpus.src, corpus.tgt) == (["source 2", "source 3", "source 4"], ["Ziel 2", "Ziel 3", "Ziel 4"])
    assert corpus.name == f"hub:{folder}/train[2:5]" and corpus.hub_fingerprint
    before = source_fingerprint(cfg, "train[2:5]")
    assert source_fingerprint(cfg, "train[2:5]") == before != source_fingerprint(cfg, "train[1:5]")
    write([*ROWS[:3], ("source 3", "geändert"), *ROWS[4:]], mtime=1_700_000_100)
    assert load_split(cfg, "train[2:5]").tgt == ["Ziel 2", "geändert", "Ziel 4"]
    assert source_fingerprint(cfg, "train[2:5]") != before


def test_a_shuffled_dataset_is_read_in_its_shuffled_order(local_dataset, monkeypatch):
    """A dataset with an indices mapping (shuffle, select) keeps the underlying table in file order:
    its rows must come out in the mapped order, not the table's."""
    import datasets

    folder, write = local_dataset
    write(ROWS)
    real = datasets.load_dataset
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kw: real(*args, **kw).shuffle(seed=3))
    corpus = load_split(DataConfig(dataset=str(folder), local_dir=None), "train")
    order = [int(s.split()[1]) for s in corpus.src]
    assert sorted(order) == list(range(6)) and order != list(range(6))
    assert corpus.tgt == [f"Ziel {i}" for i in order]
    assert corpus.src == [row["translation"]["en"] for row in real(str(folder), split="train").shuffle(seed=3)]


def test_hub_failure_suggests_local_files(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="cannot load hub dataset 'x/y' split 'train'.*data.local_dir"):
        load_split(DataConfig(dataset="x/y"), "train")


def test_tokenizer_is_cached_and_reused(toy_tokenizer):
    tokenizer, cfg = toy_tokenizer
    messages = []
    again = train_or_load_tokenizer(cfg, log=messages.append)
    assert again == tokenizer.path and "reusing cached" in messages[0]
    other = train_or_load_tokenizer(DataConfig(**{**cfg.__dict__, "vocab_size": 60}), log=lambda *_: None)
    assert other != tokenizer.path


def test_tokenizer_round_trips_and_reserves_special_ids(toy_tokenizer):
    tokenizer, _ = toy_tokenizer
    text = "The red cat sees the dog."
    assert tokenizer.decode(tokenizer.encode([text])) == [text]
    assert [tokenizer.sp.id_to_piece(i) for i in (PAD, UNK, BOS, EOS)] == ["<pad>", "<unk>", "<s>", "</s>"]


def test_filtering_counts_empty_and_long_pairs(toy_tokenizer):
    tokenizer, _ = toy_tokenizer
    corpus = Corpus("x", ["The cat.", "", "The dog " * 40, "The hat."], ["Die katze.", "Die", "Die hund", ""])
    kept = encode_corpus(tokenizer, corpus, max_length=30)
    assert (len(kept), kept.dropped_empty, kept.dropped_long, kept.index.tolist()) == (1, 2, 1, [0])
    assert kept.src.ids.dtype == np.uint16 and kept.src[0] == tokenizer.encode(["The cat."])[0]


def test_batches_respect_budget_cover_data_and_are_deterministic():
    lengths = [(i * 7) % 23 + 2 for i in range(500)]
    batches = batch_indices(lengths, max_tokens=120, seed=3, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(len(b) * max(lengths[i] for i in b) <= 120 for b in batches)
    assert batches == batch_indices(lengths, max_tokens=120, seed=3, epoch=0)
    assert batches != batch_indices(lengths, max_tokens=120, seed=3, epoch=1)
    assert batch_indices(lengths, 120) == batch_indices(lengths, 120)


def test_length_bucketing_keeps_padding_low(toy_tokenizer):
    tokenizer, cfg = toy_tokenizer
    data = encode_corpus(tokenizer, load_split(cfg, "train"), max_length=64)
    pad = cells = 0
    for indices in batch_indices(pair_lengths(data), 400, seed=1):
        batch = collate(data, indices)
        p, c = batch.padding_cells
        pad, cells = pad + p, cells + c
        assert batch.tgt_in[:, 0].eq(BOS).all()
        assert (batch.tgt_out == EOS).sum() == len(indices)
    assert pad / cells < 0.25


# Batches as the list-based code before the flat arrays made them (frozen from its output):
# the same lengths, budget and seeds must give the same batches in the same order.
FROZEN_LENGTHS = [(i * 7) % 23 + 2 for i in range(40)] + [70, 3]
FROZEN_BATCHES = {
    (3, 0): [
        [12, 35, 22],
        [18, 5, 28, 38],
        [32, 9, 19],
        [0, 23, 10, 41, 33, 20, 7, 30, 17],
        [15, 2, 25],
        [40],
        [26, 3],
        [13, 36],
        [11, 34, 21, 8, 31],
        [27, 4, 14, 37, 24, 1],
        [6, 29],
        [16, 39],
    ],
    (3, 1): [
        [15, 25, 2],
        [27, 4, 37, 14, 1, 24],
        [12, 35, 22],
        [40],
        [39, 16],
        [32, 9, 19],
        [26, 3],
        [34, 11, 21, 8, 31],
        [13, 36],
        [6, 29],
        [18, 5, 28, 38],
        [23, 0, 10, 33, 41, 20, 30, 7, 17],
    ],
    (None, 0): [
        [0, 23, 10, 33, 41, 20, 7, 30, 17],
        [4, 27, 14, 37, 1, 24],
        [11, 34, 21, 8, 31],
        [18, 5, 28, 15],
        [38, 2, 25],
        [12, 35, 22],
        [9, 32, 19],
        [6, 29],
        [16, 39],
        [3, 26],
        [13, 36],
        [40],
    ],
}


@pytest.mark.parametrize("seed,epoch", list(FROZEN_BATCHES))
def test_batches_are_those_of_the_list_based_code(seed, epoch):
    assert batch_indices(FROZEN_LENGTHS, 60, seed, epoch) == FROZEN_BATCHES[seed, epoch]
    assert batch_indices(np.array(FROZEN_LENGTHS), 60, seed, epoch) == FROZEN_BATCHES[seed, epoch]


def test_collate_pads_as_the_list_based_code():
    data = Encoded.from_lists([[5, 6, 7], [8], [9, 10]], [[11], [12, 13, 14, 15], [16, 17]], [0, 1, 2])
    batch = collate(data, [2, 0, 1])
    assert batch.src.tolist() == [[9, 10, 3, 0], [5, 6, 7, 3], [8, 3, 0, 0]]
    assert batch.tgt_in.tolist() == [[2, 16, 17, 0, 0], [2, 11, 0, 0, 0], [2, 12, 13, 14, 15]]
    assert batch.tgt_out.tolist() == [[16, 17, 3, 0, 0], [11, 3, 0, 0, 0], [12, 13, 14, 15, 3]]
    assert batch.src.dtype == torch.long and batch.indices == [2, 0, 1]


def test_token_table_selects_and_truncates():
    table = TokenTable.from_lists([[1, 2, 3], [], [4, 5], [6]], dtype=np.uint16)
    assert table.lengths.tolist() == [3, 0, 2, 1] and table[2] == [4, 5]
    picked = table.select(np.array([3, 0, 2]), max_length=2)
    assert picked.tolist() == [[6], [1, 2], [4, 5]] and picked.ids.dtype == np.uint16


def test_encoded_training_data_is_cached_and_mapped(toy_tokenizer, tmp_path):
    from mhatrain.data.tokens import load_encoded, save_encoded

    tokenizer, cfg = toy_tokenizer
    cfg = DataConfig(**{**cfg.__dict__, "cache_dir": str(tmp_path)})
    encoded = encode_corpus(tokenizer, load_split(cfg, "train"), max_length=20)
    key = train_data_key(cfg)
    where = encoded_cache_dir(cfg, key, tokenizer, 20)
    assert where == encoded_cache_dir(cfg, key, tokenizer, 20) != encoded_cache_dir(cfg, key, tokenizer, 30)
    assert load_encoded(where) is None
    save_encoded(where, encoded)
    mapped = load_encoded(where)
    assert isinstance(mapped.src.ids, np.memmap) and mapped.dropped_long == encoded.dropped_long > 0
    for a, b in ((mapped.src, encoded.src), (mapped.tgt, encoded.tgt)):
        assert a.tolist() == b.tolist()
    assert mapped.index.tolist() == encoded.index.tolist()
    order = batch_indices(pair_lengths(mapped), 300, seed=1)
    assert order == batch_indices(pair_lengths(encoded), 300, seed=1)
    assert collate(mapped, order[0]).src.equal(collate(encoded, order[0]).src)


def test_cache_key_follows_the_source_files(toy_tokenizer, toy_copy):
    tokenizer, cfg = toy_tokenizer
    cfg = DataConfig(**{**cfg.__dict__, "local_dir": str(toy_copy)})
    before = train_data_key(cfg)
    assert train_data_key(DataConfig(**{**cfg.__dict__, "max_train_examples": 10})) != before
    with open(toy_copy / "train.de", "a") as f:
        f.write("Noch ein Satz.\n")
    with open(toy_copy / "train.en", "a") as f:
        f.write("One more sentence.\n")
    assert train_data_key(cfg) != before


def test_prefetcher_yields_in_order_stops_when_left_and_raises_errors(toy_tokenizer):
    tokenizer, cfg = toy_tokenizer
    data = encode_corpus(tokenizer, load_split(cfg, "train"), max_length=64)
    groups = batch_indices(pair_lengths(data), 300, seed=2)
    with Prefetcher(lambda g: collate(data, g), groups, depth=2) as ahead:
        built = list(zip(groups, ahead))
    assert len(built) == len(groups)
    for indices, batch in built:
        direct = collate(data, indices)
        assert batch.indices == indices and batch.src.equal(direct.src) and batch.tgt_out.equal(direct.tgt_out)
    with Prefetcher(lambda g: collate(data, g), groups, depth=1) as ahead:
        next(ahead)  # left with most of the batches unbuilt
    assert not ahead._thread.is_alive()

    def broken(_):
        raise ValueError("cannot build this batch")

    with pytest.raises(ValueError, match="cannot build this batch"), Prefetcher(broken, [0]) as ahead:
        next(ahead)


def test_an_unreachable_hub_is_one_error_without_the_clients_retry_lines(monkeypatch, capfd, caplog):
    datasets = pytest.importorskip("datasets")

    def unreachable(*args, **kwargs):
        retries = logging.getLogger("huggingface_hub.utils._http")  # what the hub client logs per try
        for attempt in range(1, 6):
            retries.warning("'[Errno -2] Name or service not known' thrown while requesting HEAD https://hub")
            retries.warning(f"Retrying in 1s [Retry {attempt}/5].")
        raise ConnectionError("Couldn't reach 'someone/corpus' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(DataError, match="cannot load hub dataset 'someone/corpus' split 'train': Couldn't reach"):
        load_split(DataConfig(local_dir=None, dataset="someone/corpus"), "train")
    assert "Retry" not in capfd.readouterr().err + caplog.text
    assert logging.getLogger("huggingface_hub.utils._http").level == logging.NOTSET  # as it was
