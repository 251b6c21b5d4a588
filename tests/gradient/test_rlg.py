"""RLG (shared/papers/rlg-revealing-labels-from-gradients.txt): exact label sets on a tanh classifier."""

import numpy as np
import pytest
import torch

from privnlp.attacks import get
from privnlp.attacks.gradient.rlg import RLG, estimate_num_labels, reveal_labels, sign_baseline
from privnlp.core.errors import InvalidArgument
from privnlp.core.observations import GradientObservation


class TanhClassifier(torch.nn.Module):
    def __init__(self, d_in=20, d=64, C=100, act=torch.nn.Tanh):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(d_in, d), act())
        self.classifier = torch.nn.Linear(d, C)

    def forward(self, x):
        return self.classifier(self.body(x))


def _update(model, N, K=1, lr=0.05, seed=0, C=100):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N * K, 20, generator=g)
    y = torch.randint(0, C, (N * K,), generator=g)
    params = dict(model.named_parameters())
    theta0 = {n: p.detach().clone() for n, p in params.items()}
    m = model
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    for k in range(K):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(
            m(x[k * N : (k + 1) * N]), y[k * N : (k + 1) * N]
        ).backward()
        opt.step()
    grads = {n: (theta0[n] - p.detach()) / lr for n, p in params.items()}
    for n, p in params.items():
        p.data.copy_(theta0[n])
    return grads, y.tolist()


@pytest.mark.parametrize("N", [1, 2, 4, 8])
def test_rlg_exact_single_step(N):
    torch.manual_seed(N)
    model = TanhClassifier()
    grads, y = _update(model, N, seed=N)
    obs = GradientObservation(model=model, gradients=grads, batch_size=N)
    res = get("rlg")().run(obs, rng=0)
    s = res.score(y)
    assert s["precision"] == 1.0 and s["recall"] == 1.0, (sorted(set(y)), res.reconstructions)
    assert s["length_error"] == 0.0


def test_rlg_multi_step_fedavg():
    torch.manual_seed(0)
    model = TanhClassifier()
    grads, y = _update(model, N=3, K=2, seed=3)
    obs = GradientObservation(
        model=model, gradients=grads, batch_size=3, num_local_steps=2, learning_rate=0.05
    )
    s = RLG().run(obs, rng=0).score(y)
    assert s["f1"] == 1.0


def test_sign_baseline_fails_without_relu_rlg_does_not():
    torch.manual_seed(1)
    model = TanhClassifier()
    grads, y = _update(model, 8, seed=11)
    sign = RLG(method="sign").run(GradientObservation(model=model, gradients=grads), rng=0).score(y)
    assert (
        sign["precision"] < 0.5
    )  # Eq. 5 needs non-negative features (paper Table 1, EfficientNet row)
    relu = TanhClassifier(act=torch.nn.ReLU)
    g2, y2 = _update(relu, 8, seed=11)
    s2 = RLG(method="sign").run(GradientObservation(model=relu, gradients=g2), rng=0).score(y2)
    assert s2["recall"] == 1.0


def test_sign_sgd_breaks_rlg():
    from privnlp.mechanisms.training.transforms import SignSGD

    torch.manual_seed(2)
    model = TanhClassifier()
    scores = []
    for seed in range(3):
        grads, y = _update(model, 8, seed=20 + seed)
        obs = GradientObservation(model=model, gradients=SignSGD()(grads), batch_size=8)
        scores.append(RLG().run(obs, rng=0).score(y))
    assert np.mean([s["exact_match"] for s in scores]) == 0.0
    assert np.mean([s["f1"] for s in scores]) < 0.6


def test_lm_head_bag_of_next_tokens():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=300, n_positions=32, n_embd=64, n_layer=1, n_head=2, tie_word_embeddings=False
    )
    lm = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 300, (1, 7))
    out = lm(input_ids=ids, labels=ids)
    grads = dict(
        zip(
            [n for n, _ in lm.named_parameters()],
            torch.autograd.grad(out.loss, list(lm.parameters())),
        )
    )
    res = RLG(layer="lm_head.weight").run(
        GradientObservation(model=lm, gradients=grads, batch_size=1), rng=0
    )
    s = res.score(ids[0, 1:].tolist())
    assert s["f1"] == 1.0


def test_spectrum_and_errors():
    assert estimate_num_labels([10, 5, 1, 1e-9, 1e-10]) == 3
    with pytest.raises(InvalidArgument):
        RLG(method="nope")
    with pytest.raises(InvalidArgument):
        reveal_labels(np.zeros(3))
    assert sign_baseline(-np.ones((3, 2))).labels == (0, 1, 2)
