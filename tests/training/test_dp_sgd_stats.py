"""Seeded statistical tests of the DP-SGD wrapper on tiny linear models (stated tolerances)."""

from __future__ import annotations

import math
import os
import stat

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privnlp.core.errors import InvalidArgument, InvalidPrivacyParameter, PrivacyBudgetExceeded
from privnlp.core.registry import LEAKY_TWINS
from privnlp.mechanisms.training import DPSGD, make_private, private_training, train_private


def _linear(d_in=10, d_out=1, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(d_in, d_out)


def _mse_loss(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean(1)


def _total_grad_norm(params):
    return math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params if p.grad is not None))


def _clip_check(mech_cls, mode):
    model = _linear()
    x = torch.full((1, 10), 100.0)
    y = torch.full((1, 1), -100.0)  # huge gradient: norm >> C
    dl = DataLoader(TensorDataset(x, y), batch_size=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    mech = mech_cls(
        noise_multiplier=0.0,
        max_grad_norm=0.7,
        poisson_sampling=False,
        grad_sample_mode=mode,
        accountant="rdp",
    )
    pt = mech.make_private(model, opt, dl, rng=0)
    batch = next(iter(pt.data_loader))
    pt.optimizer.zero_grad()
    pt.loss(_mse_loss(pt.model, batch)).backward()
    pt.optimizer.step()
    # expected batch size 1 => p.grad is the clipped summed gradient
    return _total_grad_norm(model.parameters())


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_per_sample_clipping_respected_sigma0_single_example(mode):
    # tolerance: 1e-4 relative (opacus adds 1e-6 to the norm in the clip factor)
    assert _clip_check(DPSGD, mode) == pytest.approx(0.7, rel=1e-4)


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_leaky_twin_without_clipping_is_caught(mode):
    twin = LEAKY_TWINS.get("dp_sgd")
    assert _clip_check(twin, mode) > 10 * 0.7


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_noise_std_on_mean_is_sigma_C_over_expected_batch(mode):
    # zero per-sample gradients => p.grad is pure noise / B_expected. 5 steps x 2001 coordinates:
    # the std estimate has ~0.7% relative error; tolerance 5%.
    n, b, sigma, c = 400, 20, 1.3, 0.5
    model = nn.Linear(2000, 1)
    x = torch.zeros(n, 2000)
    y = torch.zeros(n, 1)
    dl = DataLoader(TensorDataset(x, y), batch_size=b)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    pt = make_private(
        model,
        opt,
        dl,
        noise_multiplier=sigma,
        max_grad_norm=c,
        accountant="rdp",
        grad_sample_mode=mode,
        rng=123,
    )
    assert pt.expected_batch_size == b
    samples = []
    for i, batch in enumerate(pt.data_loader):
        pt.optimizer.zero_grad()
        if batch[0].shape[0] == 0:
            pt.noise_only_step()
        else:
            pt.loss(0.0 * _mse_loss(pt.model, batch)).backward()
            pt.optimizer.step()
        samples.append(torch.cat([model.weight.grad.flatten(), model.bias.grad.flatten()]))
        if i == 4:
            break
    s = torch.cat(samples)
    assert float(s.mean()) == pytest.approx(0.0, abs=0.05 * sigma * c / b)
    assert float(s.std()) == pytest.approx(sigma * c / b, rel=0.05)
    assert pt.steps == 5


def test_one_accounting_event_per_logical_step_under_accumulation():
    n = 64
    model = _linear()
    dl = DataLoader(TensorDataset(torch.randn(n, 10), torch.randn(n, 1)), batch_size=32)  # q = 0.5
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pt = make_private(
        model, opt, dl, noise_multiplier=1.0, max_grad_norm=1.0, accountant="rdp", rng=1
    )
    calls = {"n": 0}
    orig = pt.optimizer.original_optimizer.step

    def counting_step(*a, **k):
        calls["n"] += 1
        return orig(*a, **k)

    pt.optimizer.original_optimizer.step = counting_step
    res = train_private(pt, _mse_loss, steps=3, max_physical_batch_size=4)
    assert res.steps == 3 and pt.ledger.steps == 3
    assert calls["n"] == 3  # parameters updated once per logical step
    assert len(res.losses) > 3 * 2  # ~8 physical batches of <= 4 per logical batch of ~32
    assert pt.ledger.runs[0].sample_rate == 0.5


def test_budget_refusal_before_the_step():
    model = _linear()
    dl = DataLoader(TensorDataset(torch.randn(100, 10), torch.randn(100, 1)), batch_size=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pt = make_private(
        model,
        opt,
        dl,
        noise_multiplier=1.0,
        target_epsilon=3.0,
        max_grad_norm=1.0,
        accountant="rdp",
        rng=2,
    )
    allowed = pt.allowed_steps()
    assert allowed == int(allowed) and allowed >= 1  # exact: the next step is refused below
    train_private(pt, _mse_loss, steps=int(allowed))
    assert pt.epsilon() <= 3.0
    w_before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(PrivacyBudgetExceeded):
        train_private(pt, _mse_loss, steps=1)
    assert pt.steps == allowed  # the refused step left no trace in the ledger
    assert all(
        torch.equal(a, p) for a, p in zip(w_before, model.parameters())
    )  # nor in the weights
    assert all(p.grad is None for p in model.parameters())  # and no noised gradient is left behind
    res = train_private(pt, _mse_loss, steps=1, stop_at_budget=True)
    assert res.stopped_by_budget and res.steps == 0


def test_target_epsilon_calibration_spends_the_budget():
    model = _linear()
    dl = DataLoader(TensorDataset(torch.randn(200, 10), torch.randn(200, 1)), batch_size=20)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pt = make_private(
        model, opt, dl, target_epsilon=2.0, epochs=2, max_grad_norm=1.0, accountant="rdp", rng=3
    )
    assert pt.planned_steps == 20
    train_private(pt, _mse_loss, steps=20)  # every planned step fits
    assert 0.97 * 2.0 <= pt.epsilon() <= 2.0
    c = pt.claim()
    assert c.kind.value == "dp" and c.delta == 1e-5 and c.extra["steps"] == 20


def test_checkpoint_resume_reproduces_epsilon_exactly(tmp_path):
    data = TensorDataset(torch.randn(100, 10), torch.randn(100, 1))

    def fresh(seed):
        m = _linear(seed=seed)
        o = torch.optim.SGD(m.parameters(), lr=0.1)
        return m, make_private(
            m,
            o,
            DataLoader(data, batch_size=10),
            noise_multiplier=1.1,
            max_grad_norm=1.0,
            target_epsilon=5.0,
            accountant="rdp",
            rng=4,
        )

    m1, pt1 = fresh(0)
    train_private(pt1, _mse_loss, steps=3)
    path = pt1.save_checkpoint(tmp_path / "ckpt.pt")
    eps1 = pt1.epsilon()
    m2, pt2 = fresh(7)
    assert pt2.steps == 0
    pt2.load_checkpoint(path)
    assert pt2.steps == 3 and pt2.epsilon() == eps1  # exactly
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    train_private(pt2, _mse_loss, steps=2)
    train_private(pt1, _mse_loss, steps=2)
    assert pt2.ledger.runs == pt1.ledger.runs and pt2.epsilon() == pt1.epsilon()
    assert pt2.claim().accountant.startswith("dp_accounting RDP")
    # seeded run: the generators' states travel with the checkpoint, so the resumed run IS the uninterrupted one
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))


def test_shuffled_loader_claim_states_no_amplification_epsilon():
    model = _linear()
    dl = DataLoader(
        TensorDataset(torch.randn(100, 10), torch.randn(100, 1)), batch_size=10, shuffle=True
    )
    with private_training(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        dl,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        poisson_sampling=False,
        accountant="rdp",
        rng=5,
    ) as pt:
        train_private(pt, _mse_loss, steps=3)
        c = pt.claim()
    assert c.extra["sampling"] == "shuffled/fixed-size"
    # no amplification is claimed for a shuffled loader: the headline IS the no-amplification epsilon
    assert c.extra["epsilon_no_amplification"] == c.epsilon
    assert c.extra["accounted_sample_rate"] == 1.0 and c.extra["sample_rate"] == 0.1
    assert "epsilon_no_amplification" in c.statement()
    assert pt.closed


def _setup():
    model = _linear()
    dl = DataLoader(TensorDataset(torch.randn(100, 10), torch.randn(100, 1)), batch_size=10)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), dl


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(target_epsilon=-1.0, epochs=1), "target_epsilon"),
        (dict(noise_multiplier=1.0, delta=1.5), "delta"),
        (dict(noise_multiplier=1.0, delta=0.05), r"delta must be in \(0, 1/N\)"),
        (dict(noise_multiplier=1.0, max_grad_norm=0.0), "max_grad_norm"),
        (dict(noise_multiplier=-0.5), "noise_multiplier"),
        (dict(), "noise_multiplier"),
        (dict(target_epsilon=1.0), "epochs or steps"),
        (dict(noise_multiplier=1.0, accountant="gdp"), "accountant"),
    ],
)
def test_bad_input_is_refused_with_the_argument_named(kwargs, match):
    model, opt, dl = _setup()
    with pytest.raises(InvalidArgument, match=match):
        make_private(model, opt, dl, **kwargs)


def test_empty_loader_and_frozen_model_are_refused():
    model, opt, _ = _setup()
    empty = DataLoader(TensorDataset(torch.zeros(0, 10), torch.zeros(0, 1)), batch_size=10)
    with pytest.raises(InvalidArgument, match="data_loader is empty"):
        make_private(model, opt, empty, noise_multiplier=1.0)
    model, opt, dl = _setup()
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(InvalidArgument, match="no trainable parameters"):
        make_private(model, opt, dl, noise_multiplier=1.0)
    with pytest.raises(InvalidPrivacyParameter, match="max_grad_norm"):
        DPSGD(noise_multiplier=1.0, max_grad_norm=-1)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_checkpoint_file_mode_honours_the_umask(tmp_path, umask):
    """checkpoint.pt gets 0o666 minus the umask, as open() would give it (it used to be mkstemp's 0600)."""
    model = _linear()
    pt = make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(TensorDataset(torch.randn(20, 10), torch.randn(20, 1)), batch_size=5),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        accountant="rdp",
        rng=0,
    )
    old = os.umask(umask)
    try:
        path = pt.save_checkpoint(tmp_path / "ckpt.pt")
        with open(tmp_path / "plain.txt", "w") as fh:
            fh.write("x")
    finally:
        os.umask(old)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    assert mode == 0o666 & ~umask == stat.S_IMODE(os.stat(tmp_path / "plain.txt").st_mode)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left
