"""Random Sampling / Beam Search memorization tests and Carlini-style extraction."""

from __future__ import annotations

import numpy as np
import pytest

from privnlp.attacks.memorization import (
    CanaryExtraction,
    beam_search_test,
    federated_secret_sharer,
    random_sampling_test,
    render_partial,
)
from privnlp.core.observations import BlackBoxLM
from privnlp.data import make_canary


def test_render_partial():
    c = make_canary("my social security number is {ssn}", rng=0)
    sym = [v for vals in c.values for v in vals]
    assert render_partial(c, sym) == c.text
    assert (
        render_partial(c, sym[:4])
        == "my social security number is " + "".join(sym[:3]) + "-" + sym[3]
    )
    assert render_partial(c, []) == "my social security number is"
    w = make_canary("the words {words:3} end", rng=0)
    assert render_partial(w, list(w.values[0][:1])) == "the words " + w.values[0][0]


def test_bs_and_rs_extract_memorized_canary_only(canary_lms):
    with_c, without = canary_lms
    c = with_c["canaries"][0]
    assert beam_search_test(with_c["model"], with_c["tokenizer"], c)[0]
    assert not beam_search_test(without["model"], without["tokenizer"], c)[0]
    assert random_sampling_test(with_c["model"], with_c["tokenizer"], c, n_samples=300, rng=0)[0]
    assert not random_sampling_test(
        without["model"], without["tokenizer"], c, n_samples=300, rng=0
    )[0]


def test_carlini_extraction_attack(canary_lms):
    with_c, without = canary_lms
    c = with_c["canaries"][0]
    atk = CanaryExtraction(beam_width=16, n_samples=200)
    hit = atk.run(
        BlackBoxLM(
            model=with_c["model"], tokenizer=with_c["tokenizer"], meta={"canary_pattern": c.pattern}
        ),
        rng=0,
    ).score(c)
    miss = atk.run(
        BlackBoxLM(
            model=without["model"],
            tokenizer=without["tokenizer"],
            meta={"canary_pattern": c.pattern},
        ),
        rng=0,
    ).score(c)
    assert hit["extracted"] == 1.0 and hit["edit_distance"] == 0.0 and hit["bs_memorized"] == 1.0
    assert miss["extracted"] == 0.0 and miss["bs_memorized"] == 0.0


def test_federated_secret_sharer_rates():
    from privnlp.data.corpus import Record

    recs = [
        Record(id=f"r{i}", user_id=f"u{i // 10}", kind="note", text="x", spans=())
        for i in range(10000)
    ]
    c = make_canary("my pin code is {digits:4}", rng=0)
    out, sharers, n = federated_secret_sharer(recs, c, p_u=0.5, p_e=0.2, rng=0)
    assert 400 <= len(sharers) <= 600
    assert abs(n - 0.2 * 10 * len(sharers)) < 0.25 * 0.2 * 10 * len(sharers)
    assert all(r.text == "x" for r in out if r.user_id not in sharers)


# ------------------------------------------------------------------ a BPE that merged the secret (issue #17)
@pytest.fixture(scope="module")
def merged_lm():
    """A tiny GPT-2 whose byte-level BPE (no digit splitting, GPT-2's own rule) learned the 16-times repeated
    secret as fewer tokens than it has digits: the realistic LM's situation."""
    import torch

    from privnlp.data import generate_corpus, make_canary
    from privnlp.models import tiny_gpt2, train_bpe_tokenizer, train_lm

    torch.set_num_threads(1)
    g = np.random.default_rng(3)
    corpus = generate_corpus(n_users=12, records_per_user=10, seed=3)
    c = make_canary("my pin code is {digits:4}", rng=g)
    texts = [r.text for r in corpus.records] + [c.text] * 16
    texts = [texts[i] for i in g.permutation(len(texts))]
    tok = train_bpe_tokenizer(texts, 500, model_max_length=64)
    eos = tok.eos_token_id
    model = tiny_gpt2(
        len(tok),
        n_layer=2,
        n_embd=64,
        n_head=2,
        n_positions=64,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        seed=3,
    )
    train_lm(model, tok, texts, steps=200, batch_size=12, lr=3e-3, max_length=48, rng=3)
    model.eval()
    return model, tok, c


def test_prefix_log_probs_is_a_distribution_over_first_characters(merged_lm):
    """Every token starts with some character, so P(starts with ch) summed over all first characters is 1;
    a single character's probability is the mass of the tokens that start with it."""
    import torch

    from privnlp.attacks.memorization._lm import prefix_log_probs, token_strings

    model, tok, c = merged_lm
    strs = token_strings(tok)
    assert strs is not None
    firsts = sorted({s[0] for s in strs if s})
    lp = prefix_log_probs(model, tok, "my pin code is", firsts)
    assert abs(float(np.exp(lp).sum()) - 1.0) < 1e-4
    ids = tok("my pin code is", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        nxt = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
    space = [i for i, s in enumerate(strs) if s.startswith(" ")]
    assert abs(float(lp[firsts.index(" ")]) - float(torch.logsumexp(nxt[space], 0))) < 1e-4


def test_extraction_finds_a_secret_the_bpe_merged(merged_lm, monkeypatch):
    """The realistic LM's failure mode: its BPE learned the repeated secret as one or two tokens, so the partial
    "my pin code is 4" tokenizes to a rare single-digit token and the canonical scoring drops the secret from the
    beam. Summing over tokenizations extracts it; the canonical scoring (the old behaviour) is the twin."""
    from privnlp.attacks.memorization import _lm

    model, tok, c = merged_lm
    secret_tokens = len(tok(c.text)["input_ids"]) - len(tok(c.prefix.rstrip())["input_ids"])
    assert secret_tokens < 4, "the BPE did not merge the secret: the test's premise failed"
    obs = BlackBoxLM(model=model, tokenizer=tok, meta={"canary_pattern": c.pattern})
    atk = CanaryExtraction(beam_width=8, n_samples=200)
    assert atk.run(obs, rng=0).score(c)["extracted"] == 1.0
    monkeypatch.setattr(_lm, "token_strings", lambda tokenizer: None)  # canonical tokenization only
    assert atk.run(obs, rng=0).score(c)["extracted"] == 0.0
