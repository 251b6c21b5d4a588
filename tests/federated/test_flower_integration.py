"""Real Flower deployment on loopback: SuperLink + 3 SuperNodes (real processes, free ports), `flwr run`
of the generated privnlp app, 2 DP-FedAvg rounds; the model must change and epsilon be accounted.
Processes are stopped in a ``finally`` (run_loopback); the whole test is bounded by its timeouts."""
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
        from privnlp.mechanisms.federated.accounting import user_epsilon

        return user_epsilon("fixed", 3, 3, 1.0, 2, 1e-3)

    with ThreadPoolExecutor(1) as ex:
        want = ex.submit(expected)
        res = run_loopback(tmp_path, {"mechanism": "dp_fedavg", "num-server-rounds": 2, "clip-norm": 0.5,
                                      "noise-multiplier": 1.0, "delta": 1e-3}, num_nodes=3, timeout=120)
        want = want.result()
    assert "error" not in res, res
    assert len(res["history"]) == 2 and all(h["replies"] == 3 for h in res["history"])
    assert res["model_change"] > 0
    claim = res["claim"]
    assert claim["unit"] == "user" and claim["ledger"]["runs"][0]["rounds"] == 2
    assert float(claim["epsilon"]) == pytest.approx(want, rel=1e-9)
    assert math.isfinite(float(claim["epsilon"]))
