"""Issue 28 items 6 and 7 for the sanitizer: NFD text, seeded output, what the claim says about counts."""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest

from privnlp.core.rng import secure_numpy
from privnlp.mechanisms.text import Embeddings, Vickrey, word_spans
from privnlp.mechanisms.text.files import sanitize_file, sidecar_path


@pytest.fixture()
def accent_emb():
    words = ("café", "naïve", "people", "au", "lait", "do", "n't", "promise", "did", "the", "a")
    g = np.random.default_rng(0)
    return Embeddings(words, g.standard_normal((len(words), 6)))


def test_nfd_word_is_one_word_and_replaced_whole(accent_emb):
    """Plays the data recipient: no character of the original word may survive beside the replacement."""
    m = Vickrey(0.01, t=0.5, embeddings=accent_emb, oov="mask")
    for text in ("cafe\u0301 au lait", "nai\u0308ve people", "CAFE\u0301"):
        assert len(word_spans(text)) == len(text.split())
        for seed in range(20):
            out = m.sanitize(text, seed=seed)
            assert not any(unicodedata.combining(c) for c in out.text), (text, out.text)
            assert out.n_oov == 0 and out.n_words == len(text.split())  # found in NFC
    ident = Vickrey(1e7, t=0.0, embeddings=accent_emb, oov="mask")
    assert ident.sanitize("cafe\u0301 nai\u0308ve", seed=0).text == "café naïve"


def test_claim_states_what_is_released_about_word_counts(accent_emb):
    m = Vickrey(0.01, t=0.5, embeddings=accent_emb)
    notes = " ".join(m.claim().notes)
    assert "NOT preserved: the number of whitespace-separated tokens" in notes
    assert "number of vector-vocabulary units" in notes
    # the behaviour the note describes: a clitic unit replaced by a full word adds a token
    grew = 0
    for seed in range(40):
        out = m.sanitize("don't promise", seed=seed)
        assert out.n_words == 3  # do + n't + promise: the released count is the number of units
        grew += len(out.text.split()) == 3
    assert grew > 0


def test_seeded_rng_is_said_seeded_in_sidecar_and_claim(tmp_path, accent_emb):
    src = tmp_path / "in.txt"
    src.write_text("the café\nnaïve people\n", encoding="utf-8")
    m = Vickrey(5.0, embeddings=accent_emb)
    outs = []
    for i, rng in enumerate((0, 0, np.random.default_rng(3), None, secure_numpy())):
        dst = tmp_path / f"out{i}.txt"
        sanitize_file(src, dst, m, rng=rng, progress=False)
        side = json.loads(sidecar_path(dst).read_text())
        seeded = i < 3
        assert side["noise"].startswith("seeded") is seeded, side["noise"]
        for c in ("claim_per_word", "claim_per_record"):
            assert side[c]["noise_seeded"] is seeded
            assert ("noise seeded" in side[c]["statement"]) is seeded
        outs.append(dst.read_text())
    assert outs[0] == outs[1]  # rng=0 is reproducible: exactly why the sidecar must say so
