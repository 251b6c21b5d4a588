"""Accounting: reference epsilons (opacus RDP, TF Privacy), ledger round-trip, calibration, budget, delta."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privnlp.accounting import (
    BudgetGuard,
    DPLedger,
    calibrate_noise_multiplier,
    check_delta,
    default_delta,
    effective_noise_multiplier,
    epsilon_for,
    epsilon_no_amplification,
)
from privnlp.accounting import ledger as ledger_mod
from privnlp.core.errors import InvalidArgument, InvalidPrivacyParameter, PrivacyBudgetExceeded
from privnlp.mechanisms.training import make_private


def test_opacus_rdp_reference_value_within_1_percent():
    # opacus' documented example: sigma=1.5, q=0.04, 2250 steps, delta=1e-5 -> 7.32911
    est = epsilon_for([(1.5, 0.04, 2250)], 1e-5, "rdp", diagnostics=True)
    assert est.opacus == pytest.approx(7.32911, rel=0.01)
    assert est.dp_accounting == pytest.approx(7.32911, rel=0.01)
    assert est.epsilon == pytest.approx(7.32911, rel=0.01)


def test_tf_privacy_reference_value_within_1_percent():
    # TF Privacy: n=60000, batch 150, sigma=1.3, 15 epochs, delta=1e-5 -> about 0.724 (RDP)
    q = 150 / 60000
    steps = int(15 * 60000 / 150)
    est = epsilon_for([(1.3, q, steps)], 1e-5, "rdp")
    assert est.epsilon == pytest.approx(0.724, rel=0.01)


def test_prv_and_pld_agree_and_are_tighter_than_rdp():
    prv = epsilon_for([(1.5, 0.04, 2250)], 1e-5, "prv", diagnostics=True)
    rdp = epsilon_for([(1.5, 0.04, 2250)], 1e-5, "rdp")
    assert prv.relative_gap < 0.05  # opacus PRV (diagnostic) vs the reported dp_accounting PLD
    assert prv.epsilon < rdp.epsilon
    assert (
        prv.epsilon
        == prv.dp_accounting
        == min(prv.diagnostics["dp_accounting.pld"], prv.diagnostics["dp_accounting.rdp_wide"])
    )


def test_ledger_round_trip_and_run_length():
    led = DPLedger()
    for _ in range(5):
        led.record(1.1, 0.01)
    led.record(2.0, 0.01)
    assert [r.steps for r in led.runs] == [5, 1] and led.steps == 6
    again = DPLedger.from_dict(led.to_dict())
    assert again.runs == led.runs
    assert again.epsilon(1e-5, "rdp") == led.epsilon(1e-5, "rdp")
    assert "dp_event" in led.to_dict()
    led.cross_check(1e-5, "rdp")


def test_gaussian_epsilon_matches_dp_accounting_pld():
    from dp_accounting import dp_event as de
    from dp_accounting.pld import pld_privacy_accountant as plda

    from privnlp.accounting.ledger import gaussian_epsilon

    acc = plda.PLDAccountant()
    acc.compose(de.GaussianDpEvent(2.0))
    assert gaussian_epsilon(2.0, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=0.01)


def test_no_amplification_epsilon_is_larger():
    runs = [(1.0, 0.01, 100)]
    assert epsilon_no_amplification(runs, 1e-5) > epsilon_for(runs, 1e-5, "rdp").epsilon


def test_calibration_hits_target_from_below():
    s = calibrate_noise_multiplier(2.0, 1e-5, 0.01, 500, "rdp")
    eps = epsilon_for([(s, 0.01, 500)], 1e-5, "rdp").epsilon
    assert 0.97 * 2.0 <= eps <= 2.0


def test_budget_guard_refuses_exactly_the_step_over_target():
    led = DPLedger()
    g = BudgetGuard(led, target_epsilon=3.0, delta=1e-5, accountant="rdp")
    k = g.allowed_steps(1.0, 0.05)
    assert k == int(k) and k >= 1  # a whole number of steps; exactness checked below
    for _ in range(int(k)):
        g.check_step(1.0, 0.05)
        g.record(1.0, 0.05)
    assert led.epsilon(1e-5, "rdp").epsilon <= 3.0
    assert epsilon_for([(1.0, 0.05, int(k) + 1)], 1e-5, "rdp").epsilon > 3.0
    with pytest.raises(PrivacyBudgetExceeded) as ei:
        g.check_step(1.0, 0.05)
    assert ei.value.target == 3.0 and led.steps == k


def test_calibrated_plan_costs_the_guard_no_accountant_call_and_is_still_guarded(monkeypatch):
    """make_private calibrates sigma so that the planned steps fit: the guard takes that as known (calibration
    evaluated the same epsilon) instead of ~10 PLD calls per run; past the plan it checks as before, and the
    ledger never exceeds the target."""
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(0))
    model = nn.Linear(3, 1)
    pt = make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(TensorDataset(x), batch_size=16),
        target_epsilon=2.0,
        steps=6,
        max_grad_norm=1.0,
        accountant="rdp",
        rng=0,
    )
    calls = []
    real = ledger_mod.epsilon_for
    monkeypatch.setattr(ledger_mod, "epsilon_for", lambda *a, **k: calls.append(a) or real(*a, **k))
    sigma, q = pt.noise_multiplier, pt.sample_rate
    for _ in range(6):  # the plan: no accountant call
        pt.guard.check_step(sigma, q)
        pt.guard.record(sigma, q)
    assert calls == []
    assert pt.epsilon() <= 2.0
    with pytest.raises(
        PrivacyBudgetExceeded
    ):  # calibrated to the plan: one step more would exceed it
        pt.guard.check_step(sigma, q)
    assert calls  # past the plan the guard evaluated the accountant


def test_delta_defaults_and_rejections():
    assert default_delta(1000) == 1e-5
    assert default_delta(10**6) == pytest.approx(10**6**-1.1 if False else (10**6) ** -1.1)
    with pytest.raises(InvalidPrivacyParameter, match=r"delta must be in \(0, 1/N\)"):
        check_delta(0.01, 100)
    with pytest.raises(InvalidPrivacyParameter, match="delta"):
        check_delta(1.0, None)
    with pytest.raises(InvalidArgument, match="accountant"):
        epsilon_for([(1.0, 0.1, 1)], 1e-5, "gdp")


def test_sharded_noise_multiplier():
    assert effective_noise_multiplier(0.5, 16) == pytest.approx(2.0)
    with pytest.raises(InvalidArgument, match="num_shards"):
        effective_noise_multiplier(1.0, 0)
