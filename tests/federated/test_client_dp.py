"""Client-side DP-SGD (record level) inside FedAvg / DP-FedAvg: runs, bounds each record, composes in the
federated ledger, and the claim reports both levels. Statistical tests are seeded, tolerance stated."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from privnlp.accounting import DPLedger
from privnlp.core.errors import InvalidPrivacyParameter, ProtocolError
from privnlp.mechanisms.federated import (
    ClientData,
    DPFedAvg,
    FedAvg,
    FedSimulator,
    FitIns,
    FitRes,
    Task,
    global_norm,
    local_update,
)
from privnlp.mechanisms.federated.client import trainable_state


def _direct_record_epsilon(sigma, q, steps, delta):
    from dp_accounting import dp_event as de
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    logging.getLogger("absl").setLevel(logging.ERROR)
    acc = rdpa.RdpAccountant()
    acc.compose(
        de.SelfComposedDpEvent(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)), steps)
    )
    return acc.get_epsilon(delta)


def _expected_worst_client(res, clients, bs, sigma, delta):
    worst = 0.0
    for cid, data in clients.items():
        k = sum(cid in h.selected for h in res.history)
        if k == 0:
            continue
        batches = math.ceil(
            data.num_examples / min(bs, data.num_examples)
        )  # opacus: q = 1 / len(loader)
        worst = max(worst, _direct_record_epsilon(sigma, 1.0 / batches, k * batches, delta))
    return worst


def test_dp_fedavg_with_client_dp_sgd_reports_both_levels(linear_task, linear_clients):
    dp = DPFedAvg(
        clip_norm=0.5,
        noise_multiplier=1.0,
        clients_per_round=4,
        delta=1e-3,
        local_lr=0.05,
        local_batch_size=4,
        client_noise_multiplier=1.2,
        client_max_grad_norm=1.0,
        client_delta=1e-4,
    )
    res = FedSimulator(dp, linear_task, linear_clients).run(3, rng=0)
    c = res.claim
    assert c.unit.value == "user" and math.isfinite(c.epsilon)
    assert c.extra["user_epsilon"] == c.epsilon
    want = _expected_worst_client(res, linear_clients, 4, 1.2, 1e-4)
    # privnlp's DPLedger (opacus RDP) vs dp_accounting RDP computed here: different order grids, 5% tolerance
    assert c.extra["record_epsilon"] == pytest.approx(want, rel=0.05)
    assert c.extra["record_delta"] == 1e-4
    assert "record level" in c.statement()
    # the record-level steps of every participating client are in the same (persisted) ledger
    led = DPLedger.from_dict(res.ledger)
    participated = {cid for h in res.history for cid in h.selected}
    assert set(led.client_ledgers) == participated and led.rounds == 3
    assert led.record_epsilon(1e-4) == pytest.approx(c.extra["record_epsilon"], rel=1e-12)
    assert any(h.loss == h.loss for h in res.history)  # the client DP-SGD path really trained


def test_fedavg_with_client_dp_sgd_claims_record_level_only(linear_task, linear_clients):
    fa = FedAvg(
        clients_per_round=4,
        local_lr=0.05,
        local_batch_size=4,
        client_noise_multiplier=1.0,
        client_max_grad_norm=1.0,
        client_delta=1e-4,
    )
    init = trainable_state(linear_task.model_factory())
    res = FedSimulator(fa, linear_task, linear_clients).run(2, rng=1)
    c = res.claim
    assert c.kind.value == "dp" and c.unit.value == "record"
    assert math.isinf(c.extra["user_epsilon"])
    assert c.epsilon == pytest.approx(
        _expected_worst_client(res, linear_clients, 4, 1.0, 1e-4), rel=0.05
    )
    assert global_norm({k: p.detach() - init[k] for k, p in res.model.named_parameters()}) > 0
    # without a run, no number can be promised: the planned claim is not a DP claim
    assert fa.claim().kind.value == "heuristic"


def test_client_dp_sgd_bounds_each_record_and_noise_std():
    # a zero-loss-gradient task: the local delta is pure DP-SGD noise, std lr * sigma * C / B per coordinate
    # (q = 1: the expected batch is all n examples, one step). 2010 coordinates: the sample std has relative
    # sd 1/sqrt(2*2010) = 1.6%; tolerance 8% (5 sd).
    def factory():
        return torch.nn.Linear(200, 10)

    task = Task(factory, lambda m, b: (m(b[0]) * 0.0).sum(-1))
    n, lr, sigma, C = 16, 0.5, 2.0, 0.3
    data = ClientData((torch.randn(n, 200, generator=torch.Generator().manual_seed(0)),))
    cfg = {
        "local-epochs": 1.0,
        "batch-size": n,
        "lr": lr,
        "seed": 5,
        "dp-noise-multiplier": sigma,
        "dp-max-grad-norm": C,
        "dp-delta": 1e-4,
    }
    rep = local_update(task, data, FitIns(trainable_state(factory()), cfg))
    assert rep.metrics["dp-steps"] == 1 and rep.metrics["dp-sample-rate"] == 1.0
    flat = torch.cat([v.flatten() for v in rep.arrays.values()])
    assert float(flat.std()) == pytest.approx(lr * sigma * C / n, rel=0.08)
    # sigma = 0: a huge per-example gradient moves the client model by at most lr * C per step (q = 1)
    big = Task(factory, lambda m, b: 1e6 * m(b[0]).sum(-1))
    rep0 = local_update(
        big, data, FitIns(trainable_state(factory()), dict(cfg, **{"dp-noise-multiplier": 0.0}))
    )
    assert global_norm(rep0.arrays) <= lr * C * 1.0001


def test_missing_record_accounting_is_refused(linear_task, linear_clients):
    def liar(cid, ins):  # ignores the DP-SGD config: no dp-steps in the reply
        return FitRes({"weight": torch.zeros(1, 4), "bias": torch.zeros(1)}, {"num-examples": 5.0})

    for mech in (
        DPFedAvg(
            noise_multiplier=1.0,
            clients_per_round=2,
            client_noise_multiplier=1.0,
            client_max_grad_norm=1.0,
        ),
        FedAvg(clients_per_round=2, client_noise_multiplier=1.0, client_max_grad_norm=1.0),
    ):
        with pytest.raises(ProtocolError, match="record-level accounting"):
            FedSimulator(mech, linear_task, linear_clients, client_fn=liar).run(1, rng=0)
    with pytest.raises(InvalidPrivacyParameter, match="client_max_grad_norm"):
        FedAvg(client_noise_multiplier=1.0)
