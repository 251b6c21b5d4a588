"""Issue #28 item 2: DP-SGD's sampling rate and normaliser are public hyperparameters, never the private N.

The adversary of an add/remove claim sees everything but whether one example is in the data. If q or the
noise std depend on N, N and N+1 are distinguishable from the noise scale alone (the issue measured
eps >= 3.36 from one step of a 10-parameter model). These tests play that adversary.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privnlp.core.errors import InvalidArgument, InvalidPrivacyParameter
from privnlp.mechanisms.training import make_private
from privnlp.mechanisms.training.dp_sgd import ADD_REMOVE, ZERO_OUT, resolve_sampling

SIGMA, C = 1.0, 1.0


def _run(n: int, **sampling):
    """One noise-only-ish step (zero gradients) on a 2001-parameter model: p.grad is the noise / B."""
    torch.manual_seed(0)
    model = nn.Linear(2000, 1)
    dl = DataLoader(
        TensorDataset(
            torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 2000), torch.zeros(n, 1)
        ),
        batch_size=10,
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    pt = make_private(
        model, opt, dl, noise_multiplier=SIGMA, max_grad_norm=C, accountant="rdp", rng=7, **sampling
    )
    grads = []
    for i, batch in enumerate(pt.data_loader):
        pt.optimizer.zero_grad()
        if batch[0].shape[0] == 0:
            pt.noise_only_step()
        else:
            pt.loss(0.0 * ((pt.model(batch[0]) - batch[1]) ** 2).mean(1)).backward()
            pt.optimizer.step()
        grads.append(torch.cat([model.weight.grad.flatten(), model.bias.grad.flatten()]))
        if i == 2:
            break
    return pt, torch.cat(grads)


@pytest.mark.parametrize(
    "sampling",
    [
        {"expected_batch_size": 10, "public_dataset_size": 200},
        {"expected_batch_size": 10, "sample_rate": 0.05},
        {"sample_rate": 0.05, "public_dataset_size": 200},
    ],
)
def test_n_and_n_plus_1_same_noise_scale_and_sampling_rate(sampling):
    pt_a, noise_a = _run(100, **sampling)
    pt_b, noise_b = _run(101, **sampling)
    # the adversary's view of the mechanism: q, B, the noise std and the whole published claim
    assert pt_a.sample_rate == pt_b.sample_rate == pytest.approx(0.05)
    assert pt_a.expected_batch_size == pt_b.expected_batch_size == 10
    assert pt_a.optimizer.expected_batch_size == pt_b.optimizer.expected_batch_size == 10
    assert pt_a.optimizer.noise_multiplier == pt_b.optimizer.noise_multiplier
    # measured noise std on the mean: sigma*C/B for both sizes (3 x 2001 coordinates: ~1.3% relative error
    # of a std estimate; tolerance 6%)
    for noise in (noise_a, noise_b):
        assert float(noise.std()) == pytest.approx(SIGMA * C / 10, rel=0.06)
    ca, cb = pt_a.claim().to_dict(), pt_b.claim().to_dict()
    assert ca == cb  # the published claim is the same whatever N is
    assert ca["neighbouring"] == ADD_REMOVE
    assert "dataset_size" not in ca["extra"]
    assert "100" not in ca["statement"] and "101" not in pt_b.privacy_statement()


def test_default_mode_is_a_zero_out_claim_with_n_public():
    # today's behaviour kept for compatibility, but the claim now names the relation it holds for
    pt_a, _ = _run(100)
    pt_b, _ = _run(101)
    assert pt_a.sample_rate == pytest.approx(0.1) and pt_b.sample_rate == pytest.approx(1 / 11)
    assert pt_a.optimizer.expected_batch_size != pt_b.optimizer.expected_batch_size or (
        pt_a.sample_rate != pt_b.sample_rate
    )
    claim = pt_a.claim()
    assert claim.neighbouring == ZERO_OUT
    assert claim.extra["dataset_size"] == 100  # public under the zero-out relation, and said so
    assert any("zero-out" in n for n in claim.notes)
    assert "zero-out" in pt_a.privacy_statement()


def test_public_sampling_epochs_and_default_delta_use_the_public_size():
    model = nn.Linear(3, 1)
    dl = DataLoader(TensorDataset(torch.randn(50, 3), torch.randn(50, 1)), batch_size=5)
    pt = make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        dl,
        target_epsilon=5.0,
        epochs=2,
        expected_batch_size=8,
        public_dataset_size=400,
        rng=0,
    )
    assert pt.planned_steps == 100  # 2 epochs of a public N of 400 at B = 8
    assert pt.delta == pytest.approx(
        1e-5
    )  # min(1e-5, 400^-1.1): from the public N, not the private 50
    assert len(pt.data_loader) == 50  # steps of one pass: 1/q


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"expected_batch_size": 10}, "exactly two"),
        (
            {"expected_batch_size": 10, "sample_rate": 0.1, "public_dataset_size": 100},
            "exactly two",
        ),
        ({"expected_batch_size": 0, "public_dataset_size": 100}, "expected_batch_size"),
        ({"expected_batch_size": 10, "public_dataset_size": 50}, "public_dataset_size"),
        ({"expected_batch_size": 200, "public_dataset_size": 150}, "expected_batch_size"),
        ({"sample_rate": 1.5, "expected_batch_size": 4}, "sample_rate"),
        ({"sample_rate": 0.0, "expected_batch_size": 4}, "sample_rate"),
    ],
)
def test_bad_public_sampling_is_refused(kwargs, match):
    with pytest.raises((InvalidArgument, InvalidPrivacyParameter), match=match):
        resolve_sampling(100, 10, **kwargs)
