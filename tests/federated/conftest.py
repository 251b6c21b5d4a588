"""Tiny fixtures for the federated tests: a linear-regression task (milliseconds per round)."""

from __future__ import annotations

import pytest
import torch

from privnlp.mechanisms.federated import ClientData, Task


def _factory():
    g = torch.Generator().manual_seed(0)
    m = torch.nn.Linear(4, 1)
    with torch.no_grad():
        m.weight.copy_(torch.randn(m.weight.shape, generator=g))
        m.bias.zero_()
    return m


def _loss(model, batch):
    x, y = batch
    return (model(x).squeeze(-1) - y) ** 2


@pytest.fixture(scope="session")
def linear_task():
    return Task(_factory, _loss)


@pytest.fixture(scope="session")
def linear_clients():
    g = torch.Generator().manual_seed(1)
    w = torch.tensor([1.0, -2.0, 0.5, 3.0])
    out = {}
    for i in range(20):
        n = 3 + (i % 5) * 4
        x = torch.randn(n, 4, generator=g)
        out[f"c{i:02d}"] = ClientData((x, x @ w + 0.1 * torch.randn(n, generator=g)))
    return out


def _no_amplification_reference(sampling, n, m, z, rounds, delta):
    """The DP-FedAvg server's user-level epsilon, computed here with dp_accounting directly (issue 28):
    participations K ~ Binomial(rounds, m/n) bounded by the smallest k with P(K > k) <= delta/2, the
    Gaussian composition over k rounds at delta/2 (PLD, pessimistic), or every round at delta if
    smaller. Noise multiplier z/2 for fixed-size rounds (replace-one: sensitivity 2S)."""
    from dp_accounting import dp_event as de
    from dp_accounting.pld import pld_privacy_accountant as pa
    from scipy.stats import binom

    za = z / 2 if sampling == "fixed" else z

    def gauss(k, d):
        if k == 0:
            return 0.0
        acc = pa.PLDAccountant(value_discretization_interval=1e-2)
        acc.compose(de.GaussianDpEvent(za), k)
        return acc.get_epsilon(d)

    k = 0
    while binom.sf(k, rounds, m / n) > delta / 2:
        k += 1
    return min(gauss(k, delta / 2), gauss(rounds, delta))


@pytest.fixture(scope="session")
def no_amplification_reference():
    return _no_amplification_reference
