"""Book-keeping clipping (one backward pass) computes the same clipped, noised gradient as opacus' hooks mode."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from privnlp.mechanisms.training import make_private, train_private
from privnlp.mechanisms.training.dp_sgd import per_sample_classification_loss
from privnlp.models import tiny_bert_classifier

V, T, B = 50, 12, 8
# float32 sums in a different order (einsum vs per-sample gradients): relative tolerance on the gradient
RTOL, ATOL = 1e-4, 1e-6


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, V, (B, T), generator=g)
    ids[:, -3:] = 0  # some padding
    return ids, torch.arange(B) % 2


def _step(mode: str, sigma: float, clip: float):
    model = tiny_bert_classifier(
        V,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=16,
        seed=0,
    )
    model.train()
    ids, y = _batch()
    dl = DataLoader(TensorDataset(ids, y), batch_size=B)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    pt = make_private(
        model,
        opt,
        dl,
        noise_multiplier=sigma,
        max_grad_norm=clip,
        accountant="rdp",
        grad_sample_mode=mode,
        rng=0,
    )
    torch.manual_seed(1)  # dropout masks
    pt.optimizer.zero_grad(set_to_none=True)
    with warnings.catch_warnings():  # opacus hooks on a first layer fed token ids (benign)
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        pt.loss(per_sample_classification_loss(pt.model(input_ids=ids).logits, y)).backward()
    pt.optimizer.step()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    steps = pt.steps
    pt.close()
    return grads, steps, model


@pytest.mark.parametrize("sigma,clip", [(0.0, 0.05), (0.0, 100.0), (1.0, 0.05)])
def test_bookkeeping_equals_hooks(sigma, clip):
    """Clipping active (C=0.05), inactive (C=100), and with noise from the same seeded generator."""
    ref, s1, _ = _step("hooks", sigma, clip)
    bk, s2, model = _step("bookkeeping", sigma, clip)
    assert s1 == s2 == 1
    assert set(bk) == set(ref) and len(ref) > 10
    for n in ref:
        torch.testing.assert_close(bk[n], ref[n], rtol=RTOL, atol=ATOL, msg=lambda m: f"{n}: {m}")
    # close() restores requires_grad on every trained weight
    assert all(p.requires_grad for p in model.parameters())


def test_bookkeeping_trains_and_accounts():
    model = tiny_bert_classifier(
        V,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
        seed=0,
    )
    g = torch.Generator().manual_seed(1)
    dl = DataLoader(
        TensorDataset(torch.randint(1, V, (4 * B, T), generator=g), torch.arange(4 * B) % 2),
        batch_size=B,
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pt = make_private(
        model,
        opt,
        dl,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        accountant="rdp",
        grad_sample_mode="bookkeeping",
        rng=0,
        dedup=False,
    )
    res = train_private(
        pt, lambda m, b: per_sample_classification_loss(m(input_ids=b[0]).logits, b[1]), steps=5
    )
    assert res.steps == 5 and res.claim.extra["grad_sample_mode"] == "bookkeeping"
    assert 0 < res.epsilon < float("inf")
    pt.close()


def _train_physical(mode: str, *, eval_mode: bool = False):
    g = torch.Generator().manual_seed(2)
    data = TensorDataset(torch.randint(1, V, (64, T), generator=g), torch.arange(64) % 2)
    model = tiny_bert_classifier(
        V,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
        seed=0,
    )
    before = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    pt = make_private(
        model,
        opt,
        DataLoader(data, batch_size=16),
        noise_multiplier=0.0,
        max_grad_norm=0.1,
        accountant="rdp",
        grad_sample_mode=mode,
        rng=3,
    )
    if eval_mode:
        pt.model.eval()
        pt.model.train = lambda *a, **k: pt.model  # keep eval mode inside train_private
    torch.manual_seed(5)  # dropout masks: the same sequence of forward passes in both modes
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        res = train_private(
            pt,
            lambda m, b: per_sample_classification_loss(m(input_ids=b[0]).logits, b[1]),
            steps=2,
            max_physical_batch_size=4,
        )
    assert res.steps == 2
    pt.close()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]) - before


def test_bookkeeping_with_physical_batches_equals_hooks():
    """Logical (seeded Poisson) batches split into physical batches of 4 (BatchMemoryManager): the same update."""
    torch.testing.assert_close(
        _train_physical("bookkeeping"), _train_physical("hooks"), rtol=RTOL, atol=1e-6
    )


def test_bookkeeping_in_eval_mode_still_trains():
    """opacus' hooks need train mode; book-keeping also works in eval mode (never a silent noise-only update)."""
    upd = _train_physical("bookkeeping", eval_mode=True)
    assert float(upd.abs().max()) > 1e-4
