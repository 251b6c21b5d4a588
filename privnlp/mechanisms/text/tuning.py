"""Empirical privacy-utility tradeoff and parameter selection (Algorithm 2, Section 3.2, Figure 2).

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt``. Algorithm 2 doubles epsilon from
``epsilon0`` (at t = 0, the Laplace mechanism) until the expected utility loss ``L_M < C``, then
scans ``t in {0.05, ..., 1}`` at that epsilon and keeps the t with the highest expected inference
error ``E_M`` among those with ``L_M <= C``. (The paper's listing puts the ``E_max`` update inside
the while loop; the text says it is done once the epsilon is found, which is what we do.)
Theorem 1 makes every selected (eps, t) eps-metric-DP, so tuning on public data is free; tuning
on the private data itself is not covered by the claim (use the public vocabulary / a public prior).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privnlp.attacks.text.bayesian import (
    empirical_point,
    estimate_channel,
    estimate_channels_vickrey,
)
from privnlp.core.errors import InvalidArgument, check_positive, check_range
from privnlp.core.rng import as_numpy, spawn

from .embeddings import Embeddings
from .mechanisms import LaplaceMetric, Mahalanobis, Vickrey

__all__ = ["TuneResult", "select_parameters", "tradeoff_points", "plot_tradeoff", "DEFAULT_TS"]

DEFAULT_TS = tuple(round(0.05 * i, 2) for i in range(1, 21))


@dataclass(frozen=True)
class TuneResult:
    """The (epsilon, t) chosen by Algorithm 2 and every point evaluated on the way."""

    epsilon: float
    t: float
    inference_error: float
    utility_loss: float
    max_loss: float
    points: tuple[Any, ...]


def _prep(
    embeddings: Embeddings, support: Sequence[int] | None, prior: Any
) -> tuple[np.ndarray, np.ndarray | None]:
    sup = np.arange(len(embeddings)) if support is None else np.asarray(support, dtype=np.int64)
    if prior is not None:
        prior = np.asarray(prior, dtype=np.float64)
        if prior.shape != sup.shape:
            raise InvalidArgument(
                f"prior must have one weight per support word ({sup.size}); got {prior.shape}"
            )
    return sup, prior


def select_parameters(
    embeddings: Embeddings,
    *,
    loss: Any,
    max_loss: float,
    prior: Any = None,
    support: Sequence[int] | None = None,
    epsilon0: float = 1.0,
    ts: Sequence[float] = DEFAULT_TS,
    n_samples: int = 200,
    max_doublings: int = 24,
    rng: Any,
) -> TuneResult:
    """Algorithm 2: the Vickrey (epsilon, t) with the highest ``E_M`` subject to ``L_M <= max_loss``.

    ``loss``: ``d_L`` as a callable over vocabulary ids or a ``(V, V)`` matrix (see
    :func:`privnlp.attacks.text.bayesian.expected_utility_loss`).
    """

    check_positive("max_loss", max_loss)
    check_positive("epsilon0", epsilon0)
    check_range("max_doublings", max_doublings, 0, 64, integer=True)
    for i, t in enumerate(ts):
        check_range(f"ts[{i}]", t, 0.0, 1.0)
    g = as_numpy(rng)
    sup, prior = _prep(embeddings, support, prior)
    eps = float(epsilon0)
    points = []
    for _ in range(int(max_doublings) + 1):
        ch = estimate_channels_vickrey(embeddings, eps, [0.0], sup, n_samples, rng=g)[0]
        pt = empirical_point(Vickrey(eps, t=0.0, embeddings=embeddings), ch, prior, loss)
        points.append(pt)
        if pt.utility_loss < max_loss:
            break
        eps *= 2.0
    else:
        raise InvalidArgument(
            f"max_loss={max_loss} not reached after {max_doublings} doublings of epsilon "
            f"(last epsilon {eps / 2:g}, loss {points[-1].utility_loss:.4g}); raise max_loss"
        )
    best = points[-1]
    ts = [float(t) for t in ts]
    chs = estimate_channels_vickrey(embeddings, eps, ts, sup, n_samples, rng=g)
    for t, ch in zip(ts, chs):
        pt = empirical_point(Vickrey(eps, t=t, embeddings=embeddings), ch, prior, loss)
        points.append(pt)
        if pt.utility_loss <= max_loss and pt.inference_error > best.inference_error:
            best = pt
    return TuneResult(
        epsilon=eps,
        t=float(best.t or 0.0),
        inference_error=best.inference_error,
        utility_loss=best.utility_loss,
        max_loss=float(max_loss),
        points=tuple(points),
    )


def tradeoff_points(
    embeddings: Embeddings,
    epsilons: Sequence[float],
    *,
    loss: Any,
    prior: Any = None,
    support: Sequence[int] | None = None,
    ts: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    mahalanobis_lam: float | None = 0.2,
    n_samples: int = 200,
    rng: Any,
) -> list[Any]:
    """Points (E_M, L_M) for Vickrey at every t (t = 0 is Laplace) and Mahalanobis, per epsilon."""

    sup, prior = _prep(embeddings, support, prior)
    gens = spawn(rng, len(epsilons))
    out = []
    for eps, g in zip(epsilons, gens):
        check_positive("epsilon", eps)
        chs = estimate_channels_vickrey(embeddings, float(eps), ts, sup, n_samples, rng=g)
        for t, ch in zip(ts, chs):
            m = (
                LaplaceMetric(float(eps), embeddings=embeddings)
                if t == 0
                else Vickrey(float(eps), t=float(t), embeddings=embeddings)
            )
            out.append(empirical_point(m, ch, prior, loss))
        if mahalanobis_lam is not None:
            m = Mahalanobis(float(eps), lam=mahalanobis_lam, embeddings=embeddings)
            out.append(empirical_point(m, estimate_channel(m, sup, n_samples, rng=g), prior, loss))
    return out


def _label(p: Any) -> str:
    if p.mechanism == "vickrey":
        return f"vickrey t={p.t:g}"
    return p.mechanism


def plot_tradeoff(points: Sequence[Any], path: str, *, title: str = "") -> str:
    """Figure 2 style: inference error vs epsilon and vs utility loss, one curve per mechanism/t.
    Written atomically (temp file + rename)."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[str, list[Any]] = {}
    for p in points:
        curves.setdefault(_label(p), []).append(p)
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for lab, ps in curves.items():
        ps = sorted(ps, key=lambda p: p.epsilon)
        ax[0].plot([p.epsilon for p in ps], [p.inference_error for p in ps], marker="o", label=lab)
        ax[1].plot(
            [p.utility_loss for p in ps], [p.inference_error for p in ps], marker="o", label=lab
        )
    ax[0].set_xscale("log")
    ax[0].set_xlabel("epsilon")
    ax[1].set_xlabel("expected utility loss L_M")
    for a in ax:
        a.set_ylabel("inference error E_M")
        a.grid(alpha=0.3)
    ax[1].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    suffix = os.path.splitext(path)[1] or ".png"
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".plot.", suffix=suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        plt.close(fig)
    return path
