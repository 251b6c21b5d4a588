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
