"""Real Flower deployment on loopback: SuperLink + 3 SuperNodes (real processes, free ports), `flwr run`
of the generated privnlp app, 2 DP-FedAvg rounds; the model must change and epsilon be accounted.
Processes are stopped in a ``finally`` (run_loopback); the whole test is bounded by its timeouts.

Issue #15 item 1, end to end: the clients' learning rate is ~0 so the released model is the initial model
plus the server's noise; a participant who knows the run config (seed 0, sent to every SuperNode) recomputes
the noise the pre-fix ServerApp drew (``round_seeds(seed, r)``) and subtracts it: with OS-entropy noise the
residual stays of the order of the noise (the seeded twin, which it recomputes exactly, is in
test_flower_faults)."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.timeout(150)
def test_flower_loopback_two_dp_rounds(tmp_path):
    pytest.importorskip("flwr")
    from concurrent.futures import ThreadPoolExecutor

    from privnlp.mechanisms.federated.flower import run_loopback

    def expected():  # dp_accounting import + the without-replacement RDP curve: overlapped with process start-up
        from privnlp.mechanisms.federated.accounting import dp_fedavg_adversary_bounds

        bounds = dp_fedavg_adversary_bounds(
            noise_multiplier=1.0,
            clients_per_round=3,
            population=3,
            rounds=2,
            delta=1e-3,
            sampling="fixed",
        )
        return max(b.epsilon for b in bounds)  # the headline: the strongest adversary (issue #28)

    with ThreadPoolExecutor(1) as ex:
        want = ex.submit(expected)
        res = run_loopback(
            tmp_path,
            {
                "mechanism": "dp_fedavg",
                "num-server-rounds": 2,
                "clip-norm": 0.5,
                "noise-multiplier": 1.0,
                "delta": 1e-3,
                "lr": 1e-9,
            },
            num_nodes=3,
            timeout=120,
        )
        want = want.result()
    assert "error" not in res, res
    assert len(res["history"]) == 2 and all(h["replies"] == 3 for h in res["history"])
    assert res["model_change"] > 0
    claim = res["claim"]
    assert claim["unit"] == "user" and claim["ledger"]["rounds"][0]["rounds"] == 2
    assert float(claim["epsilon"]) == pytest.approx(want, rel=1e-9)
    assert math.isfinite(float(claim["epsilon"]))
    assert claim["noise_seeded"] is False

    # the participant's attack on the released model
    import torch

    from privnlp.mechanisms.federated import flower as fl
    from privnlp.mechanisms.federated.client import trainable_state
    from privnlp.mechanisms.federated.simulator import round_seeds

    std = 1.0 * 0.5 / 3
    task, _ = fl._task_and_data(dict(fl.DEFAULT_RUN_CONFIG), 0, 3)
    guess = trainable_state(task.model_factory())
    for r in (1, 2):
        g = torch.Generator().manual_seed(round_seeds(0, r)[2])
        guess = {k: v + std * torch.randn(v.shape, generator=g) for k, v in guess.items()}
    final = torch.load(tmp_path / "out" / "final.pt", weights_only=True)
    resid = torch.cat([(final[k] - guess[k]).flatten() for k in guess])
    assert float(resid.abs().max()) > 0.05 and 0.3 * std < float(resid.std()) < 6 * std
