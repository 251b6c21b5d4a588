"""DP-FedAvg: unweighted fixed-denominator aggregation, clipping bound, noise std, fail-closed, leaky twin,
budget. Statistical tests are seeded and state their tolerance."""

from __future__ import annotations

import math

import pytest
import torch

from privnlp.core.errors import InvalidPrivacyParameter, ProtocolError
from privnlp.core.registry import LEAKY_TWINS
from privnlp.mechanisms.federated import (
    DPFedAvg,
    FedAvg,
    FedSimulator,
    FitRes,
    LeakyDPFedAvgWeighted,
    dp_average,
    global_norm,
    weighted_average,
)


def _ref():
    return {"w": torch.zeros(3), "b": torch.zeros(2)}


def test_unweighted_fixed_denominator_aggregation():
    deltas = [
        {"w": torch.tensor([0.1, 0.0, 0.0]), "b": torch.zeros(2)},
        {"w": torch.tensor([0.0, 0.2, 0.0]), "b": torch.zeros(2)},
    ]
    out, info = dp_average(
        deltas,
        _ref(),
        clip_norm=1.0,
        noise_multiplier=0.0,
        denominator=4.0,
        generator=torch.Generator().manual_seed(0),
    )
    # divided by the planned m=4, not by the 2 replies, and not weighted by example counts
    assert torch.allclose(out["w"], torch.tensor([0.025, 0.05, 0.0]))
    assert info.denominator == 4.0 and info.clipped == 0


def test_simulator_ignores_example_counts_under_dp(linear_task, linear_clients):
    ids = list(linear_clients)

    def client(
        cid, ins
    ):  # every client pushes +0.1 on the bias, with very different example counts
        return FitRes(
            {"weight": torch.zeros(1, 4), "bias": torch.full((1,), 0.1)},
            {"num-examples": 1.0 + 1000.0 * (ids.index(cid) % 2)},
        )

    dp = DPFedAvg(clip_norm=1.0, noise_multiplier=0.0, clients_per_round=4)
    res = FedSimulator(dp, linear_task, linear_clients, client_fn=client).run(1, rng=0)
    assert float(res.model.bias.detach()) == pytest.approx(0.1, abs=1e-6)


def test_weighted_fedavg_weights_by_examples():
    deltas = [{"w": torch.ones(3), "b": torch.zeros(2)}, {"w": torch.zeros(3), "b": torch.zeros(2)}]
    out, _ = weighted_average(deltas, [3.0, 1.0], _ref())
    assert torch.allclose(out["w"], torch.full((3,), 0.75))


@pytest.mark.parametrize("z", [0.0, 1.0])
def test_huge_update_moves_model_by_at_most_S_over_m_plus_noise(linear_task, linear_clients, z):
    S, m = 0.5, 4
    ids = list(linear_clients)

    def client(cid, ins):
        scale = 1e6 if cid == ids[0] else 0.0  # one malicious client, the others send nothing
        return FitRes(
            {"weight": torch.full((1, 4), scale), "bias": torch.full((1,), scale)},
            {"num-examples": 1e6},
        )

    init = {k: v.detach().clone() for k, v in linear_task.model_factory().named_parameters()}
    worst = 0.0
    for seed in range(10):
        res = FedSimulator(
            DPFedAvg(clip_norm=S, noise_multiplier=z, clients_per_round=m, sampling="fixed"),
            linear_task,
            linear_clients,
            client_fn=client,
        ).run(1, rng=seed)
        move = global_norm({k: p.detach() - init[k] for k, p in res.model.named_parameters()})
        worst = max(worst, move)
    # 5 coordinates of noise with std z*S/m: the noise norm is < 6 std with overwhelming probability
    bound = S / m + (6.0 * z * S / m * math.sqrt(5) if z > 0 else 1e-6)
    assert worst <= bound


def test_leaky_twin_is_caught(linear_task, linear_clients):
    assert LEAKY_TWINS.get("dp_fedavg") is LeakyDPFedAvgWeighted
    ids = list(linear_clients)

    def client(cid, ins):
        scale = 1e3 if cid in ids[:10] else 0.0
        return FitRes(
            {"weight": torch.full((1, 4), scale), "bias": torch.full((1,), scale)},
            {"num-examples": 5.0},
        )

    S, m = 0.5, 10
    init = {k: v.detach().clone() for k, v in linear_task.model_factory().named_parameters()}
    twin = FedSimulator(
        LeakyDPFedAvgWeighted(clip_norm=S, noise_multiplier=0.0, clients_per_round=m),
        linear_task,
        linear_clients,
        client_fn=client,
    ).run(1, rng=3)
    move = global_norm({k: p.detach() - init[k] for k, p in twin.model.named_parameters()})
    assert move > 10 * S / m, "the leaky twin must be caught by the S/m bound"


def test_noise_std_is_z_S_over_m():
    # 200_000 coordinates: the sample std has relative sd 1/sqrt(2n) = 0.16%; tolerance 1% (> 6 sd)
    z, S, m = 1.3, 0.7, 5
    ref = {"w": torch.zeros(200_000)}
    out, info = dp_average(
        [{"w": torch.zeros(200_000)}] * m,
        ref,
        clip_norm=S,
        noise_multiplier=z,
        denominator=m,
        generator=torch.Generator().manual_seed(123),
    )
    assert info.noise_std == pytest.approx(z * S / m)
    assert float(out["w"].std()) == pytest.approx(z * S / m, rel=0.01)
    assert abs(float(out["w"].mean())) < 6 * z * S / m / math.sqrt(200_000)


def test_fail_closed_on_missing_replies(linear_task, linear_clients):
    ids = list(linear_clients)

    def flaky(cid, ins):
        if cid == ids[3]:
            raise ConnectionError("node went away")
        return FitRes({"weight": torch.zeros(1, 4), "bias": torch.zeros(1)}, {"num-examples": 1.0})

    dp = DPFedAvg(clip_norm=1.0, noise_multiplier=1.0, clients_per_round=20)
    with pytest.raises(ProtocolError, match="fail"):
        FedSimulator(dp, linear_task, linear_clients, client_fn=flaky).run(1, rng=0)
    # the aggregation itself refuses fewer replies than the fixed denominator
    with pytest.raises(ProtocolError):
        dp.aggregate(
            _ref(),
            [FitRes(_ref(), {"num-examples": 1.0})],
            num_selected=2,
            plan={"denominator": 2.0, "clip_norm": 1.0, "noise_multiplier": 1.0},
            generator=torch.Generator(),
        )
    # plain FedAvg tolerates the missing node (Flower's default)
    res = FedSimulator(
        FedAvg(clients_per_round=20), linear_task, linear_clients, client_fn=flaky
    ).run(1, rng=0)
    assert res.history[0].num_replies == 19


def test_non_finite_update_is_refused(linear_task, linear_clients):
    def nan_client(cid, ins):
        return FitRes(
            {"weight": torch.full((1, 4), float("nan")), "bias": torch.zeros(1)},
            {"num-examples": 1.0},
        )

    with pytest.raises(ProtocolError, match="non-finite"):
        FedSimulator(
            DPFedAvg(noise_multiplier=1.0, clients_per_round=2),
            linear_task,
            linear_clients,
            client_fn=nan_client,
        ).run(1, rng=0)


def test_clip_only_mode_claims_infinite_epsilon(linear_task, linear_clients):
    res = FedSimulator(
        DPFedAvg(clip_norm=0.1, noise_multiplier=0.0, clients_per_round=4),
        linear_task,
        linear_clients,
    ).run(2, rng=0)
    assert math.isinf(res.claim.epsilon) and "clip only" in res.claim.statement()


def test_bad_parameters_are_refused():
    with pytest.raises(InvalidPrivacyParameter, match="clip_norm"):
        DPFedAvg(clip_norm=0.0)
    with pytest.raises(InvalidPrivacyParameter, match="rounds"):
        DPFedAvg(noise_multiplier=None, target_epsilon=2.0)
    with pytest.raises(Exception, match="sampling"):
        DPFedAvg(sampling="bernoulli")
