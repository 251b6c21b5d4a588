"""Leaky twins of ``laplace_metric``, ``mahalanobis`` and ``vickrey_k`` (see privnlp/mechanisms/testing.py).

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` — Xu, Aggarwal, Feyisetan, Teissier,
"On a Utilitarian Approach to Privacy Preserving Text Generation" (Algorithms 1 and 3, Theorems
1 and 2), and its baselines (multivariate Laplace, Feyisetan et al. 2020; regularized Mahalanobis,
Xu et al. 2020).

Each twin subclasses the real mechanism, keeps its constructor and its claim (``claim()`` is
inherited unchanged) and contains one realistic implementation bug that breaks the metric-DP
guarantee. They are caught by

* the Bayesian adversary of ``bayesian_inversion`` (``privnlp evaluate --defense NAME``): its
  headline ``inference_accuracy`` is several times the real mechanism's, and
* the empirical metric-DP audit :func:`privnlp.attacks.text.bayesian.metric_dp_audit`
  (``tests/text/test_twins.py``).

Only *input-dependent* bugs can break metric DP here: anything the mechanism computes from the
noisy vector alone (a wrong selection-probability vector among the noisy vector's neighbours, an
approximate index) is post-processing and keeps the guarantee. So the twins below shrink or
mis-shape the noise, or let the candidate set depend on the input word.

The vickrey_k twin overrides the private ``_neighbors(noisy, ids)`` hook (the one the existing
``LeakyVickreyExcludesInput`` and the Bayesian channel estimator use); everything else overrides a
public method (``sample_noise``, ``sigma_sqrt``, ``perturb_vectors``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument
from privnlp.core.registry import LEAKY_TWINS
from privnlp.core.rng import as_numpy

from .mechanisms import LaplaceMetric, Mahalanobis, VickreyK
from .neighbors import NeighborResult

__all__ = [
    "LeakyLaplacePerCoordinate",
    "LeakyMahalanobisNoIdentity",
    "LeakyVickreyKPrecomputedNeighbors",
]


@LEAKY_TWINS.register("laplace_metric")
class LeakyLaplacePerCoordinate(LaplaceMetric):
    """LEAKY TWIN of ``laplace_metric``. Bug: "multivariate Laplace" implemented as i.i.d. 1-D
    Laplace noise per coordinate, ``rng.laplace(0, 1/eps, size=(n, d))``.

    That density is ``∝ exp(-eps ||z||_1)``: eps-metric-DP for the L1 distance, which only gives
    ``eps * sqrt(d)`` for the claimed Euclidean distance; and the noise norm is about
    ``sqrt(2 d) / eps`` instead of ``d / eps`` (Gamma(d, 1/eps) radius), i.e. ~5x too little noise
    for the bundled 50-d embeddings, under the same ``eps * d_euclidean`` claim.

    Caught by: the radius KS test against Gamma(d, 1/eps); the metric-DP audit on word pairs that
    differ along a diagonal (where ``||.||_1 = sqrt(d) ||.||_2``); the Bayesian adversary
    (quick preset: inference accuracy ~0.97 against ~0.04 for the real mechanism).
    """

    def sample_noise(self, n: int, *, rng: Any, dtype: Any = np.float32) -> np.ndarray:
        d = self.resolve_embeddings().dim
        return (
            as_numpy(rng)
            .laplace(0.0, 1.0 / float(self.epsilon), size=(n, d))
            .astype(dtype, copy=False)
        )


@LEAKY_TWINS.register("mahalanobis")
class LeakyMahalanobisNoIdentity(Mahalanobis):
    """LEAKY TWIN of ``mahalanobis``. Bug: the regularisation is written ``Sigma_l = lam * Sigma``,
    forgetting the ``+ (1 - lam) * I`` term, so the noise is shaped by ``(lam Sigma)^{1/2}``.

    Word embeddings have a few high-variance directions and many almost flat ones; without the
    identity term the noise nearly vanishes in the flat directions (and is ``sqrt(lam)`` times too
    small everywhere), while the claim still uses the regularized metric
    ``||Sigma_l^{-1/2}(x - y)||`` (``metric()`` is inherited unchanged). Words that differ in the
    low-variance directions stay distinguishable.

    Caught by: the metric-DP audit in the regularized Mahalanobis metric; the noise-radius KS test
    in that metric (radius should be Gamma(d, 1/eps)); the Bayesian adversary (quick preset:
    inference accuracy ~0.25 against ~0.05 for the real mechanism).
    """

    def sigma_sqrt(self) -> np.ndarray:
        """The (buggy) noise-shaping matrix ``(lam * Sigma)^{1/2}``. The correct
        ``Sigma_lambda^{1/2}`` is still computed (and cached on the embeddings) first, so the
        inherited :meth:`metric` — the claimed metric — is the real regularized one."""
        super().sigma_sqrt()
        root = self.__dict__.get("_leaky_root")
        if root is None:
            X = self.resolve_embeddings().vectors.astype(np.float64)
            d = X.shape[1]
            S = np.atleast_2d(np.cov(X, rowvar=False)) if X.shape[0] > 1 else np.eye(d)
            tr = np.trace(S)
            S = S * (d / tr) if tr > 0 else np.eye(d)
            S = float(self.lam) * S  # BUG: "+ (1 - lam) * I" forgotten
            w, V = np.linalg.eigh(S)
            root = ((V * np.sqrt(np.clip(w, 0.0, None))) @ V.T).astype(np.float32)
            self.__dict__["_leaky_root"] = root
        return root


@LEAKY_TWINS.register("vickrey_k")
class LeakyVickreyKPrecomputedNeighbors(VickreyK):
    """LEAKY TWIN of ``vickrey_k``. Bug: a "speed-up" that precomputes, once per vocabulary, the
    k nearest neighbours of every word and uses the table row of the *input* word as the
    candidates (Algorithm 3 step 5 requires the k nearest neighbours of the *noisy* vector); only
    the selection weights ``exp(-t_r ||phi(w_r) - phi_hat||)`` use the noisy vector.

    The output is then always one of the k nearest neighbours of the input word (the word itself
    included): ``P[M(w) = o] = 0`` for every ``o`` outside that table row while ``P[M(w') = o] > 0``
    — an infinite privacy-loss ratio, not post-processing of the noisy vector.

    Caught by: the metric-DP audit (outputs of ``w'`` that ``w`` can never produce); the Bayesian
    adversary (quick preset: inference accuracy ~0.34 against ~0.03 for the real mechanism).
    """

    def neighbor_table(self) -> np.ndarray:
        """``(V, k)`` ids of the k nearest vocabulary words of every vocabulary word (cached)."""
        tab = self.__dict__.get("_leaky_table")
        if tab is None:
            emb = self.resolve_embeddings()
            if self.k > len(emb):
                raise InvalidArgument(f"k = len(ts) must be <= the vocabulary size; got {self.k}")
            tab = self._nn().query(emb.vectors, self.k).ids
            self.__dict__["_leaky_table"] = tab
        return tab

    def _neighbors(self, noisy: np.ndarray, ids: np.ndarray) -> NeighborResult:
        emb = self.resolve_embeddings()
        cand = self.neighbor_table()[np.asarray(ids, dtype=np.int64)]  # BUG: neighbours of phi(w)
        diff = (
            emb.vectors[cand].astype(np.float64) - np.asarray(noisy, dtype=np.float64)[:, None, :]
        )
        return NeighborResult(cand, np.sqrt(np.einsum("bkd,bkd->bk", diff, diff)))

    def perturb_vectors(self, vectors: np.ndarray, *, rng: Any) -> np.ndarray:
        """Arbitrary points are snapped to their nearest vocabulary word, then use its table row."""
        emb = self.resolve_embeddings()
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim != 2 or v.shape[1] != emb.dim:
            raise InvalidArgument(
                f"vectors must have shape (n, {emb.dim}); got {v.shape} (mismatched dims)"
            )
        g = as_numpy(rng)
        ids = self._nn().query(v, 1).ids[:, 0]
        return self._choose(self._neighbors(v + self.sample_noise(v.shape[0], rng=g), ids), g)
