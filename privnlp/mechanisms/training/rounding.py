"""Per-sample gradient norms that stay upper bounds in floating point (issue #29's clipping review).

Ghost and book-keeping clipping compute a per-sample norm by one formula (the Gram form ``<a a^T, g g^T>``, or the
per-sample gradient instantiated by one GEMM) and the clipped sum by another (a second backward pass, or one GEMM
over the whole batch). In exact arithmetic both see the same gradient; in floating point a norm formula can cancel.
A crafted pattern of large opposite per-token gradients gave a computed ghost norm of 0.0 where the true norm is 7.0:
that example's clip factor was 1 and its whole gradient entered the sum (a review, 2026-11-27).

Each function here returns the computed squared norm **plus a rounding margin** that scales with the size of the
terms that can cancel, not with the result, so a cancelling example gets a larger norm (it is clipped harder) and an
ordinary one is unchanged to a few parts in 10^5:

* the Gram form: the fp32 entries of ``g g^T`` and ``a a^T`` are dot products of length ``p`` and ``d``, their
  products are summed over ``T^2`` pairs: the margin is ``LAMBDA u_32 (sqrt(p) + sqrt(d) + sqrt(log2 T^2) + 1) sum_t
  |g_t|^2 |a_t|^2`` (with independent errors the ``T^2`` entries' errors add in quadrature, and ``sqrt(sum_{t,s}
  (|g_t| |g_s| |a_t| |a_s|)^2) = sum_t |g_t|^2 |a_t|^2``);
* an instantiated per-sample gradient (a GEMM over ``T`` tokens): the norm plus ``LAMBDA u_32 sqrt(T) sqrt(sum_t |g_t|^2
  |a_t|^2)`` (the Frobenius size of that GEMM's rounding error);
* a bias ``sum_t g_t``: the norm plus ``LAMBDA u_32 sqrt(T) sqrt(sum_t |g_t|^2)``.

The fp32 margins use the probabilistic rounding model of Higham and Mary (2019, "A new approach to probabilistic
rounding error analysis"): a dot product of length ``n`` errs by at most ``lambda sqrt(n) u`` of its terms' size with
probability at least ``1 - 2 exp(-lambda^2 (1 - u)^2 / 2)`` -- for ``LAMBDA = 16``, 1 - 1e-55 -- with rounding errors
treated as independent. The deterministic worst case (``n u``, no independence) would inflate ordinary norms by
10-100 % at BERT size; no norm formula short of exact arithmetic avoids some such model.

``T`` in the margins is each example's own count of tokens with a nonzero output gradient, not the batch's padded
width: a padding position's output gradient is exactly zero, its products are exact zeros and adding an exact zero
rounds nothing, so the bound stays valid -- and an example's margin, hence its clip factor, does not depend on how
long the texts that share its physical batch are (with the padded width, adding one long text to a batch raised
every other example's margin: a cross-example dependence the sensitivity argument of DP-SGD does not allow for)."""

from __future__ import annotations

import math

import torch

__all__ = [
    "LAMBDA",
    "U32",
    "gradient_tokens",
    "ghost_sq_norms",
    "instantiated_sq_norms",
    "sum_sq_norms",
]

#: unit roundoff of fp32
U32 = 2.0**-24
#: the probabilistic bound's multiplier (see the module docstring)
LAMBDA = 16.0
#: the final cast of a bound to fp32 may round it down by one unit in the last place
_UP32 = 1.0 + 2.0**-22


def _token_sq(x: torch.Tensor) -> torch.Tensor:
    """Squared norm of each token's vector (``n x T x w`` -> ``n x T``, fp64; accumulated in fp32 without an fp32
    copy of ``x``: a sum of squares does not cancel)."""
    return torch.linalg.vector_norm(x, dim=-1, dtype=torch.float32).double().pow(2)


def gradient_tokens(token_sq: torch.Tensor) -> torch.Tensor:
    """Per example, the number of tokens whose output gradient is nonzero (``n x T`` squared norms -> ``n``, fp64,
    at least 1): the length that rounding errors can accrue over (padding contributes exact zeros)."""
    return (token_sq > 0).sum(1).clamp(min=1).double()


def _sq_sum_norm(x: torch.Tensor) -> torch.Tensor:
    """Row norms of ``x`` (``n x m``) in fp32 (no fp64 copy of a per-sample gradient), raised by the bound of a
    pairwise sum of ``m`` non-negative terms (``ceil(log2 m) + 2`` units: a sum of squares does not cancel)."""
    m = max(x.shape[1], 2)
    norm = torch.linalg.vector_norm(x, dim=1, dtype=torch.float32).double()
    return norm * (1 + (math.ceil(math.log2(m)) + 2) * U32)


def ghost_sq_norms(gg: torch.Tensor, aa: torch.Tensor, d: int, p: int) -> torch.Tensor:
    """Upper bound of ``||sum_t g_t a_t^T||^2`` per example from the fp32 Gram matrices ``gg = g g^T`` and ``aa = a
    a^T`` (``n x T x T``) of output gradients of width ``p`` and inputs of width ``d``: the fp32 sum of ``gg * aa``
    plus the rounding margin of the module docstring (fp32, shape ``n``)."""
    sq = (gg * aa).sum((1, 2)).double().clamp(min=0)
    g_sq = torch.diagonal(gg, dim1=1, dim2=2).double().clamp(min=0)
    tok = (g_sq * torch.diagonal(aa, dim1=1, dim2=2).double().clamp(min=0)).sum(1)
    # sum_t |g_t|^2 |a_t|^2 above; T^2 pairs below, T the example's own nonzero-gradient tokens (at least 2 pairs)
    log_t2 = torch.log2((gradient_tokens(g_sq) ** 2).clamp(min=2))
    margin = LAMBDA * U32 * (math.sqrt(p) + math.sqrt(d) + log_t2.sqrt() + 1) * tok
    return ((sq + margin) * _UP32).float()


def instantiated_sq_norms(gs: torch.Tensor, g: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Upper bound of the squared per-sample gradient norm from the instantiated fp32 ``gs = g^T a`` (``n x p x d``,
    one GEMM over the ``T`` tokens of ``g``: ``n x T x p`` and ``a``: ``n x T x d``), fp32, shape ``n``."""
    norm = _sq_sum_norm(gs.flatten(1))
    g_sq = _token_sq(g)
    tok = g_sq * _token_sq(a)  # n x T: |g_t|^2 |a_t|^2
    err = LAMBDA * U32 * gradient_tokens(g_sq).sqrt() * tok.sum(1).sqrt()
    return ((norm + err) ** 2 * _UP32).float()


def sum_sq_norms(b: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Upper bound of ``||sum_t g_t||^2`` per example from the computed fp32 sum ``b`` (``n x p``) of ``g`` (``n x T x
    p``), fp32, shape ``n``."""
    norm = _sq_sum_norm(b)
    g_sq = _token_sq(g)
    err = LAMBDA * U32 * gradient_tokens(g_sq).sqrt() * g_sq.sum(1).sqrt()
    return ((norm + err) ** 2 * _UP32).float()
