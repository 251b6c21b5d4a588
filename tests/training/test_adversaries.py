"""DP-SGD's claim per adversary (issue #28 item 1), each epsilon recomputed with dp_accounting directly.

Central DP-SGD names two adversaries: the white-box analyst (every noised update, i.e. every intermediate
model, and the released model -- not which examples were sampled) and the black-box querier (the released
model's outputs). Poisson sampling, which neither observes, amplifies both; a shuffled / fixed-size loader
gets no amplification, and then the budget refuses at that (larger) epsilon too.
"""

from __future__ import annotations

import dp_accounting
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privnlp.core.claims import Adversary, PrivacyClaim
from privnlp.mechanisms.training import make_private, train_private

DELTA = 1e-5


def _mse(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean(1)


def _pt(poisson: bool, **kw):
    torch.manual_seed(0)
    model = nn.Linear(6, 1)
    return make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(TensorDataset(torch.randn(100, 6), torch.randn(100, 1)), batch_size=10),
        max_grad_norm=1.0,
        delta=DELTA,
        accountant="prv",
        poisson_sampling=poisson,
        rng=0,
        **kw,
    )


def _pld(event) -> float:
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    return acc.compose(event).get_epsilon(DELTA)


def test_poisson_claim_names_each_adversary_with_the_amplified_epsilon():
    pt = _pt(True, noise_multiplier=1.0)
    train_private(pt, _mse, steps=20)
    c = pt.claim()
    assert [a.adversary for a in c.adversaries] == [
        Adversary.WHITE_BOX_ANALYST.value,
        Adversary.BLACK_BOX_QUERIER.value,
    ]
    assert "every noised model update" in c.adversaries[0].observes
    assert "not which examples were sampled" in c.adversaries[0].observes
    assert all(a.amplified and a.delta == DELTA for a in c.adversaries)
    # the amplified epsilon, recomputed: 20 Poisson-subsampled Gaussian steps, q = 0.1, sigma = 1
    ref = _pld(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.0)), 20
        )
    )
    assert all(a.epsilon == pytest.approx(ref, rel=0.02) for a in c.adversaries)
    assert c.epsilon == max(
        a.epsilon for a in c.adversaries
    )  # headline = strongest named adversary
    # the one not covered (who learns the sample) is stated with its bound: 20 full-batch Gaussian steps
    no_amp = _pld(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.0), 20))
    note = next(n for n in c.notes if "which examples each step sampled" in n)
    assert float(note.rsplit("<= ", 1)[1]) == pytest.approx(no_amp, rel=0.02)
    assert no_amp > 3 * c.epsilon
    again = PrivacyClaim.from_dict(c.to_dict())
    assert again.adversaries == c.adversaries and "Per adversary" in c.statement()
    statement = pt.privacy_statement()
    assert "Per adversary" in statement and "white-box analyst (observes every noised" in statement


def test_shuffled_loader_gets_no_amplification_and_the_budget_refuses_at_it():
    pt = _pt(False, noise_multiplier=2.0, target_epsilon=5.0)
    res = train_private(pt, _mse, steps=500, stop_at_budget=True)
    c = res.claim
    assert res.stopped_by_budget and all(not a.amplified for a in c.adversaries)
    steps = pt.steps
    gauss = lambda k: _pld(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), k))  # noqa: E731
    # the headline is the no-amplification epsilon of the steps taken, within the budget ...
    assert c.epsilon == pytest.approx(gauss(steps), rel=0.02) and c.epsilon <= 5.0
    # ... and one more step would have exceeded it (the old code budgeted at the amplified q = 0.1 and
    # would have run all 500 steps: an adversary-visible epsilon far above the target)
    assert gauss(steps + 1) > 5.0 * 0.98
    assert steps < 100


def test_the_registered_mechanism_names_the_adversaries_before_and_after_training():
    from privnlp.mechanisms.training import DPSGD

    mech = DPSGD(target_epsilon=3.0, max_grad_norm=1.0, epochs=1, accountant="rdp")
    planned = mech.claim()  # what a card shows before any data is seen
    assert [a.adversary for a in planned.adversaries] == [
        Adversary.WHITE_BOX_ANALYST.value,
        Adversary.BLACK_BOX_QUERIER.value,
    ]
    assert all(a.epsilon == 3.0 and a.amplified for a in planned.adversaries)
    assert planned.epsilon == 3.0
    shuffled = DPSGD(
        target_epsilon=3.0, max_grad_norm=1.0, epochs=1, poisson_sampling=False
    ).claim()
    assert not any(a.amplified for a in shuffled.adversaries)
    torch.manual_seed(0)
    model = nn.Linear(6, 1)
    pt = mech.make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(TensorDataset(torch.randn(100, 6), torch.randn(100, 1)), batch_size=10),
        rng=0,
    )
    train_private(pt, _mse, steps=3)
    after = mech.claim()
    assert after.adversaries == pt.claim().adversaries and after.epsilon <= 3.0
