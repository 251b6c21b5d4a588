"""The dp_fedavg card states the claim per adversary for both deployment modes (issue 28 item 8):
central noise (the server adds it) and SecAgg+ with distributed Skellam noise."""

import math
from pathlib import Path

import numpy as np

from privnlp.core.claims import Adversary
from privnlp.core.report import LeakageReport
from privnlp.evaluation.cards import _keep_cpu_intervals, _mode_lines
from privnlp.evaluation.scenarios.federated import FLDPFedAvgScenario, federated_secret_sharer_data
from privnlp.evaluation.scenarios.memorization import digit_bpe_tokenizer
from privnlp.mechanisms.federated import DPFedAvg, lm_task
from privnlp.mechanisms.federated.secagg import SkellamPlan, secagg_adversary_bounds


def test_both_modes_per_adversary():
    mech = DPFedAvg.example("quick")
    dim = FLDPFedAvgScenario.model_parameters("quick")
    assert dim > 10_000
    modes = mech.deployment_claims(dim=dim)
    central, secure = modes.values()
    assert central == mech.claim().adversaries
    server = {b.adversary: b for b in central}[Adversary.HONEST_BUT_CURIOUS_SERVER.value]
    assert not server.amplified and server.epsilon == mech.claim().epsilon
    plan = mech.plan(mech.num_users, mech.rounds)
    want = secagg_adversary_bounds(
        SkellamPlan(
            clip_norm=mech.clip_norm,
            levels=1024,
            dim=dim,
            clients=mech.clients_per_round,
            min_survivors=mech.clients_per_round,
            noise_multiplier=plan["noise_multiplier"],
        ),
        rounds=mech.rounds,
        population=mech.num_users,
        delta=plan["delta"],
    )
    assert secure == want
    assert {b.adversary for b in secure} == {b.adversary for b in central}
    assert all(not b.amplified and math.isfinite(b.epsilon) for b in secure)


def test_poisson_rounds_have_no_secagg_mode():
    mech = DPFedAvg(
        noise_multiplier=1.0, rounds=5, num_users=50, clients_per_round=5, sampling="poisson"
    )
    assert list(mech.deployment_claims(dim=100)) == ["central noise (the server adds it)"]


def test_card_table_lists_every_mode_and_adversary():
    mech = DPFedAvg.example("quick")
    modes = mech.deployment_claims(dim=1000)
    cfg = {"dim": 1000, "modes": {k: [b.to_dict() for b in v] for k, v in modes.items()}}
    lines = _mode_lines(cfg)
    rows = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| mode")]
    assert len(rows) == sum(len(v) for v in modes.values()) == 6
    assert "d = 1000" in lines[0]
    assert any("SecAgg+" in r and "honest-but-curious server" in r for r in rows)
    assert _mode_lines(None) == [] and _mode_lines({"modes": {}}) == []


def test_model_parameters_bound_the_trained_model():
    # the card's d is the preset's vocabulary bound: the scenario's real model never has more coordinates
    # (more coordinates = a larger rounding bound = a larger epsilon, so the card never understates)
    cfg = FLDPFedAvgScenario.PRESETS["quick"]
    d = federated_secret_sharer_data(cfg, rng=np.random.default_rng(0))
    tok = digit_bpe_tokenizer(
        d["public"], int(cfg["vocab_size"]), model_max_length=cfg["model"]["n_positions"]
    )
    model = lm_task(tok, **cfg["model"]).model_factory()
    real = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 0 < real <= FLDPFedAvgScenario.model_parameters("quick")


def test_regenerated_card_drops_the_interval_of_an_attack_no_longer_measured():
    rep = LeakageReport.load(Path(__file__).parents[2] / "cards/mechanisms/dp_fedavg/report.json")
    att = rep.attacks[0].attack
    stale = {"config": {"cpu_intervals": {"lamp": {"undefended": [0.0, 0.2]}}}}
    assert (
        _keep_cpu_intervals(rep, stale) is rep
    )  # quick LAMP is not measured: dropped, no KeyError
    mean = rep.attacks[0].defended[rep.attacks[0].headline_metric].mean
    kept = {
        "config": {
            "cpu_intervals": {att: {"defended": [mean - 1.0, mean + 1.0]}},
            "cpu_interval_environments": ["a CPU"],
        }
    }
    out = _keep_cpu_intervals(rep, kept)
    assert out.config["cpu_intervals"][att]["defended"] == [mean - 1.0, mean + 1.0]
