"""Tokenizer trainers: round trip, special tokens, reproducibility (in-process and across processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.models import train_bpe_tokenizer, train_wordpiece_tokenizer
from privnlp.models.tokenization import _vocab_fingerprint


def test_bpe_roundtrip_and_special_tokens(bpe, texts):
    assert bpe.bos_token == bpe.eos_token == bpe.unk_token == bpe.pad_token == "<|endoftext|>"
    assert bpe.pad_token_id == bpe.eos_token_id
    assert bpe.model_max_length == 128
    assert 257 < len(bpe) <= 400
    for t in [*texts[:5], "Ünïcödé ✓ never seen — 123-45-6789", "  two  spaces\nand a newline"]:
        ids = bpe(t)["input_ids"]
        assert bpe.decode(ids) == t  # byte level: exact round trip, even for unseen characters
    # merges learned: frequent words are single tokens
    assert len(bpe(" phone")["input_ids"]) == 1


def test_wordpiece_specials_and_post_processor(wordpiece, texts):
    assert [wordpiece.convert_ids_to_tokens(i) for i in range(5)] == [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
    ]
    assert wordpiece.pad_token_id == 0 and wordpiece.mask_token == "[MASK]"
    enc = wordpiece("Alice called Bob", "at the clinic")
    toks = wordpiece.convert_ids_to_tokens(enc["input_ids"])
    assert toks[0] == "[CLS]" and toks.count("[SEP]") == 2 and toks[-1] == "[SEP]"
    assert enc["token_type_ids"][-1] == 1 and enc["token_type_ids"][0] == 0
    t = texts[3]
    assert wordpiece.decode(wordpiece(t)["input_ids"], skip_special_tokens=True).replace(
        " ", ""
    ) == t.lower().replace(" ", "")
    assert wordpiece.convert_ids_to_tokens(wordpiece("zzz€")["input_ids"])[1:-1] == ["[UNK]"]


def test_tokenizers_reproducible_and_order_independent(texts, bpe, wordpiece):
    rev = list(reversed(texts))
    assert _vocab_fingerprint(train_bpe_tokenizer(rev, 400)) == _vocab_fingerprint(bpe)
    assert _vocab_fingerprint(train_wordpiece_tokenizer(rev, 300)) == _vocab_fingerprint(wordpiece)


@pytest.fixture(scope="module")
def other_process() -> list:
    """Builds in a second interpreter (other hash seeds, TOKENIZERS_PARALLELISM unset)."""
    code = (
        f"import json,sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); from conftest import make_texts;"
        "from privnlp.models import train_bpe_tokenizer as b, train_wordpiece_tokenizer as w;"
        "from privnlp.models.tokenization import _vocab_fingerprint as f; t=make_texts();"
        "print(json.dumps([f(b(t, 400)), f(w(t, 300)), w(make_texts(400), 150).get_vocab()]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
    env["PYTHONHASHSEED"] = "12345"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tokenizers_reproducible_across_processes(other_process, bpe, wordpiece):
    assert other_process[:2] == [_vocab_fingerprint(bpe), _vocab_fingerprint(wordpiece)]
    assert (
        os.environ.get("TOKENIZERS_PARALLELISM") == "false"
    )  # restored (set by tests/conftest.py)


def test_wordpiece_reproducible_at_vocab_cutoff(other_process, text_factory):
    """With a vocab_size cut-off (ties between last merges) two processes still agree exactly
    (the upstream WordPiece trainer did not: tokenizers#1794)."""
    local = train_wordpiece_tokenizer(text_factory(400), 150).get_vocab()
    assert len(local) == 150 and local == other_process[2]
    assert any(t.startswith("##") and len(t) > 3 for t in local)  # real merges happened


@pytest.mark.parametrize(
    "fn,kwargs,match",
    [
        (train_bpe_tokenizer, {"vocab_size": 100}, "vocab_size"),
        (train_wordpiece_tokenizer, {"vocab_size": 3}, "vocab_size"),
        (train_bpe_tokenizer, {"min_frequency": 0}, "min_frequency"),
    ],
)
def test_tokenizer_bad_arguments(fn, kwargs, match, texts):
    with pytest.raises(InvalidArgument, match=match):
        fn(texts, **kwargs)


def test_tokenizer_bad_texts():
    with pytest.raises(InvalidArgument, match="texts"):
        train_bpe_tokenizer("a single string")
    with pytest.raises(InvalidArgument, match="non-empty"):
        train_wordpiece_tokenizer(["", "  "])
    with pytest.raises(InvalidArgument, match=r"texts\[1\]"):
        train_bpe_tokenizer(["ok", 3])
