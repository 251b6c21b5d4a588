"""Large-batch DP-SGD helpers: the DP-BERT sharded-noise relation.

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (Sec. on TPU training, Eq. (3)): with a batch
of B examples split over P shards, each shard clipping, summing, adding N(0, sigma^2 C^2) and
averaging over B/P, the cross-shard mean equals ``(1/B)(sum_i g_i + N(0, P sigma^2 C^2))``, i.e. one
unsharded step with noise multiplier ``sigma * sqrt(P)``; the accountant must be given sigma*sqrt(P).

Large *logical* batches on one device use opacus' ``BatchMemoryManager`` (see
:func:`privnlp.mechanisms.training.loop.train_private` with ``max_physical_batch_size``): physical
batches are accumulated and only the last one of a logical batch adds noise and makes one
accounting event.
"""

from __future__ import annotations

from typing import Any

import torch

from privnlp.accounting import effective_noise_multiplier
from privnlp.core.errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    check_positive,
    check_range,
)
from privnlp.core.rng import as_torch, check_noise_seed_allowed, secure_torch

__all__ = ["effective_noise_multiplier", "clip_per_example", "sharded_dp_mean"]


def clip_per_example(per_example: torch.Tensor, max_grad_norm: float) -> torch.Tensor:
    """Scale each row of ``per_example`` ([B, D]) to L2 norm <= ``max_grad_norm``."""
    check_positive("max_grad_norm", max_grad_norm, error=InvalidPrivacyParameter)
    norms = per_example.norm(dim=1, keepdim=True)
    return per_example * (max_grad_norm / (norms + 1e-12)).clamp(max=1.0)


def sharded_dp_mean(
    per_example: torch.Tensor,
    *,
    num_shards: int,
    noise_multiplier: float,
    max_grad_norm: float,
    rng: Any = None,
) -> torch.Tensor:
    """Simulate TF-Privacy + CrossShardOptimizer: P shards of B/P examples each clip, sum, add
    N(0, sigma^2 C^2), divide by B/P; the shard results are averaged. Returns the [D] update.

    Paper: ``dp-bert-and-dp-wordpiece.txt`` Eq. (3) (see :func:`~privnlp.accounting.effective_noise_multiplier`).

    Args:
        per_example: ``[B, D]`` per-example gradients.
        num_shards: P, an integer in [1, B] that divides B.
        noise_multiplier: sigma per shard, relative to ``max_grad_norm``; >= 0.
        max_grad_norm: C, the per-example L2 clip norm; > 0.
        rng: the noise source (``None`` = OS entropy; a seed only for a simulation).

    Raises:
        InvalidArgument: ``per_example`` not 2-D, ``num_shards`` out of range or not a divisor of B, or a
            seeded ``rng`` while seeded noise is refused.
        InvalidPrivacyParameter: ``noise_multiplier`` or ``max_grad_norm`` out of range.
    """
    if per_example.dim() != 2:
        raise InvalidArgument(f"per_example must have shape [B, D]; got {tuple(per_example.shape)}")
    b = per_example.shape[0]
    check_range("num_shards", num_shards, 1, b, integer=True)
    if b % num_shards:
        raise InvalidArgument(f"num_shards must divide the batch size {b}; got {num_shards}")
    check_range(
        "noise_multiplier", noise_multiplier, 0.0, float("inf"), error=InvalidPrivacyParameter
    )
    check_noise_seed_allowed(rng)
    g = (
        secure_torch() if rng is None else as_torch(rng)
    )  # rng=None: OS entropy (privacy-noise rule)
    clipped = clip_per_example(per_example, max_grad_norm)
    per_shard = b // num_shards
    shards = []
    for j in range(num_shards):
        s = clipped[j * per_shard : (j + 1) * per_shard].sum(0)
        noise = torch.randn(s.shape, generator=g, dtype=s.dtype) * noise_multiplier * max_grad_norm
        shards.append((s + noise) / per_shard)
    return torch.stack(shards).mean(0)
