"""Issue #15, item 1: the Flower ServerApp's DP-FedAvg noise must not be recomputable from the run config.

The adversary is any participant: it knows the run config (``seed``) that every SuperNode receives and
derives the server's noise seed exactly as the ServerApp did before the fix (``round_seeds(seed, r)``).
"""

from __future__ import annotations

import torch

from privnlp.mechanisms.federated import flower as fl
from privnlp.mechanisms.federated.simulator import round_seeds

SHAPE = (4096,)


def _adversary_residual(cfg: dict, r: int = 1) -> float:
    _, _, nseed = round_seeds(int(cfg["seed"]), r)
    released = torch.randn(
        SHAPE, generator=fl._server_noise_generator(cfg, nseed)
    )  # the server's noise
    guess = torch.randn(
        SHAPE, generator=torch.Generator().manual_seed(nseed)
    )  # recomputed from public seed
    return float((released - guess).std())


def test_participant_cannot_recompute_server_noise_from_run_config():
    cfg = dict(fl.DEFAULT_RUN_CONFIG)
    assert cfg["seeded-noise"] is False
    # unit-variance noise: subtracting an independent guess leaves std sqrt(2); tolerance 10% (n = 4096)
    for r in (1, 2, 3):
        assert abs(_adversary_residual(cfg, r) - 2**0.5) < 0.15


def test_explicitly_seeded_simulation_is_recomputable():
    cfg = dict(fl.DEFAULT_RUN_CONFIG, **{"seeded-noise": True})
    assert _adversary_residual(cfg) == 0.0


def test_two_server_runs_never_share_noise():
    cfg = dict(fl.DEFAULT_RUN_CONFIG)
    _, _, nseed = round_seeds(0, 1)
    a = torch.randn(SHAPE, generator=fl._server_noise_generator(cfg, nseed))
    b = torch.randn(SHAPE, generator=fl._server_noise_generator(cfg, nseed))
    assert abs(float((a - b).std()) - 2**0.5) < 0.15
