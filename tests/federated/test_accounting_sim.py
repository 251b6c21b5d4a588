"""Accounting against dp_accounting computed directly, budget, determinism, resume, snapshots, partitions."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from privnlp.accounting import DPLedger
from privnlp.core.errors import InvalidArgument, PrivacyBudgetExceeded
from privnlp.mechanisms.federated import (
    DPFedAvg,
    FedAvg,
    FedSimulator,
    partition_dirichlet,
    partition_iid,
    partition_natural,
)
from privnlp.mechanisms.federated.accounting import calibrate_user_noise, round_event, user_epsilon


def _direct_epsilon(sampling, n, m, z, rounds, delta):
    from dp_accounting import NeighboringRelation
    from dp_accounting import dp_event as de
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    logging.getLogger("absl").setLevel(logging.ERROR)
    if (
        sampling == "fixed"
    ):  # replace-one: sensitivity of the clipped sum is 2S -> noise multiplier z/2
        acc = rdpa.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
        ev = de.SampledWithoutReplacementDpEvent(n, m, de.GaussianDpEvent(z / 2))
    else:
        acc = rdpa.RdpAccountant()
        ev = de.PoissonSampledDpEvent(m / n, de.GaussianDpEvent(z))
    acc.compose(de.SelfComposedDpEvent(ev, rounds))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
def test_epsilon_equals_dp_accounting(
    linear_task, linear_clients, sampling, no_amplification_reference
):
    dp = DPFedAvg(
        clip_norm=1.0, noise_multiplier=1.1, clients_per_round=4, sampling=sampling, delta=1e-3
    )
    res = FedSimulator(dp, linear_task, linear_clients).run(5, rng=0)
    # headline: the server, who sees the selection (no amplification); the amplified RDP figure
    # only against an observer of the released models
    want = no_amplification_reference(sampling, 20, 4, 1.1, 5, 1e-3)
    assert res.claim.epsilon == pytest.approx(want, rel=1e-4)
    amplified = _direct_epsilon(sampling, 20, 4, 1.1, 5, 1e-3)
    assert res.claim.epsilon_against("observer of the released models") == pytest.approx(
        min(amplified, want), rel=1e-4
    )
    assert res.claim.epsilon_against("honest-but-curious server") == res.claim.epsilon
    assert res.claim.unit.value == "user"
    assert res.claim.neighbouring == ("replace-one" if sampling == "fixed" else "add/remove")
    assert res.ledger["rounds"][0]["rounds"] == 5


def test_target_epsilon_calibration_and_hard_budget(
    linear_task, linear_clients, no_amplification_reference
):
    dp = DPFedAvg(
        clip_norm=1.0,
        noise_multiplier=None,
        target_epsilon=4.0,
        rounds=3,
        clients_per_round=4,
        sampling="poisson",
        delta=1e-3,
    )
    res = FedSimulator(dp, linear_task, linear_clients).run(3, rng=0, checkpoint_path=None)
    z = res.claim.extra["noise_multiplier"]
    assert res.claim.epsilon <= 4.0
    # the budget is spent against the strongest adversary (the server): no amplification
    assert no_amplification_reference("poisson", 20, 4, z, 3, 1e-3) == pytest.approx(
        res.claim.epsilon, rel=1e-4
    )
    assert res.claim.epsilon > 4.0 * 0.9  # calibrated, not wildly over-noised
    # a fourth round would exceed the budget: refused before it runs, ledger untouched
    led = DPLedger.from_dict(res.ledger)
    with pytest.raises(PrivacyBudgetExceeded):
        led.check_round("poisson", 20, 4.0, z, 1e-3, 4.0)
    assert led.rounds == 3


def test_budget_refuses_the_round_before_training(linear_task, linear_clients, tmp_path):
    dp = DPFedAvg(
        clip_norm=1.0,
        noise_multiplier=None,
        target_epsilon=4.0,
        rounds=2,
        clients_per_round=4,
        sampling="poisson",
        delta=1e-3,
    )
    sim = FedSimulator(dp, linear_task, linear_clients)
    with pytest.raises(PrivacyBudgetExceeded):
        sim.run(6, rng=0, checkpoint_path=tmp_path / "ck.pt")
    ck = torch.load(tmp_path / "ck.pt", weights_only=False)
    assert DPLedger.from_dict(ck["ledger"]).user_epsilon(1e-3) <= 4.0


def test_simulator_is_deterministic_per_seed(linear_task, linear_clients):
    mk = lambda: DPFedAvg(clip_norm=0.5, noise_multiplier=1.0, clients_per_round=5, local_lr=0.05)
    a = FedSimulator(mk(), linear_task, linear_clients).run(3, rng=7)
    b = FedSimulator(mk(), linear_task, linear_clients).run(3, rng=7)
    c = FedSimulator(mk(), linear_task, linear_clients).run(3, rng=8)
    for (k, p), (_, q) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.equal(p, q), k
    assert [h.selected for h in a.history] == [h.selected for h in b.history]
    assert any(not torch.equal(p, q) for p, q in zip(a.model.parameters(), c.model.parameters()))


def test_resume_from_checkpoint_keeps_the_ledger(linear_task, linear_clients, tmp_path):
    mk = lambda: DPFedAvg(
        clip_norm=0.5, noise_multiplier=1.0, clients_per_round=5, local_lr=0.05, server_momentum=0.5
    )
    full = FedSimulator(mk(), linear_task, linear_clients).run(4, rng=11)
    ck = tmp_path / "ck.pt"
    FedSimulator(mk(), linear_task, linear_clients).run(2, rng=11, checkpoint_path=ck)
    resumed = FedSimulator(mk(), linear_task, linear_clients).run(4, rng=999, resume_from=ck)
    assert resumed.ledger == full.ledger
    assert resumed.claim.epsilon == full.claim.epsilon
    for p, q in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(p, q)
    with pytest.raises(Exception, match="another mechanism"):
        FedSimulator(
            DPFedAvg(clip_norm=0.5, noise_multiplier=2.0, clients_per_round=5),
            linear_task,
            linear_clients,
        ).run(4, rng=0, resume_from=ck)


def test_snapshots_are_streamed_to_disk(linear_task, linear_clients, tmp_path):
    res = FedSimulator(FedAvg(clients_per_round=3, local_lr=0.05), linear_task, linear_clients).run(
        3, rng=0, snapshot_dir=tmp_path / "snaps"
    )
    snaps = res.snapshots
    assert snaps.num_rounds == 3 and len(snaps.selection) == 4 and snaps.selection[0] == ()
    assert all(len(s) == 3 for s in snaps.selection[1:])
    last = snaps.load(3)
    for p, q in zip(last.parameters(), res.model.parameters()):
        assert torch.equal(p, q)
    first = snaps.load(0)
    assert any(not torch.equal(p, q) for p, q in zip(first.parameters(), last.parameters()))
    lines = [
        json.loads(x) for x in (tmp_path / "snaps" / "selection.jsonl").read_text().splitlines()
    ]
    assert [tuple(x["selected"]) for x in lines] == list(snaps.selection[1:])


def test_poisson_selection_rate(linear_task, linear_clients):
    res = FedSimulator(
        FedAvg(clients_per_round=5, sampling="poisson", local_lr=0.01), linear_task, linear_clients
    ).run(40, rng=0, evaluate=False)
    mean = sum(len(h.selected) for h in res.history) / 40
    # Binomial(20, 0.25) per round: sd of the mean over 40 rounds = 0.31; tolerance 4 sd
    assert abs(mean - 5.0) < 1.25


def test_partitions():
    from privnlp.data import generate_corpus

    recs = generate_corpus(n_users=8, records_per_user=6, seed=0).records
    nat = partition_natural(recs)
    iid = partition_iid(recs, rng=0)
    assert sorted(nat.sizes()) == sorted(iid.sizes()) and nat.num_clients == 8
    assert sorted(r.id for v in iid.clients.values() for r in v) == sorted(r.id for r in recs)
    # IID users mix natural users; natural users are pure
    assert all(len({r.user_id for r in v}) == 1 for v in nat.clients.values())
    assert any(len({r.user_id for r in v}) > 1 for v in iid.clients.values())
    d = partition_dirichlet(recs, 4, alpha=0.3, rng=0)
    assert sum(d.sizes()) == len(recs) and min(d.sizes()) >= 1


@pytest.mark.parametrize(
    "call",
    [
        lambda s: user_epsilon(s, 100, 10, 1.0, 5, 1e-5),
        lambda s: calibrate_user_noise(
            4.0, 1e-5, sampling=s, num_users=100, clients_per_round=10, rounds=5
        ),
        lambda s: round_event(s, 100, 10, 1.0),
    ],
)
def test_an_unknown_sampling_scheme_is_refused_not_accounted_as_poisson(call):
    # "Fixed" (a typo) used to fall through to the Poisson event with the full z: a smaller epsilon than the
    # fixed-size rounds that actually ran
    with pytest.raises(InvalidArgument, match="sampling must be one of"):
        call("Fixed")
    assert user_epsilon("fixed", 100, 10, 1.0, 5, 1e-5) > user_epsilon(
        "poisson", 100, 10, 1.0, 5, 1e-5
    )
