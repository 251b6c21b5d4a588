"""The leaky twin of ``fedavg`` (double weighting by example counts) is caught: the largest client
dominates the aggregate, which moves further than the weighted mean."""

from __future__ import annotations

import torch

from privnlp.core.registry import LEAKY_TWINS
from privnlp.mechanisms.federated.aggregation import global_norm
from privnlp.mechanisms.federated.client import FitRes
from privnlp.mechanisms.federated.mechanisms import FedAvg


def test_fedavg_twin_overweights_the_large_client():
    real = FedAvg.example("quick")
    twin = LEAKY_TWINS.get("fedavg")(**vars(real))
    assert twin.claim() == real.claim()
    ref = {"w": torch.zeros(3)}
    # three small clients without the canary direction, one large sharer pushing along it
    replies = [
        FitRes({"w": torch.tensor([0.0, 1.0, 0.0])}, {"num-examples": 8.0}) for _ in range(3)
    ]
    replies.append(FitRes({"w": torch.tensor([4.0, 0.0, 0.0])}, {"num-examples": 16.0}))
    g = torch.Generator().manual_seed(0)
    good, _ = real.aggregate(ref, replies, num_selected=4, plan={}, generator=g)
    bad, _ = twin.aggregate(ref, replies, num_selected=4, plan={}, generator=g)
    assert torch.allclose(good["w"], torch.tensor([1.6, 0.6, 0.0]))  # n_k / sum n
    assert float(bad["w"][0]) > float(good["w"][0]) + 0.5  # the sharer's direction dominates
    assert global_norm(bad) > global_norm(good)
