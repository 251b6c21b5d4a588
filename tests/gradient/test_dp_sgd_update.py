"""Issue #30 item 3: the ``fedsgd.eavesdropper`` scenario's DP-SGD update comes from the mechanism
(``DPSGD.make_private`` on opacus), not from a copy of clipping and noise in the scenario. The reference
here is computed by hand: each record's gradient clipped to C, averaged over the batch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from privnlp.evaluation.scenarios.gradient import classifier_victim, client_update  # noqa: E402
from privnlp.mechanisms.training.mechanisms import DPSGD, LeakyDPSGDNoClipping  # noqa: E402


@pytest.fixture(scope="module")
def victim():
    model, tok, texts, labels = classifier_victim("quick", 0)
    enc = tok(list(texts[:4]), padding=True, return_tensors="pt")
    batch = {
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
        "labels": torch.tensor(labels[:4]),
    }
    return model, batch


def _reference(model, batch, C):
    """Per-record gradients (padding trimmed), each clipped to C (C=None: not clipped), averaged."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    total = {n: torch.zeros_like(p) for n, p in params}
    b = batch["input_ids"].shape[0]
    norms = []
    for i in range(b):
        L = int(batch["attention_mask"][i].sum())
        sub = {k: (v[i : i + 1, :L] if v.dim() == 2 else v[i : i + 1]) for k, v in batch.items()}
        g = torch.autograd.grad(model(**sub).loss, [p for _, p in params], allow_unused=True)
        g = [torch.zeros_like(p) if gi is None else gi for gi, (_, p) in zip(g, params)]
        norm = float(torch.sqrt(sum((gi.double() ** 2).sum() for gi in g)))
        norms.append(norm)
        f = 1.0 if C is None else min(1.0, C / (norm + 1e-12))
        for (n, _), gi in zip(params, g):
            total[n] += gi * f
    return {n: t / b for n, t in total.items()}, norms


def _max_abs_diff(a, b):
    assert set(a) == set(b)
    return max(float((a[n] - b[n]).abs().max()) for n in a)


def test_noiseless_update_is_the_clipped_mean(victim):
    model, batch = victim
    model.eval()
    _, norms = _reference(model, batch, None)
    C = 0.5 * min(norms)  # every record is clipped
    ref, _ = _reference(model, batch, C)
    got, extras = client_update(model, batch, DPSGD(noise_multiplier=0.0, max_grad_norm=C), rng=0)
    scale = max(float(v.abs().max()) for v in ref.values())
    assert _max_abs_diff(got, ref) < 1e-4 * scale
    assert extras["noise_std"] == 0.0 and "make_private" in extras["meta"]["dp_sgd"]
    unclipped, _ = _reference(model, batch, None)
    assert _max_abs_diff(got, unclipped) > 0.1 * scale  # clipping did something


def test_leaky_twin_skips_clipping(victim):
    model, batch = victim
    _, norms = _reference(model, batch, None)
    C = 0.5 * min(norms)
    unclipped, _ = _reference(model, batch, None)
    got, _ = client_update(
        model, batch, LeakyDPSGDNoClipping(noise_multiplier=0.0, max_grad_norm=C), rng=0
    )
    scale = max(float(v.abs().max()) for v in unclipped.values())
    assert _max_abs_diff(got, unclipped) < 1e-4 * scale


def test_noise_std_is_sigma_c_over_b(victim):
    model, batch = victim
    sigma, C, b = (
        2.0,
        1e-6,
        batch["input_ids"].shape[0],
    )  # C tiny: the update is (almost) pure noise
    got, extras = client_update(model, batch, DPSGD(noise_multiplier=sigma, max_grad_norm=C), rng=0)
    noise = torch.cat([v.flatten() for v in got.values()])
    # > 400k coordinates: the sample std is within 1% of sigma*C/b
    assert float(noise.std()) == pytest.approx(sigma * C / b, rel=0.01)
    assert extras["noise_std"] == pytest.approx(sigma * C / b)
    again, _ = client_update(model, batch, DPSGD(noise_multiplier=sigma, max_grad_norm=C), rng=0)
    other, _ = client_update(model, batch, DPSGD(noise_multiplier=sigma, max_grad_norm=C), rng=1)
    assert _max_abs_diff(got, again) == 0.0 and _max_abs_diff(got, other) > 0.0
