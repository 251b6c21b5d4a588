"""Issue #17: victims of the `realistic` preset (pretrained MiniLM classifier; GPT-2-style LM on Debian text)."""

from __future__ import annotations

import pytest


def test_debian_english_texts_are_real_and_deterministic():
    from privnlp.models.realistic import debian_english_texts

    a = debian_english_texts(max_paragraphs=200)
    assert len(a) == 200 and a == debian_english_texts(max_paragraphs=200)
    assert sum(" the " in t for t in a) > 100  # English prose (license texts, READMEs, changelogs)


def test_minilm_classifier_is_the_pretrained_6_layer_bert_and_rlg_recovers_labels():
    import numpy as np

    from privnlp.data import generate_sentiment
    from privnlp.evaluation.byom import audit_model
    from privnlp.models.realistic import minilm_classifier

    m, tok = minilm_classifier(num_labels=20, seed=0)
    assert m.config.num_hidden_layers == 6 and m.config.hidden_size == 384
    texts = list(generate_sentiment(40, seed=11).texts)
    labels = [int(x) for x in np.random.default_rng(0).integers(0, 20, len(texts))]
    rep = audit_model(m, tok, texts, attacks=["rlg"], labels=labels, batch_size=8, trials=1)
    # RLG paper: exact label recovery for batch size < hidden size
    assert rep.attacks[0].defended["exact_match"].mean == 1.0


@pytest.mark.slow
def test_realistic_lm_trains_on_debian_text_with_records_and_canaries():
    from privnlp.models.realistic import REALISTIC_LM, realistic_lm

    model, tok, info = realistic_lm(seed=0)
    assert model.config.n_layer >= 4 and model.config.n_embd >= 256
    assert (
        info["n_public_paragraphs"] > 1000
        and len(info["canaries"]) == REALISTIC_LM["canaries"]["n"]
    )
    assert sum(info["losses"][-10:]) / 10 < info["losses"][0] - 1.0
