"""Leaky twins (see privnlp/mechanisms/testing.py) of the federated mechanisms.

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (FedAvg, the federated secret sharer).

``fedavg`` -> :class:`LeakyFedAvgDoubleWeighted`: the server weights every client delta by its
example count although the client already scaled its delta by that count (a double weighting seen
when a client-side "weighted" strategy meets a server-side weighted mean). The effective weights are
``n_k^2 / sum n_j^2``: clients with more examples -- here the secret sharers, who hold extra canary
copies -- dominate the global update, so their canary is memorised more.
"""

from __future__ import annotations

from privnlp.core.registry import LEAKY_TWINS

from .aggregation import weighted_average
from .mechanisms import FedAvg

__all__ = ["LeakyFedAvgDoubleWeighted"]


@LEAKY_TWINS.register("fedavg")
class LeakyFedAvgDoubleWeighted(FedAvg):
    """Deliberately broken FedAvg: same constructor and claim as ``fedavg``, but every client's delta
    is weighted by its example count *twice* (``n_k^2 / sum_j n_j^2`` instead of ``n_k / sum_j n_j``),
    so large clients (the canary sharers of ``fl.dp_fedavg``) dominate the aggregate."""

    def aggregate(self, reference, replies, *, num_selected, plan, generator):
        if not self.weighted:
            return super().aggregate(
                reference, replies, num_selected=num_selected, plan=plan, generator=generator
            )
        weights = [
            float(r.metrics.get("num-examples", 1.0)) ** 2 for r in replies
        ]  # BUG: weighted twice
        return weighted_average([r.arrays for r in replies], weights, reference)
