"""DPEngine (issue #30 item 5): one engine object with grouped options; make_private is a thin function over it."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privnlp.core.errors import InvalidArgument, InvalidPrivacyParameter
from privnlp.mechanisms.training import make_private, train_private
from privnlp.mechanisms.training.engine import Budget, Clipping, DPEngine, Noise, Sampling


def _setup(seed=0):
    torch.manual_seed(seed)
    model = nn.Linear(6, 1)
    g = torch.Generator().manual_seed(1)
    dl = DataLoader(
        TensorDataset(torch.randn(40, 6, generator=g), torch.randn(40, 1, generator=g)), 8
    )
    return model, torch.optim.SGD(model.parameters(), lr=0.1), dl


def _loss(m, batch):
    x, y = batch
    return ((m(x) - y) ** 2).mean(1)


def test_engine_equals_make_private_with_the_same_options():
    m1, o1, d1 = _setup()
    pt1 = make_private(
        m1, o1, d1, noise_multiplier=1.1, max_grad_norm=0.5, accountant="rdp", rng=3,
        expected_batch_size=8, public_dataset_size=40, grad_sample_mode="hooks",
    )  # fmt: skip
    m2, o2, d2 = _setup()
    engine = DPEngine(
        noise=Noise(noise_multiplier=1.1, rng=3),
        sampling=Sampling(expected_batch_size=8, public_dataset_size=40),
        clipping=Clipping(max_grad_norm=0.5, mode="hooks"),
        accountant="rdp",
    )
    pt2 = engine.make_private(m2, o2, d2)
    assert engine.private is pt2
    train_private(pt1, _loss, steps=4)
    train_private(pt2, _loss, steps=4)
    assert torch.equal(m1.weight, m2.weight) and torch.equal(m1.bias, m2.bias)
    assert pt1.claim().to_dict() == pt2.claim().to_dict()
    assert engine.epsilon() == pt2.epsilon() > 0


def test_engine_options_are_frozen_groups_and_budget_calibrates_sigma():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Noise().noise_multiplier = 2.0  # type: ignore[misc]
    model, opt, dl = _setup()
    engine = DPEngine(budget=Budget(target_epsilon=4.0, epochs=2), noise=Noise(rng=0))
    pt = engine.make_private(model, opt, dl)
    assert pt.planned_steps == 10 and pt.target_epsilon == 4.0
    assert pt.optimizer.noise_multiplier > 0


def test_engine_errors_name_the_option():
    with pytest.raises(InvalidArgument, match="make_private first"):
        DPEngine(noise=Noise(noise_multiplier=1.0)).epsilon()
    model, opt, dl = _setup()
    with pytest.raises(InvalidPrivacyParameter, match="max_grad_norm"):
        DPEngine(
            noise=Noise(noise_multiplier=1.0), clipping=Clipping(max_grad_norm=0)
        ).make_private(model, opt, dl)
    with pytest.raises(InvalidArgument, match="grad_sample_mode"):
        DPEngine(noise=Noise(noise_multiplier=1.0), clipping=Clipping(mode="fast")).make_private(
            model, opt, dl
        )
