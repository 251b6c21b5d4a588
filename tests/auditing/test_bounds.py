"""From distinguishing games to epsilon (privnlp/auditing/bounds.py): hand-computed values, and mechanisms of
known epsilon (randomized response, the Gaussian mechanism) where the bound must stay below the truth and
approach it as the number of trials grows.

Papers: Jagielski et al. 2020 (Clopper-Pearson), Steinke, Nasr & Jagielski 2023 (one run), Mahloujifar,
Melis & Chaudhuri 2025 (f-DP one run); see the module docstring of privnlp.auditing.bounds.

Tolerances (seeded, deterministic): randomized response at eps = 1 with 200 000 trials per side reaches
>= 0.9 eps (measured 0.97); the Gaussian GDP audit with 50 000 runs per side reaches >= 0.9 mu (measured
0.97); every bound stays <= the truth over 20 seeds (95% bounds; the seeds are fixed, so the test is
deterministic).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from privnlp.auditing.bounds import (
    clopper_pearson,
    cp_lower,
    cp_upper,
    epsilon_lower_bound,
    epsilon_lower_bound_gdp,
    fdp_one_run_mu_lower_bound,
    gdp_delta,
    gdp_epsilon,
    gdp_mu_lower_bound,
    one_run_audit,
    one_run_epsilon_lower_bound,
    one_run_p_value,
    threshold_audit,
)
from privnlp.core.errors import InvalidArgument


# ------------------------------------------------------------------------- hand-computed values
def test_clopper_pearson_hand_values():
    # k = 0: upper = 1 - alpha^(1/n); k = n: lower = alpha^(1/n)
    assert cp_upper(0, 10, 0.05) == pytest.approx(1 - 0.05**0.1, rel=1e-9)
    assert cp_lower(10, 10, 0.05) == pytest.approx(0.05**0.1, rel=1e-9)
    assert cp_lower(0, 10, 0.05) == 0.0 and cp_upper(10, 10, 0.05) == 1.0
    lo, hi = clopper_pearson(5, 10, 0.95)
    assert lo == pytest.approx(0.187086, abs=1e-5) and hi == pytest.approx(
        0.812914, abs=1e-5
    )  # textbook values
    with pytest.raises(InvalidArgument):
        cp_upper(11, 10, 0.05)


def test_jagielski_bound_hand_value():
    # no errors in n runs per side, delta = 0: FPR_hi = FNR_hi = 1 - a^(1/n) with a = 0.025
    n = 100
    u = 1 - 0.025 ** (1 / n)
    b = epsilon_lower_bound(tp=n, fp=0, tn=n, fn=0, delta=0.0, confidence=0.95)
    assert b.epsilon == pytest.approx(math.log((1 - u) / u), rel=1e-9)
    # with delta the numerator loses delta
    b2 = epsilon_lower_bound(tp=n, fp=0, tn=n, fn=0, delta=1e-3)
    assert b2.epsilon == pytest.approx(math.log((1 - 1e-3 - u) / u), rel=1e-9)
    # a useless test (FPR = TPR) gives 0
    assert epsilon_lower_bound(tp=50, fp=50, tn=50, fn=50).epsilon == 0.0


def test_gdp_hand_values():
    n = 100
    u = 1 - 0.025 ** (1 / n)
    assert gdp_mu_lower_bound(n, 0, n, 0) == pytest.approx(2 * norm.isf(u), rel=1e-9)
    # epsilon(mu, delta) inverts delta(mu, eps); mu = 1, delta = 1e-5 -> the textbook 4.38
    e = gdp_epsilon(1.0, 1e-5)
    assert gdp_delta(1.0, e) == pytest.approx(1e-5, rel=1e-3)
    assert e == pytest.approx(4.377, abs=0.01)
    assert gdp_epsilon(0.0, 1e-5) == 0.0
    b = epsilon_lower_bound_gdp(n, 0, n, 0, delta=1e-5)
    assert b.mu == pytest.approx(2 * norm.isf(u)) and b.epsilon == pytest.approx(
        gdp_epsilon(b.mu, 1e-5)
    )


def test_steinke_one_run_hand_value():
    # m = r = v = 10, delta = 0: largest eps with q^10 <= 0.05, q = e^eps / (1 + e^eps)
    q = 0.05**0.1
    b = one_run_epsilon_lower_bound(10, 10, 10, delta=0.0, confidence=0.95)
    assert b.epsilon == pytest.approx(math.log(q / (1 - q)), abs=1e-6)
    # p-value with delta = 0 is the binomial tail; with delta > 0 it is larger (Theorem: + 2 m delta alpha)
    assert one_run_p_value(100, 40, 30, 1.0) == pytest.approx(
        binom.sf(29, 40, 1 / (1 + math.exp(-1)))
    )
    assert one_run_p_value(100, 40, 30, 1.0, 1e-3) > one_run_p_value(100, 40, 30, 1.0)
    # delta only lowers the bound
    assert (
        one_run_epsilon_lower_bound(1000, 200, 190, delta=1e-5).epsilon
        <= one_run_epsilon_lower_bound(1000, 200, 190, delta=0.0).epsilon
    )
    with pytest.raises(InvalidArgument):
        one_run_p_value(10, 5, 6, 1.0)


def test_fdp_one_run_monotone_and_null():
    # chance-level guessing is consistent with mu = 0
    assert fdp_one_run_mu_lower_bound(1000, 200, 100) == 0.0
    # more correct guesses -> a larger bound; more canaries (all guessed right) -> a larger bound
    a = fdp_one_run_mu_lower_bound(1000, 200, 170)
    b = fdp_one_run_mu_lower_bound(1000, 200, 190)
    assert 0 < a < b
    assert fdp_one_run_mu_lower_bound(100, 100, 100) < fdp_one_run_mu_lower_bound(1000, 1000, 1000)


# ------------------------------------------------------------------------- mechanisms of known epsilon
def _randomized_response(
    eps: float, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Outputs of eps-DP randomized response on bit 0 (neg) and bit 1 (pos), n runs each."""
    p = math.exp(eps) / (1 + math.exp(eps))
    neg = (rng.random(n) > p).astype(float)  # reports 1 with prob 1 - p
    pos = (rng.random(n) < p).astype(float)  # reports 1 with prob p
    return neg, pos


def test_randomized_response_bound_below_truth_and_approaching():
    eps = 1.0
    vals = []
    for n in (1000, 20000, 200000):
        neg, pos = _randomized_response(eps, n, np.random.default_rng(n))
        b = threshold_audit(neg, pos, delta=0.0, rng=0, methods=("clopper_pearson",))[
            "clopper_pearson"
        ]
        vals.append(b.epsilon)
        assert b.epsilon <= eps
    assert vals[0] < vals[1] < vals[2]
    assert vals[2] >= 0.9 * eps


def test_gaussian_mechanism_gdp_bound_below_truth_and_approaching():
    mu = 1.0
    mus = []
    for n in (2000, 50000):
        g = np.random.default_rng(n)
        b = threshold_audit(g.standard_normal(n), mu + g.standard_normal(n), delta=1e-5, rng=1)
        gdp, cp = b["gdp_clopper_pearson"], b["clopper_pearson"]
        assert gdp.mu <= mu and gdp.epsilon <= gdp_epsilon(mu, 1e-5)
        assert cp.epsilon <= gdp_epsilon(mu, 1e-5)
        mus.append(gdp.mu)
    assert mus[0] < mus[1] and mus[1] >= 0.9 * mu


def test_bounds_valid_over_seeds():
    """20 seeded repetitions: the 95% bounds never exceed the truth here (Gaussian mechanism, mu = 1)."""
    mu, delta = 1.0, 1e-5
    truth = gdp_epsilon(mu, delta)
    steinke_le_fdp = 0
    for s in range(20):
        g = np.random.default_rng(100 + s)
        inc = g.random(1000) < 0.5
        one = one_run_audit(g.standard_normal(1000) + mu * inc, inc, delta=delta, rng=g)
        assert one["steinke_one_run"].epsilon <= truth
        assert one["fdp_gaussian_one_run"].mu <= mu and one["fdp_gaussian_one_run"].epsilon <= truth
        steinke_le_fdp += one["steinke_one_run"].epsilon <= one["fdp_gaussian_one_run"].epsilon
        rep = threshold_audit(
            g.standard_normal(500), mu + g.standard_normal(500), delta=delta, rng=s
        )
        assert rep["gdp_clopper_pearson"].mu <= mu and rep["clopper_pearson"].epsilon <= truth
    assert steinke_le_fdp >= 18  # the f-DP analysis is the tighter one (Mahloujifar et al.)
