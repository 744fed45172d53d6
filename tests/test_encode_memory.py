"""Blockwise encoding (issue 17.1): encoding and filtering a split block by block, to bound memory,
gives exactly the arrays of encoding it in one go."""

from __future__ import annotations

import numpy as np
import pytest

from mhatrain.core.config import DataConfig
from mhatrain.data.encode import encode_corpus
from mhatrain.data.sources import Corpus, load_split
from mhatrain.data.tokenizer import Tokenizer
from mhatrain.data.tokens import Encoded, TokenTable

from .conftest import TOY

MAX_LENGTH = 22  # with the toy tokenizer (vocabulary 64) this keeps about half of the toy pairs


@pytest.fixture(scope="module")
def tokenizer(toy_tokenizer) -> Tokenizer:
    return toy_tokenizer[0]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    """The toy training pairs with an empty side and an over-long pair spliced in."""
    toy = load_split(DataConfig(local_dir=str(TOY)), "train")
    src, tgt = toy.src[:40], toy.tgt[:40]
    src[3], tgt[17] = "", ""
    src[25] = " ".join(src[:6])
    return Corpus("toy", src, tgt)


def assert_same(a: Encoded, b: Encoded) -> None:
    for x, y in [(a.src, b.src), (a.tgt, b.tgt)]:
        assert x.ids.dtype == y.ids.dtype and x.ids.tobytes() == y.ids.tobytes()
        assert x.offsets.dtype == y.offsets.dtype and x.offsets.tobytes() == y.offsets.tobytes()
    assert a.index.dtype == b.index.dtype and a.index.tobytes() == b.index.tobytes()
    assert (a.dropped_empty, a.dropped_long) == (b.dropped_empty, b.dropped_long)


@pytest.mark.parametrize("max_length", [None, MAX_LENGTH])
@pytest.mark.parametrize("block", [1, 3, 7, 39, 40, 41, 1000])  # uneven splits, exact, and one block
def test_blockwise_encoding_gives_the_arrays_of_one_block(tokenizer, corpus, block, max_length):
    whole = encode_corpus(tokenizer, corpus, max_length, block=len(corpus))
    assert_same(encode_corpus(tokenizer, corpus, max_length, block=block), whole)


@pytest.mark.parametrize("max_length", [None, MAX_LENGTH])
def test_one_block_matches_encoding_every_sentence_at_once(tokenizer, corpus, max_length):
    src, tgt = tokenizer.encode(corpus.src), tokenizer.encode(corpus.tgt)
    keep = [
        k
        for k in range(len(corpus))
        if max_length is None or (src[k] and tgt[k] and len(src[k]) <= max_length and len(tgt[k]) <= max_length)
    ]
    encoded = encode_corpus(tokenizer, corpus, max_length, block=len(corpus))
    assert encoded.src.tolist() == [src[k] for k in keep] and encoded.tgt.tolist() == [tgt[k] for k in keep]
    assert encoded.index.tolist() == keep
    assert encoded.src.ids.dtype == np.uint16 and encoded.index.dtype == np.int64
    if max_length is not None:  # the spliced-in pairs are dropped and counted
        assert (encoded.dropped_empty, encoded.dropped_long) == (2, len(corpus) - len(keep) - 2)
        assert encoded.dropped_long >= 1 and len(keep) >= 10


@pytest.mark.parametrize("block", [1, 5])
def test_empty_corpus_encodes_to_empty_arrays(tokenizer, block):
    encoded = encode_corpus(tokenizer, Corpus("empty", [], []), MAX_LENGTH, block=block)
    assert len(encoded) == 0 and encoded.src.offsets.tolist() == [0] and encoded.tgt.offsets.tolist() == [0]
    assert encoded.src.ids.size == 0 and encoded.src.ids.dtype == np.uint16 and encoded.index.dtype == np.int64
    assert (encoded.dropped_empty, encoded.dropped_long) == (0, 0)


def test_concat_joins_tables_in_order():
    tables = [TokenTable.from_lists(s, np.uint16) for s in ([[1, 2], []], [], [[3], [4, 5, 6]])]
    joined = TokenTable.concat(tables)
    assert joined.tolist() == [[1, 2], [], [3], [4, 5, 6]]
    assert joined.ids.dtype == np.uint16 and joined.offsets.dtype == np.int64
