"""The privacy-noise rule for the other DP mechanisms: ``rng=None`` = OS entropy, a seed = reproducible
simulation (and the DP vocabulary's claim then says "noise seeded")."""

from __future__ import annotations

import numpy as np

from privnlp.core.claims import SEEDED_NOISE_NOTE
from privnlp.core.rng import noise_is_seeded, noise_numpy, noise_torch, secure_numpy


def test_rng_helpers():
    assert not noise_is_seeded(None) and not noise_is_seeded(secure_numpy()) and noise_is_seeded(0)
    (a, b), seeded = noise_numpy(0, 2)
    assert seeded and a.random() == noise_numpy(0, 2)[0][0].random() and a.random() != b.random()
    gs, seeded = noise_torch(None, 2)
    assert not seeded and len(gs) == 2


def test_deployments_can_refuse_seeded_noise(monkeypatch):
    import pytest

    from privnlp.core.errors import InvalidArgument

    monkeypatch.setenv("PRIVNLP_REFUSE_SEEDED_NOISE", "1")
    with pytest.raises(InvalidArgument, match="may not be seeded"):
        noise_torch(0)
    assert noise_torch(None)[1] is False and noise_numpy(secure_numpy())[1] is False


def test_text_mechanism_noise_is_secure_by_default():
    from privnlp.mechanisms.text import Embeddings, Vickrey

    words = ("good", "great", "bad", "awful", "movie", "film", "the", "a", "service", "food")
    m = Vickrey(
        0.5, embeddings=Embeddings(words, np.random.default_rng(0).standard_normal((len(words), 8)))
    )
    z1, z2 = m.sample_noise(50), m.sample_noise(50)
    assert not np.array_equal(z1, z2)  # fresh entropy each call
    assert np.array_equal(
        m.sample_noise(50, rng=3), m.sample_noise(50, rng=3)
    )  # explicit seed: simulation
    assert len(m.sanitize_many(["good movie", "bad food"])) == 2


def test_dp_wordpiece_seeded_claim_says_so():
    from privnlp.mechanisms.vocab import DPWordPiece

    texts = [f"word{i % 7} common text number {i}" for i in range(60)]
    mech = DPWordPiece(epsilon=4.0, delta=1e-3, max_words_per_contributor=4, vocab_size=200)
    seeded = mech.build(texts, rng=0)
    secure = mech.build(texts)
    assert seeded.claim.noise_seeded and SEEDED_NOISE_NOTE in seeded.claim.statement()
    assert not secure.claim.noise_seeded and SEEDED_NOISE_NOTE not in secure.claim.statement()
