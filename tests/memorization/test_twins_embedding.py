"""The leaky twins of the embedding-obfuscation defenses are caught by direct behavioural checks:
in training mode the twin behaves like the unprotected model while the real defense does not."""

from __future__ import annotations

import pytest
import torch

from privnlp.core.registry import LEAKY_TWINS
from privnlp.mechanisms.training.mechanisms import (
    AdversarialEmbeddingDefense,
    DropoutEmbeddingDefense,
    LSTMDropoutDefense,
    NoisedEmbeddingDefense,
)


def _gpt2():
    from privnlp.models import tiny_gpt2

    return tiny_gpt2(50, n_layer=1, n_embd=16, n_head=1, n_positions=16, seed=0)


def _emb_out(mech, ids, train):
    m = _gpt2()
    ref = m.get_input_embeddings()(ids).detach()
    mech.apply(m, rng=0)
    m.train(train)
    return ref, m.get_input_embeddings()(ids).detach()


@pytest.mark.parametrize(
    "name,real",
    [
        ("noised_embedding", NoisedEmbeddingDefense(sigma=0.5)),
        ("dropout_embedding", DropoutEmbeddingDefense(p=0.5)),
    ],
)
def test_embedding_twin_is_clean_in_training_mode(name, real):
    twin = LEAKY_TWINS.get(name)(**vars(real))
    assert twin.claim() == real.claim()
    ids = torch.arange(20).reshape(2, 10)
    ref, out_real = _emb_out(real, ids, train=True)
    _, out_twin = _emb_out(twin, ids, train=True)
    assert (out_real - ref).abs().max() > 1e-2  # the real defense perturbs the training forward
    assert (out_twin - ref).abs().max() < 1e-3  # the twin does not: caught


def test_adversarial_twin_term_has_no_gradient():
    real = AdversarialEmbeddingDefense(epsilon=1.0)
    twin = LEAKY_TWINS.get("adversarial_embedding")(**vars(real))
    assert twin.claim() == real.claim()
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    for mech, has_grad in ((real, True), (twin, False)):
        m = _gpt2()
        m.train()
        _, term = mech.loss_terms(m, inputs, rng=0)
        assert float(term.detach()) > 0  # the term is computed (and would be logged) in both
        assert term.requires_grad is has_grad


def test_lstm_dropout_twin_is_clean_in_training_mode():
    from privnlp.models.lstm_lm import tiny_lstm_lm

    real = LSTMDropoutDefense(p=0.5)
    twin = LEAKY_TWINS.get("lstm_dropout")(**vars(real))
    assert twin.claim() == real.claim()
    ids = torch.randint(0, 40, (2, 8), generator=torch.Generator().manual_seed(0))
    outs = {}
    for label, mech in (("clean", None), ("real", real), ("twin", twin)):
        m = tiny_lstm_lm(40, emb_dim=8, hidden=8, num_layers=1, n_positions=16, seed=0)
        if mech is not None:
            mech.apply(m, rng=0)
        m.train()
        with torch.no_grad():
            out = m(input_ids=ids)
        outs[label] = out.logits if hasattr(out, "logits") else out
    assert (outs["real"] - outs["clean"]).abs().max() > 1e-3
    assert torch.allclose(outs["twin"], outs["clean"], atol=1e-6)
