"""Builders + train loops: loss drops (stated margins), seeding, no global RNG, lm_batch, CRF, opacus."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from privnlp.core.errors import InvalidArgument
from privnlp.models import (
    BiLSTMTagger,
    lm_batch,
    tiny_bert_classifier,
    tiny_bert_mlm,
    tiny_gpt2,
    tiny_llama,
    train_classifier,
    train_lm,
    train_tagger,
)


def _gpt2(bpe, **kw):
    e = bpe.eos_token_id
    return tiny_gpt2(len(bpe), bos_token_id=e, eos_token_id=e, pad_token_id=e, **kw)


def test_tiny_gpt2_loss_drops(bpe, texts):
    model = _gpt2(bpe)
    log = train_lm(model, bpe, texts, steps=40, batch_size=8, max_length=48, rng=0)
    assert log.steps == 40 and len(log.losses) == 40 and log.seconds > 0
    # margin: the mean of the last 5 losses is at most 60% of the first 5 (from ~ln(400)=6 to < 3.6)
    assert log.mean_last() < 0.6 * log.mean_first(), log.losses


def test_bert_classifier_loss_drops(wordpiece, texts):
    labels = [int("clinic" in t or "bank" in t) for t in texts]
    model = tiny_bert_classifier(len(wordpiece), seed=1)
    log = train_classifier(model, wordpiece, texts, labels, steps=40, batch_size=16, rng=0)
    # margin: from ~ln 2 = 0.69 to below half of it
    assert log.mean_last() < 0.5 * log.mean_first(), log.losses


def test_bert_mlm_loss_drops(wordpiece, texts):
    model = tiny_bert_mlm(len(wordpiece))
    enc = wordpiece(texts[:16], padding=True, return_tensors="pt")
    g = torch.Generator().manual_seed(0)
    special = enc["input_ids"] <= 4
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    model.train()
    for _ in range(30):
        mask = (torch.rand(enc["input_ids"].shape, generator=g) < 0.15) & ~special
        inp = enc["input_ids"].masked_fill(mask, wordpiece.mask_token_id)
        labels = enc["input_ids"].masked_fill(~mask, -100)
        loss = model(input_ids=inp, attention_mask=enc["attention_mask"], labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    # margin: mean of last 5 below 70% of first 5
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5]), losses


def _tagging_data(n=60, vocab=40, tags=5, seed=0):
    r = np.random.default_rng(seed)
    x = [list(map(int, r.integers(1, vocab, size=r.integers(3, 12)))) for _ in range(n)]
    y = [[(a + (b if i else 0)) % tags for i, (a, b) in enumerate(zip(s, [0, *s[:-1]]))] for s in x]
    return x, y


@pytest.mark.parametrize("crf", [False, True])
def test_bilstm_tagger_loss_drops_and_decodes(crf):
    x, y = _tagging_data()
    model = BiLSTMTagger(40, 5, crf=crf, seed=0)
    log = train_tagger(model, x, y, steps=60, batch_size=16, lr=1e-2, rng=0)
    # margin: mean of last 5 below 50% of first 5
    assert log.mean_last() < 0.5 * log.mean_first(), log.losses
    from privnlp.models.training import pad_sequences

    xb, lengths = pad_sequences(x[:8])
    pred = model.decode(xb, lengths)
    assert [len(p) for p in pred] == [len(s) for s in x[:8]]
    acc = np.mean([a == b for p, t in zip(pred, y[:8]) for a, b in zip(p, t)])
    assert acc > 0.5


def test_crf_matches_brute_force():
    from privnlp.models.tagger import CRF

    g = torch.Generator().manual_seed(0)
    crf = CRF(3)
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    em = torch.randn(2, 4, 3, generator=g)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    for r, n in enumerate((4, 2)):
        paths = list(itertools.product(range(3), repeat=n))
        lls = []
        for pth in paths:
            tags = torch.zeros(1, 4, dtype=torch.long)
            tags[0, :n] = torch.tensor(pth)
            lls.append(float(crf.log_likelihood(em[r : r + 1], tags, mask[r : r + 1])))
        assert np.isclose(np.logaddexp.reduce(lls), 0.0, atol=1e-5)  # probabilities sum to one
        assert crf.decode(em[r : r + 1], mask[r : r + 1])[0] == list(paths[int(np.argmax(lls))])


def test_builders_seeded_and_leave_global_rng_untouched(bpe, wordpiece, texts):
    torch_state, np_state, py_state = (
        torch.random.get_rng_state(),
        np.random.get_state(),
        random.getstate(),
    )
    a, b, c = _gpt2(bpe, seed=3), _gpt2(bpe, seed=3), _gpt2(bpe, seed=4)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.transformer.wte.weight, c.transformer.wte.weight)
    t1, t2 = BiLSTMTagger(30, 4, seed=5), BiLSTMTagger(30, 4, seed=5)
    assert all(
        torch.equal(p, q) for p, q in zip(t1.state_dict().values(), t2.state_dict().values())
    )
    tiny_bert_classifier(len(wordpiece), seed=2)
    la_, lb_, lc_ = tiny_llama(40, seed=3), tiny_llama(40, seed=3), tiny_llama(40, seed=4)
    assert all(
        torch.equal(p, q) for p, q in zip(la_.state_dict().values(), lb_.state_dict().values())
    )
    assert not torch.equal(la_.model.embed_tokens.weight, lc_.model.embed_tokens.weight)
    assert (
        la_.training and la_.config.num_key_value_heads == 2
    )  # grouped-query attention by default
    la = train_lm(a, bpe, texts, steps=3, max_length=32, rng=np.random.default_rng(9))
    lb = train_lm(b, bpe, texts, steps=3, max_length=32, rng=np.random.default_rng(9))
    assert la.losses == lb.losses  # deterministic given rng
    # dropout on: draws come from a forked RNG, still deterministic and no global side effect
    d1, d2 = _gpt2(bpe, dropout=0.1), _gpt2(bpe, dropout=0.1)
    assert (
        train_lm(d1, bpe, texts, steps=2, max_length=32, rng=1).losses
        == train_lm(d2, bpe, texts, steps=2, max_length=32, rng=1).losses
    )
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert all(
        np.array_equal(u, v)
        for u, v in zip(np.random.get_state(), np_state)
        if isinstance(u, np.ndarray)
    )
    assert random.getstate() == py_state


def test_lm_batch_layout(bpe):
    batch = lm_batch(bpe, ["short", "a somewhat longer text here"], max_length=16)
    assert set(batch) == {"input_ids", "attention_mask", "position_ids", "labels"}
    ids, mask, pos, labels = batch.input_ids, batch.attention_mask, batch.position_ids, batch.labels
    assert ids.shape == mask.shape == pos.shape == labels.shape
    assert (
        pos.is_contiguous() and pos.stride(0) != 0
    )  # .repeat, not .expand (opacus per-sample grads)
    assert torch.equal(pos[1], torch.arange(ids.shape[1]))
    n0 = int(mask[0].sum())
    assert (
        ids[0, n0 - 1] == bpe.eos_token_id
        and (labels[0, n0:] == -100).all()
        and labels[0, n0 - 1] == bpe.eos_token_id
    )
    assert mask[1].all()
    assert lm_batch(bpe, ["x " * 100], max_length=10).input_ids.shape == (1, 10)


def test_opacus_per_sample_gradients(bpe, texts):
    """GPT-2 (untied) and the DPLSTM tagger give per-sample gradients with the batch dimension."""
    opacus = pytest.importorskip("opacus")
    model = _gpt2(bpe, tie_word_embeddings=False, n_layer=1)
    gsm = opacus.GradSampleModule(model)
    batch = lm_batch(bpe, texts[:3], max_length=24)
    gsm(**batch).loss.backward()
    assert model.transformer.wpe.weight.grad_sample.shape[0] == 3
    assert model.lm_head.weight.grad_sample.shape[0] == 3
    tagger = BiLSTMTagger(30, 4, dp_compatible=True)
    opacus.GradSampleModule(tagger)
    from privnlp.models.training import pad_sequences

    x, lengths = pad_sequences([[1, 2, 3], [4, 5]])
    y, _ = pad_sequences([[1, 2, 3], [0, 1]], pad=-100)
    tagger.loss(x, y, lengths).backward()
    assert all(p.grad_sample.shape[0] == 2 for p in tagger.parameters())


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: tiny_gpt2(100, n_embd=65, n_head=2), "divisible"),
        (lambda: tiny_gpt2(0), "vocab_size"),
        (lambda: tiny_gpt2(100, eos_token_id=100), "eos_token_id"),
        (lambda: tiny_bert_classifier(100, num_labels=0), "num_labels"),
        (lambda: BiLSTMTagger(10, 3, dropout=1.0), "dropout"),
        (lambda: tiny_gpt2(100, seed=-1), "seed"),
        (lambda: tiny_llama(100, hidden_size=18, num_attention_heads=4), "divisible"),
        (
            lambda: tiny_llama(100, num_attention_heads=4, num_key_value_heads=3),
            "num_key_value_heads",
        ),
        (lambda: tiny_llama(100, num_key_value_heads=5), "num_key_value_heads"),
    ],
)
def test_builder_bad_arguments(call, match):
    with pytest.raises(InvalidArgument, match=match):
        call()


def test_train_bad_arguments(bpe, wordpiece, texts):
    model = BiLSTMTagger(10, 3)
    with pytest.raises(InvalidArgument, match="steps"):
        train_tagger(model, [[1, 2]], [[0, 1]], steps=0, rng=0)
    with pytest.raises(InvalidArgument, match="tag_ids"):
        train_tagger(model, [[1, 2]], [[0]], steps=1, rng=0)
    with pytest.raises(InvalidArgument, match="rng"):
        train_tagger(model, [[1, 2]], [[0, 1]], steps=1, rng=None)
    with pytest.raises(InvalidArgument, match="labels"):
        train_classifier(
            tiny_bert_classifier(len(wordpiece)), wordpiece, texts[:2], [0, 2], steps=1, rng=0
        )
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(InvalidArgument, match="trainable"):
        train_tagger(model, [[1, 2]], [[0, 1]], steps=1, rng=0)


def test_import_privnlp_models_is_light():
    code = (
        "import sys, privnlp.models as m; assert 'torch' not in sys.modules, 'torch imported';"
        "assert 'transformers' not in sys.modules; assert 'tiny_gpt2' in dir(m); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr
