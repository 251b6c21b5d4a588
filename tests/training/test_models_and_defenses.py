"""DP-SGD on the tiny GPT-2 / BERT / BiLSTM models, frozen embeddings, transforms, embedding defenses."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from privnlp.core.claims import ClaimKind
from privnlp.core.errors import InvalidArgument
from privnlp.core.registry import MECHANISMS
from privnlp.mechanisms.training import (
    ClipUpdate,
    Compose,
    GaussianNoise,
    GradDrop,
    GradientPruning,
    RandomMasking,
    SignSGD,
    make_private,
    train_private,
)
from privnlp.mechanisms.training.dp_sgd import (
    per_sample_classification_loss,
    per_sample_lm_loss,
    per_sample_token_loss,
)
from privnlp.mechanisms.training.embedding import (
    adversarial_embedding_loss,
    apply_dropout_embedding,
    apply_lstm_dropout,
    apply_noised_embedding,
)
from privnlp.mechanisms.training.large_batch import sharded_dp_mean
from privnlp.models import BiLSTMTagger, tiny_bert_classifier, tiny_gpt2

V = 40


@pytest.fixture(scope="module")
def ids():
    g = torch.Generator().manual_seed(0)
    return torch.randint(1, V, (32, 10), generator=g)


def _lm_loss(model, batch):
    (x,) = batch
    return per_sample_lm_loss(model(input_ids=x).logits, x)


@pytest.mark.parametrize("tied", ["untie", "freeze"])
def test_dp_sgd_on_tiny_gpt2_states_tied_embedding_choice(ids, tied):
    model = tiny_gpt2(V, n_layer=1, n_embd=16, n_head=2, n_positions=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pt = make_private(
        model,
        opt,
        DataLoader(TensorDataset(ids), batch_size=8),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        accountant="rdp",
        tied_embeddings=tied,
        rng=0,
    )
    assert (
        pt.grad_sample_mode == "hooks"
    )  # HF Conv1D has no opacus sampler -> functorch under hooks
    res = train_private(pt, _lm_loss, steps=2)
    assert res.steps == 2 and all(map(lambda v: v == v, res.losses))
    assert any(("untied" if tied == "untie" else "frozen") in n for n in res.claim.notes)
    if tied == "freeze":
        assert not model.transformer.wte.weight.requires_grad
    with pytest.raises(InvalidArgument, match="tied"):
        m2 = tiny_gpt2(V, n_layer=1, n_embd=16, n_head=2, n_positions=16)
        make_private(
            m2,
            torch.optim.SGD(m2.parameters(), lr=0.1),
            DataLoader(TensorDataset(ids), batch_size=8),
            noise_multiplier=1.0,
            tied_embeddings="error",
        )


def test_dp_sgd_on_tiny_bert_auto_mode_is_memory_aware(ids, monkeypatch):
    """auto = hooks (one backward, faster) while a batch's per-sample gradients fit in
    AUTO_GHOST_BYTES, ghost clipping (no per-sample gradient tensors) beyond."""
    from privnlp.mechanisms.training import dp_sgd

    model = tiny_bert_classifier(
        V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16
    )
    y = torch.arange(32) % 2
    loader = DataLoader(TensorDataset(ids, y), batch_size=8)
    assert dp_sgd.choose_grad_sample_mode(model, 8) == "hooks"
    assert (
        dp_sgd.choose_grad_sample_mode(model) == "bookkeeping"
    )  # batch size unknown: save memory (#20)
    monkeypatch.setattr(dp_sgd, "AUTO_GHOST_BYTES", 1024)  # a model whose gradients do not fit
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pt = make_private(
        model, opt, loader, noise_multiplier=1.0, max_grad_norm=1.0, accountant="rdp", rng=0
    )
    assert pt.grad_sample_mode == "bookkeeping"  # one backward, no per-sample gradients (issue #20)
    res = train_private(
        pt, lambda m, b: per_sample_classification_loss(m(input_ids=b[0]).logits, b[1]), steps=2
    )
    assert res.steps == 2


def test_dp_sgd_on_bilstm_tagger(ids):
    tags = ids % 3
    model = BiLSTMTagger(V, 3, emb_dim=8, hidden=8, dp_compatible=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pt = make_private(
        model,
        opt,
        DataLoader(TensorDataset(ids, tags), batch_size=8),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        accountant="rdp",
        rng=0,
    )
    res = train_private(pt, lambda m, b: per_sample_token_loss(m(b[0]), b[1]), steps=2)
    assert res.steps == 2
    plain = BiLSTMTagger(V, 3, emb_dim=8, hidden=8)
    with pytest.raises(InvalidArgument, match="DPLSTM"):
        make_private(
            plain,
            torch.optim.SGD(plain.parameters(), lr=0.1),
            DataLoader(TensorDataset(ids, tags), batch_size=8),
            noise_multiplier=1.0,
        )


def test_frozen_embeddings_transmit_zero_rows_and_keep_weights_bit_identical(ids):
    model = tiny_gpt2(V, n_layer=1, n_embd=16, n_head=2, n_positions=16)
    frozen = MECHANISMS.get("frozen_embeddings")()
    names = frozen.apply(model)
    assert "transformer.wte.weight" in names
    before = model.transformer.wte.weight.detach().clone()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    for i in range(3):
        opt.zero_grad()
        x = ids[i * 8 : (i + 1) * 8]
        model(input_ids=x, labels=x).loss.backward()
        sent = {
            n: (p.grad if p.grad is not None else torch.zeros_like(p))
            for n, p in model.named_parameters()
        }
        assert torch.count_nonzero(sent["transformer.wte.weight"]) == 0  # every row zero
        assert torch.count_nonzero(sent["transformer.h.0.mlp.c_fc.weight"]) > 0
        opt.step()
    assert torch.equal(model.transformer.wte.weight, before)
    assert frozen.claim().kind == ClaimKind.HEURISTIC
    # with DP-SGD too: no noise lands on frozen rows
    pt = make_private(
        model,
        torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5),
        DataLoader(TensorDataset(ids), batch_size=8),
        noise_multiplier=1.0,
        accountant="rdp",
        rng=1,
    )
    train_private(pt, _lm_loss, steps=1)
    assert torch.equal(model.transformer.wte.weight, before)


def test_update_transforms():
    g = {"a": torch.tensor([0.1, -3.0, 0.5, 2.0]), "b": torch.tensor([[-0.2, 1.0]])}
    keep = GradientPruning(keep_fraction=0.5, scope="global")(g)
    assert torch.count_nonzero(keep["a"]) + torch.count_nonzero(keep["b"]) == 3  # ceil(0.5*6)
    assert keep["a"][1] == -3.0 and keep["a"][0] == 0
    assert torch.equal(g["a"], torch.tensor([0.1, -3.0, 0.5, 2.0]))  # input untouched
    assert torch.equal(GradDrop(0.5, scope="global")(g)["a"], keep["a"])
    assert torch.equal(SignSGD()(g)["a"], torch.tensor([1.0, -1.0, 1.0, 1.0]))
    clipped = ClipUpdate(1.0)(g)
    assert sum(float((v**2).sum()) for v in clipped.values()) == pytest.approx(1.0, rel=1e-5)
    with pytest.raises(InvalidArgument, match="rng"):
        GaussianNoise(0.1)(g)
    big = {"w": torch.zeros(20000)}
    noisy = GaussianNoise(0.3)(big, rng=0)["w"]
    assert float(noisy.std()) == pytest.approx(0.3, rel=0.03)  # tolerance 3%
    assert torch.equal(noisy, GaussianNoise(0.3)(big, rng=0)["w"])  # seeded = reproducible
    masked = RandomMasking(0.25)({"w": torch.ones(20000)}, rng=1)["w"]
    assert float((masked == 0).float().mean()) == pytest.approx(0.25, abs=0.02)
    pipe = ClipUpdate(1.0) >> GradientPruning(0.5) >> GaussianNoise(0.01)
    assert isinstance(pipe, Compose) and len(pipe.transforms) == 3 and pipe.stochastic
    out = pipe(g, rng=3)
    assert set(out) == set(g) and "GradientPruning" in pipe.label
    with pytest.raises(InvalidArgument, match="keep_fraction"):
        GradientPruning(1.5)


def test_sharded_noise_relation_dp_bert():
    # P shards each adding sigma*C noise == one shard with sigma*sqrt(P): compare the noise std of the
    # two simulations on zero gradients (2 x 4000 coordinates x 10 draws; tolerance 5%).
    b, d, p, sigma, c = 32, 4000, 8, 0.7, 1.0
    zero = torch.zeros(b, d)
    sharded = torch.stack(
        [
            sharded_dp_mean(zero, num_shards=p, noise_multiplier=sigma, max_grad_norm=c, rng=i)
            for i in range(10)
        ]
    )
    single = torch.stack(
        [
            sharded_dp_mean(
                zero, num_shards=1, noise_multiplier=sigma * p**0.5, max_grad_norm=c, rng=100 + i
            )
            for i in range(10)
        ]
    )
    expected = sigma * p**0.5 * c / b
    assert float(sharded.std()) == pytest.approx(expected, rel=0.05)
    assert float(single.std()) == pytest.approx(expected, rel=0.05)


def test_embedding_obfuscation_wrappers(ids):
    model = tiny_gpt2(V, n_layer=1, n_embd=16, n_head=2, n_positions=16, tie_word_embeddings=False)
    x = ids[:4]
    model.eval()
    clean = model(input_ids=x).logits
    apply_noised_embedding(model, 0.5, rng=0)
    assert torch.allclose(model(input_ids=x).logits, clean)  # identity at eval time
    model.train()
    assert not torch.allclose(model(input_ids=x).logits, clean)
    m2 = tiny_gpt2(V, n_layer=1, n_embd=16, n_head=2, n_positions=16)
    apply_dropout_embedding(m2, 0.3, rng=0)
    emb = m2.get_input_embeddings()
    out = emb(x)
    assert float((out == 0).float().mean()) == pytest.approx(0.3, abs=0.05)
    m3 = tiny_bert_classifier(
        V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16
    )
    logits, vat = adversarial_embedding_loss(m3, {"input_ids": x}, epsilon=1.0, rng=0)
    assert logits.shape == (4, 2) and float(vat) >= 0 and vat.requires_grad
    (
        per_sample_classification_loss(logits, torch.zeros(4, dtype=torch.long)).mean() + vat
    ).backward()
    tagger = BiLSTMTagger(V, 3, emb_dim=8, hidden=8)
    apply_lstm_dropout(tagger, 0.5, rng=0)
    tagger.train()
    assert tagger(x).shape == (4, 10, 3)
    with pytest.raises(InvalidArgument, match="LSTM"):
        apply_lstm_dropout(m3, 0.5, rng=0)


@pytest.mark.parametrize(
    "name",
    [
        "dp_sgd",
        "frozen_embeddings",
        "gradient_pruning",
        "sign_sgd",
        "graddrop",
        "gaussian_noise_update",
        "random_masking",
        "noised_embedding",
        "dropout_embedding",
        "adversarial_embedding",
        "lstm_dropout",
    ],
)
def test_registered_mechanisms_have_claims(name):
    cls = MECHANISMS.get(name)
    m = cls.example("quick")
    c = m.claim()
    assert c.kind == (ClaimKind.DP if name == "dp_sgd" else ClaimKind.HEURISTIC)
    assert cls.paired_attacks and cls.threat_models and cls.paper.split()[0].endswith(".txt")
    assert ".txt" in (cls.__doc__ or "")


@pytest.mark.parametrize(
    "cls, frac", [("GradientPruningDefense", "keep_fraction"), ("GradDropDefense", "drop_fraction")]
)
def test_update_transform_defenses_check_scope_at_construction(cls, frac):
    import privnlp.mechanisms.training as T
    from privnlp.core.errors import InvalidArgument

    with pytest.raises(
        InvalidArgument, match="scope must be 'global' or 'per_tensor'; got 'layer'"
    ):
        getattr(T, cls)(**{frac: 0.5, "scope": "layer"})
    for scope in ("global", "per_tensor"):
        assert getattr(T, cls)(**{frac: 0.5, "scope": scope}).scope == scope
