"""Server-side aggregation: weighted FedAvg and user-level DP-FedAvg (clip, fixed denominator, noise once).

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (Algorithm 1: ``Delta = 1/(qN) sum_k
clip(Delta_k, S)``, ``theta <- theta + Delta + N(0, sigma^2 I)`` with ``sigma = z S / (qN)``); McMahan et
al. 2017 (FedAvg weighted by n_k). Written by hand (a few tensor ops): Flower's own DP strategies
weight by example count and do not fail closed on missing replies, which breaks the guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from privnlp.core.errors import InvalidArgument, ProtocolError

__all__ = [
    "global_norm",
    "clip_delta",
    "weighted_average",
    "dp_average",
    "AggregateInfo",
    "ServerOptimizer",
]

Delta = Mapping[str, torch.Tensor]


def global_norm(delta: Delta) -> float:
    """L2 norm of all tensors concatenated (float64 accumulation).

    Args:
        delta: parameter name -> tensor.

    Returns:
        The L2 norm (0 for an empty mapping).
    """
    if not delta:
        return 0.0
    return float(torch.sqrt(sum((v.detach().double() ** 2).sum() for v in delta.values())))


def clip_delta(delta: Delta, clip_norm: float) -> tuple[dict[str, torch.Tensor], float]:
    """Scale ``delta`` to L2 norm <= ``clip_norm``: ``delta * min(1, S / ||delta||)``; returns (clipped, norm).

    Non-finite updates (NaN / inf) are refused: a client must not be able to poison the average.

    Args:
        delta: parameter name -> update tensor.
        clip_norm: S, the L2 bound; > 0.

    Returns:
        ``(clipped delta, norm before clipping)``.

    Raises:
        ProtocolError: the update's norm is NaN or infinite.
    """
    norm = global_norm(delta)
    if not math.isfinite(norm):
        raise ProtocolError(
            "a client update has a non-finite norm (NaN/inf); refusing to aggregate"
        )
    factor = min(1.0, clip_norm / norm) if norm > 0 else 1.0
    return {k: v * factor for k, v in delta.items()}, norm


def _check_same_keys(deltas: Sequence[Delta], reference: Mapping[str, torch.Tensor]) -> None:
    for i, d in enumerate(deltas):
        if set(d) != set(reference):
            raise ProtocolError(
                f"reply {i} has parameters {sorted(set(d) ^ set(reference))[:5]} that do not match "
                "the global model; refusing to aggregate"
            )
        for k, v in d.items():
            if tuple(v.shape) != tuple(reference[k].shape):
                raise ProtocolError(
                    f"reply {i}: parameter {k!r} has shape {tuple(v.shape)}, expected "
                    f"{tuple(reference[k].shape)}"
                )


@dataclass(frozen=True)
class AggregateInfo:
    """What the aggregation did (norms before clipping, how many were clipped, the noise std).

    Attributes:
        num_replies: the number of updates aggregated.
        denominator: what the sum was divided by (m for DP-FedAvg; the number of replies otherwise).
        update_norms: the L2 norm of each update before clipping.
        clipped: how many updates were clipped.
        noise_std: the std of the Gaussian noise added to each coordinate of the average (0 without noise).
    """

    num_replies: int
    denominator: float
    update_norms: tuple[float, ...]
    clipped: int
    noise_std: float


def weighted_average(
    deltas: Sequence[Delta], weights: Sequence[float], reference: Mapping[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], AggregateInfo]:
    """Non-private FedAvg: ``sum_k n_k Delta_k / sum_k n_k``.

    Args:
        deltas: the clients' updates (parameter name -> tensor).
        weights: n_k, each client's number of examples (>= 0, positive total).
        reference: the global model's parameters (names and shapes the updates must match).

    Returns:
        ``(average, AggregateInfo)``.

    Raises:
        ProtocolError: no replies, mismatched parameter names or shapes, or bad weights.
    """
    if not deltas:
        raise ProtocolError("no client replied; nothing to aggregate")
    _check_same_keys(deltas, reference)
    w = torch.as_tensor([float(x) for x in weights], dtype=torch.float64)
    if bool((w < 0).any()) or float(w.sum()) <= 0:
        raise ProtocolError(f"num-examples must be >= 0 with a positive total; got {w.tolist()}")
    w = w / w.sum()
    out = {k: sum(float(w[i]) * d[k] for i, d in enumerate(deltas)) for k in reference}
    return out, AggregateInfo(
        len(deltas), float(len(deltas)), tuple(global_norm(d) for d in deltas), 0, 0.0
    )


def dp_average(
    deltas: Sequence[Delta],
    reference: Mapping[str, torch.Tensor],
    *,
    clip_norm: float,
    noise_multiplier: float,
    denominator: float,
    generator: torch.Generator,
) -> tuple[dict[str, torch.Tensor], AggregateInfo]:
    """DP-FedAvg: clip every delta to S, sum, divide by the *fixed* denominator m (never the number of
    replies), add N(0, (z S / m)^2) once to every coordinate. ``noise_multiplier=0`` is "clip only".

    Args:
        deltas: the replies' updates (parameter name -> tensor).
        reference: the global model's parameters (names and shapes the updates must match).
        clip_norm: S, the per-user L2 bound; > 0.
        noise_multiplier: z, noise std relative to S (>= 0).
        denominator: m, the planned number of users per round; > 0.
        generator: the torch generator the noise is drawn from (a secure one unless simulating).

    Returns:
        ``(noisy average, AggregateInfo)``.

    Raises:
        InvalidArgument: ``denominator`` <= 0.
        ProtocolError: mismatched parameter names / shapes, or a non-finite update.
    """
    if denominator <= 0:
        raise InvalidArgument(f"denominator must be > 0; got {denominator}")
    _check_same_keys(deltas, reference)
    clipped, norms = [], []
    for d in deltas:
        c, n = clip_delta(d, clip_norm)
        clipped.append(c)
        norms.append(n)
    std = float(noise_multiplier) * float(clip_norm) / float(denominator)
    out = {}
    for k, ref in reference.items():
        s = torch.zeros_like(ref, dtype=torch.float32)
        for c in clipped:
            s = s + c[k].float()
        s = s / float(denominator)
        if std > 0:
            s = s + std * torch.randn(s.shape, generator=generator, dtype=torch.float32)
        out[k] = s.to(ref.dtype)
    n_clipped = sum(1 for n in norms if n > clip_norm)
    return out, AggregateInfo(len(deltas), float(denominator), tuple(norms), n_clipped, std)


class ServerOptimizer:
    """``theta <- theta + lr * v`` with ``v <- momentum * v + Delta`` (server momentum, post-processing)."""

    def __init__(self, lr: float = 1.0, momentum: float = 0.0) -> None:
        self.lr = lr
        self.momentum = momentum
        self.velocity: dict[str, torch.Tensor] | None = None

    def step(
        self, params: Mapping[str, torch.Tensor], update: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        if self.momentum > 0:
            if self.velocity is None:
                self.velocity = {k: torch.zeros_like(v) for k, v in update.items()}
            self.velocity = {k: self.momentum * self.velocity[k] + update[k] for k in update}
            update = self.velocity
        return {k: params[k] + self.lr * update[k] for k in params}

    def state_dict(self) -> dict[str, Any]:
        return {"velocity": self.velocity}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.velocity = state.get("velocity")
