"""From the outcome of a distinguishing game to a lower bound on epsilon.

Three analyses, all written by hand on ``scipy.stats`` (no maintained library ships them in a form that
takes raw counts; Google's ``dp_auditorium`` / ``jax_privacy.auditing`` need JAX / TF):

1. **Repeated runs, Clopper-Pearson** (Jagielski, Ullman & Oprea 2020, "Auditing differentially private
   machine learning: how private is private SGD?"). Over ``n0`` runs on ``D`` and ``n1`` runs on ``D'``
   a test says "D'" (positive) or "D" (negative): FP/TN on the ``D`` runs, TP/FN on the ``D'`` runs. An
   ``(eps, delta)``-DP mechanism has ``1 - FNR <= e^eps FPR + delta`` and ``1 - FPR <= e^eps FNR + delta``.
   With one-sided Clopper-Pearson upper bounds ``FPR_hi``, ``FNR_hi`` (each at level ``(1-confidence)/2``,
   so both hold at once with probability >= ``confidence``)::

       eps >= max( log((1 - delta - FNR_hi) / FPR_hi),  log((1 - delta - FPR_hi) / FNR_hi),  0 ).

   Assumption-free: valid for any mechanism. :func:`epsilon_lower_bound`.

2. **Repeated runs against the Gaussian trade-off curve** (the hypothesis-testing view of DP, Dong, Roth &
   Su 2019; used for tight audits of DP-SGD by Nasr et al. 2023). A mu-GDP mechanism has
   ``FNR >= Phi(Phi^-1(1 - FPR) - mu)`` for every test, so with the same Clopper-Pearson bounds::

       mu >= Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi).

   This statement about mu is assumption-free ("the mechanism is not mu-GDP for any smaller mu"). Its
   conversion to epsilon at delta (``eps(mu, delta)`` of the Gaussian mechanism, Balle & Wang 2018) is a
   lower bound on epsilon *if the mechanism's privacy curve is Gaussian-shaped* -- true for one step of
   DP-SGD or one round of DP-FedAvg without subsampling, which is what the white-box audits run.
   :func:`epsilon_lower_bound_gdp`.

3. **One run** with ``m`` canaries, each included independently with probability 1/2; the auditor guesses
   "in"/"out" for ``r`` of them (abstains on the rest) and ``v`` guesses are correct.

   * Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training run" (Theorem 3 / Algorithm 2
     of the arXiv version, as implemented here): if the mechanism is ``(eps, delta)``-DP then::

         P[W >= v] <= f(v) + 2 m delta * max_{i=1..v} (f(v - i) - f(v)) / i,
         f(u) = P[Binomial(r, e^eps / (1 + e^eps)) >= u],

     and the bound is the largest ``eps`` for which this p-value is <= ``1 - confidence``.
     :func:`one_run_p_value`, :func:`one_run_epsilon_lower_bound`.
   * Mahloujifar, Melis & Chaudhuri 2025 (ICML), "Auditing f-differential privacy in one run": the same game
     analysed against the mechanism's whole trade-off curve ``f`` instead of one ``(eps, delta)`` point. We
     implement their recursion for a guess alphabet of size k = 2 with the Gaussian curve ``f_mu``
     (blow-up ``B(x) = Phi(Phi^-1(x) + mu)``): with ``tau = 1 - confidence``, ``t = tau r / m``,
     ``h_v = t (r - v) / r``, ``r_v = t v / r`` and, for ``i = v-1 .. 0``::

         h_i = max(h_{i+1}, B^-1(r_{i+1})),     r_i = r_{i+1} + i / (r - i) * (h_i - h_{i+1}),

     the outcome is consistent with mu-GDP iff ``r_0 + h_0 <= r / m``; the bound is the infimum of the
     consistent mu (found by bisection, assuming the rejected set is an interval ``[0, mu*)``), converted
     to epsilon at delta as in 2. :func:`fdp_one_run_mu_lower_bound`.

Which bound is the headline (:func:`headline_bound`). The conversions of 2. and of the f-DP one-run
bound to epsilon assume a Gaussian-shaped mechanism: on randomized response the one-run f-DP bound
converted to epsilon exceeded the true epsilon in 20 of 20 seeds (issue 28). They are therefore
headlined only where the audited mechanism is Gaussian-shaped (one unsubsampled Gaussian step: the
white-box DP-SGD step at q = 1, one DP-FedAvg round of M of M users); everywhere else (subsampled
DP-SGD, randomized response, ...) the assumption-free bound (Clopper-Pearson / Steinke et al.) is the
headline and the Gaussian conversion is a side figure.

Edges that could overstate, closed here: the one-run guesses break ties in score at random (a stable
sort would let the caller's array order decide: tied scores listed included-first audited a mechanism
that leaks nothing at epsilon ~ 9.5 for m = 1000); NaN scores, ``delta = 0`` for a GDP conversion (mu-GDP
has no finite epsilon at delta = 0: the float underflow used to give ~34.6) and ``confidence`` outside
(0, 1) are rejected with an error naming the argument.

The Steinke et al. delta term uses the factor ``2 m`` (Theorem 3 / Algorithm 2; the appendix reference
code and ``jax_privacy``'s auditing module use ``2 m`` too, which issue 28's review checked). The f-DP recursion is written from our understanding
of Mahloujifar et al.'s Algorithm for the "guessing with abstention" game and cross-checked against an
independent public re-implementation (Meta's ``privacy_guard`` ``FDPAnalysisNode``); its validity on
the Gaussian mechanism is checked by simulation in ``tests/auditing/test_bounds.py`` (the bound stays
below the true mu and above the Steinke et al. bound). All bounds are *lower* bounds: a small audited
epsilon is never evidence that a mechanism is private.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri
from scipy.stats import beta, binom, norm

from privnlp.accounting.events import gaussian_epsilon
from privnlp.core.errors import InvalidArgument, check_range
from privnlp.core.rng import as_numpy

from .result import DEFAULT_CONFIDENCE, EpsilonBound

__all__ = [
    "EpsilonBound",
    "cp_upper",
    "cp_lower",
    "clopper_pearson",
    "epsilon_lower_bound",
    "gdp_mu_lower_bound",
    "gdp_epsilon",
    "gdp_delta",
    "epsilon_lower_bound_gdp",
    "one_run_p_value",
    "one_run_epsilon_lower_bound",
    "fdp_one_run_consistent",
    "fdp_one_run_mu_lower_bound",
    "one_run_epsilon_lower_bound_gdp",
    "threshold_audit",
    "one_run_audit",
    "headline_bound",
    "GAUSSIAN_CONVERSIONS",
    "DEFAULT_CONFIDENCE",
]

#: the methods whose epsilon is a conversion that assumes a Gaussian-shaped mechanism, and the
#: assumption-free method headlined instead where the mechanism is not Gaussian-shaped
GAUSSIAN_CONVERSIONS = {
    "gdp_clopper_pearson": "clopper_pearson",
    "fdp_gaussian_one_run": "steinke_one_run",
}


# ----------------------------------------------------------------------------- Clopper-Pearson
def _check_counts(k: int, n: int) -> None:
    if not (0 <= k <= n):
        raise InvalidArgument(f"counts must satisfy 0 <= k <= n; got k={k}, n={n}")


def cp_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound: ``P[p <= cp_upper] >= 1 - alpha``."""
    _check_counts(k, n)
    if n == 0 or k >= n:
        return 1.0
    return float(beta.ppf(1.0 - alpha, k + 1, n - k))


def cp_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound: ``P[p >= cp_lower] >= 1 - alpha``."""
    _check_counts(k, n)
    if k <= 0:
        return 0.0
    return float(beta.ppf(alpha, k, n - k + 1))


def clopper_pearson(k: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval (``(1-confidence)/2`` in each tail).

    Args:
        k: the number of successes, in [0, n].
        n: the number of trials, >= 0.
        confidence: two-sided confidence level, in (0, 1).

    Returns:
        ``(lower, upper)`` bounds on the success probability.

    Raises:
        InvalidArgument: not ``0 <= k <= n``.
    """
    a = (1.0 - confidence) / 2.0
    return cp_lower(k, n, a), cp_upper(k, n, a)


def _check_conf(confidence: float, delta: float, *, gdp: bool = False) -> None:
    check_range("confidence", confidence, 0.0, 1.0, lo_inclusive=False, hi_inclusive=False)
    if gdp:
        _check_gdp_delta(delta)
    else:
        check_range("delta", delta, 0.0, 1.0, hi_inclusive=False)


def _check_gdp_delta(delta: float) -> None:
    if not (isinstance(delta, (int, float, np.floating)) and 0.0 < float(delta) < 1.0):
        raise InvalidArgument(
            f"delta must be in (0, 1) to convert a GDP parameter mu to epsilon (mu-GDP has no finite "
            f"epsilon at delta = 0); got {delta!r}"
        )


def _check_confidence(confidence: float) -> None:
    check_range("confidence", confidence, 0.0, 1.0, lo_inclusive=False, hi_inclusive=False)


def _eps_from_rates(fpr_hi: float, fnr_hi: float, delta: float) -> float:
    best = 0.0
    for a, b in ((fnr_hi, fpr_hi), (fpr_hi, fnr_hi)):
        num = 1.0 - delta - a
        if num <= 0:
            continue
        best = max(best, math.inf if b <= 0 else math.log(num / b))
    return best


def epsilon_lower_bound(
    tp: int,
    fp: int,
    tn: int,
    fn: int,
    *,
    delta: float = 0.0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> EpsilonBound:
    """Jagielski et al. 2020: ``eps >= log((1 - delta - FNR_hi) / FPR_hi)`` (and the symmetric form),
    with one-sided Clopper-Pearson bounds at ``(1 - confidence)/2`` each. ``tp, fn`` count the runs on the
    dataset with the canary (positives), ``fp, tn`` those without.

    Args:
        tp: runs on the dataset with the canary that the test called positive (>= 0).
        fp: runs without the canary called positive (>= 0).
        tn: runs without the canary called negative (>= 0).
        fn: runs with the canary called negative (>= 0).
        delta: the delta of the claim being audited, in [0, 1).
        confidence: the probability that the bound holds, in (0, 1).

    Returns:
        The bound (``method="clopper_pearson"``; the counts and rate bounds in ``details``); 0 when the
        test does no better than chance.

    Raises:
        InvalidArgument: ``delta`` or ``confidence`` out of range, or a negative count.
    """
    _check_conf(confidence, delta)
    a = (1.0 - confidence) / 2.0
    fpr_hi = cp_upper(fp, fp + tn, a)
    fnr_hi = cp_upper(fn, fn + tp, a)
    eps = _eps_from_rates(fpr_hi, fnr_hi, delta)
    return EpsilonBound(
        eps,
        "clopper_pearson",
        float(delta),
        float(confidence),
        tp + fp + tn + fn,
        details={"tp": tp, "fp": fp, "tn": tn, "fn": fn, "fpr_hi": fpr_hi, "fnr_hi": fnr_hi},
    )


# ----------------------------------------------------------------------------- Gaussian DP
def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(eps) of mu-GDP: ``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``."""
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    return float(
        norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon + norm.logcdf(-epsilon / mu - mu / 2))
    )


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon of mu-GDP at ``delta`` (the Gaussian mechanism with sensitivity/sigma = mu).

    Args:
        mu: the GDP parameter (sensitivity / sigma); <= 0 gives 0, ``inf`` gives ``inf``.
        delta: the target delta, in (0, 1).

    Returns:
        Epsilon at ``delta``.

    Raises:
        InvalidArgument: ``delta`` not in (0, 1) (no finite epsilon at delta = 0), ``mu`` NaN.
    """
    _check_gdp_delta(delta)
    if math.isnan(mu):
        raise InvalidArgument("mu must be a number; got nan")
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return math.inf

    return float(gaussian_epsilon(1.0 / mu, delta))


def gdp_mu_lower_bound(
    tp: int, fp: int, tn: int, fn: int, *, confidence: float = DEFAULT_CONFIDENCE
) -> float:
    """``mu >= Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi)`` (one-sided CP bounds at ``(1-confidence)/2`` each)."""
    _check_confidence(confidence)
    a = (1.0 - confidence) / 2.0
    fpr_hi = cp_upper(fp, fp + tn, a)
    fnr_hi = cp_upper(fn, fn + tp, a)
    return max(0.0, float(norm.isf(fpr_hi) - norm.ppf(fnr_hi)))


def epsilon_lower_bound_gdp(
    tp: int, fp: int, tn: int, fn: int, *, delta: float, confidence: float = DEFAULT_CONFIDENCE
) -> EpsilonBound:
    """:func:`gdp_mu_lower_bound`, converted to epsilon at ``delta`` (see the module docstring).

    Args:
        tp: runs with the canary called positive (>= 0).
        fp: runs without the canary called positive (>= 0).
        tn: runs without the canary called negative (>= 0).
        fn: runs with the canary called negative (>= 0).
        delta: the delta at which mu is converted to epsilon, in [0, 1).
        confidence: the probability that the bound holds, in (0, 1).

    Returns:
        The bound (``method="gdp_clopper_pearson"``, ``mu`` set); a lower bound on epsilon only for a
        mechanism with a Gaussian-shaped privacy curve.

    Raises:
        InvalidArgument: ``delta`` or ``confidence`` out of range, or a negative count.
    """
    _check_conf(confidence, delta, gdp=True)
    mu = gdp_mu_lower_bound(tp, fp, tn, fn, confidence=confidence)
    return EpsilonBound(
        gdp_epsilon(mu, delta),
        "gdp_clopper_pearson",
        float(delta),
        float(confidence),
        tp + fp + tn + fn,
        mu=mu,
        details={"tp": tp, "fp": fp, "tn": tn, "fn": fn},
    )


# ----------------------------------------------------------------------------- one run (Steinke et al.)
def _check_game(m: int, r: int, v: int) -> None:
    if not (0 <= v <= r <= m) or m < 1:
        raise InvalidArgument(
            f"one-run counts must satisfy 0 <= v (correct) <= r (guesses) <= m (canaries), m >= 1; "
            f"got m={m}, r={r}, v={v}"
        )


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """Steinke et al. 2023: an upper bound on ``P[>= v correct of r guesses]`` under ``(eps, delta)``-DP."""
    _check_game(m, r, v)
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-epsilon)) if epsilon < 700 else 1.0
    tail = float(binom.sf(v - 1, r, q))  # P[Binomial(r, q) >= v]
    if delta <= 0:
        return min(1.0, tail)
    pmf = binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[W = v-1], P[W = v-2], ..., P[W = 0]
    alpha = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1)))  # max_i P[v-i <= W < v] / i
    return min(1.0, tail + 2.0 * m * delta * alpha)


def _bisect_increasing(pred_rejects, hi0: float, hi_max: float, iters: int = 60) -> float:
    """sup{x >= 0 : pred_rejects(x)} for a predicate true on an interval [0, x*)."""
    if not pred_rejects(0.0):
        return 0.0
    lo, hi = 0.0, hi0
    while pred_rejects(hi):
        lo, hi = hi, hi * 2.0
        if hi > hi_max:
            return math.inf
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if pred_rejects(mid):
            lo = mid
        else:
            hi = mid
    return lo


def one_run_epsilon_lower_bound(
    m: int, r: int, v: int, *, delta: float = 0.0, confidence: float = DEFAULT_CONFIDENCE
) -> EpsilonBound:
    """The largest epsilon whose Steinke et al. p-value for ``v`` correct of ``r`` guesses is ``<= 1-confidence``.

    Args:
        m: the number of canaries (each included with probability 1/2), >= 1.
        r: the number of guesses made, in [0, m].
        v: the number of correct guesses, in [0, r].
        delta: the delta of the claim being audited, in [0, 1).
        confidence: the probability that the bound holds, in (0, 1).

    Returns:
        The bound (``method="steinke_one_run"``); ``inf`` beyond epsilon 1000.

    Raises:
        InvalidArgument: the counts violate ``0 <= v <= r <= m, m >= 1``, or ``delta`` / ``confidence`` out of range.
    """
    _check_conf(confidence, delta)
    _check_game(m, r, v)
    level = 1.0 - confidence
    eps = _bisect_increasing(
        lambda e: one_run_p_value(m, r, v, e, delta) <= level, 1.0, 1e3, iters=40
    )
    return EpsilonBound(
        eps,
        "steinke_one_run",
        float(delta),
        float(confidence),
        int(m),
        details={"m": m, "r": r, "v": v},
    )


# ----------------------------------------------------------------------------- one run, f-DP (Mahloujifar et al.)
def fdp_one_run_consistent(
    inv_blowup, m: int, r: int, v: int, *, confidence: float = DEFAULT_CONFIDENCE, k: int = 2
) -> Any:
    """Whether ``v`` correct of ``r`` guesses (``m`` canaries) is consistent, at level ``1-confidence``,
    with an f-DP mechanism whose inverse blow-up function is ``inv_blowup`` (recursion in the module
    docstring; ``k`` = size of the guess alphabet, 2 for in/out). ``inv_blowup`` may be vectorised over
    a family of curves (numpy arrays in, arrays out): the answer is then an array of bools."""
    _check_game(m, r, v)
    if r == 0 or v == 0:
        return True
    tau = (1.0 - confidence) * r / m
    h = tau * (r - v) / r
    rr = tau * v / r
    for i in range(v - 1, -1, -1):
        h_new = np.maximum(h, (k - 1) * inv_blowup(rr))
        rr = rr + (i / (r - i)) * (h_new - h)
        h = h_new
    return rr + h <= r / m


def _gauss_inv_blowup(mu: Any):
    """``y -> Phi(Phi^-1(y) - mu)`` (vectorised over ``mu``)."""
    mu = np.asarray(mu, dtype=np.float64)

    def inv(y: Any) -> Any:
        y = np.clip(y, 0.0, 1.0)
        return ndtr(ndtri(y) - mu)

    return inv


def fdp_one_run_mu_lower_bound(
    m: int, r: int, v: int, *, confidence: float = DEFAULT_CONFIDENCE, resolution: float = 1e-3
) -> float:
    """The largest mu (on a grid of step <= ``resolution``, i.e. rounded down: conservative) for which
    the one-run outcome is *inconsistent* with mu-GDP (Mahloujifar et al.); 0 if even mu = 0 is
    consistent. Assumes, as the paper's search does, that the rejected mu form an interval ``[0, mu*)``.

    Raises:
        InvalidArgument: bad counts, ``confidence`` not in (0, 1) (0 used to give mu = 7.5).
    """
    _check_game(m, r, v)
    _check_confidence(confidence)

    def rejected(mus: np.ndarray) -> np.ndarray:
        return ~np.asarray(
            fdp_one_run_consistent(_gauss_inv_blowup(mus), m, r, v, confidence=confidence),
            dtype=bool,
        ) & np.ones(mus.shape, dtype=bool)

    if not rejected(np.array([0.0]))[0]:
        return 0.0
    lo, hi = 0.0, 64.0
    if rejected(np.array([hi]))[0]:
        return math.inf
    while hi - lo > resolution:
        grid = np.linspace(lo, hi, 65)
        rej = rejected(grid)
        last = int(np.nonzero(rej)[0].max())  # rej[0] is True (grid[0] = lo is rejected)
        lo, hi = float(grid[last]), float(grid[min(last + 1, grid.size - 1)])
    return lo


def one_run_epsilon_lower_bound_gdp(
    m: int, r: int, v: int, *, delta: float, confidence: float = DEFAULT_CONFIDENCE
) -> EpsilonBound:
    """:func:`fdp_one_run_mu_lower_bound` converted to epsilon at ``delta``.

    Args:
        m: the number of canaries (each included with probability 1/2), >= 1.
        r: the number of guesses made, in [0, m].
        v: the number of correct guesses, in [0, r].
        delta: the delta at which mu is converted to epsilon, in [0, 1).
        confidence: the probability that the bound holds, in (0, 1).

    Returns:
        The bound (``method="fdp_gaussian_one_run"``, ``mu`` set).

    Raises:
        InvalidArgument: the counts violate ``0 <= v <= r <= m, m >= 1``, or ``delta`` / ``confidence`` out of range.
    """
    _check_conf(confidence, delta, gdp=True)
    mu = fdp_one_run_mu_lower_bound(m, r, v, confidence=confidence)
    return EpsilonBound(
        gdp_epsilon(mu, delta),
        "fdp_gaussian_one_run",
        float(delta),
        float(confidence),
        int(m),
        mu=mu,
        details={"m": m, "r": r, "v": v},
    )


# ----------------------------------------------------------------------------- from scores
def _scores(name: str, x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise InvalidArgument(f"{name} must be 1-D; got shape {a.shape}")
    if np.isnan(a).any():
        raise InvalidArgument(
            f"{name} holds {int(np.isnan(a).sum())} NaN score(s): an audit from NaN scores would "
            "silently rank them; fix the attack's statistic"
        )
    return a


def headline_bound(
    bounds: Mapping[str, EpsilonBound], *, gaussian_shaped: bool
) -> tuple[EpsilonBound, tuple[EpsilonBound, ...]]:
    """(the headline bound, the others) of an audit's bounds.

    A bound that converts a GDP parameter to epsilon (``gdp_clopper_pearson``,
    ``fdp_gaussian_one_run``) is a lower bound on epsilon only if the audited mechanism's privacy curve
    is Gaussian-shaped; it is the headline only when ``gaussian_shaped`` (one unsubsampled Gaussian
    step) and otherwise the assumption-free bound of the same game is (``clopper_pearson``,
    ``steinke_one_run``).

    Raises:
        InvalidArgument: no assumption-free bound to headline among ``bounds``.
    """
    names = list(bounds)
    if gaussian_shaped:
        head = next((n for n in names if n in GAUSSIAN_CONVERSIONS), names[0] if names else None)
    else:
        head = next((n for n in names if n not in GAUSSIAN_CONVERSIONS), None)
    if head is None:
        raise InvalidArgument(
            f"bounds {names}: none is assumption-free (clopper_pearson / steinke_one_run) and the "
            "mechanism is not Gaussian-shaped, so no bound can be headlined"
        )
    return bounds[head], tuple(b for n, b in bounds.items() if n != head)


def _counts_at(neg: np.ndarray, pos: np.ndarray, t: float, sign: int) -> tuple[int, int, int, int]:
    """(tp, fp, tn, fn) of the test "positive iff sign * score >= sign * t"."""
    p = int(np.count_nonzero(sign * pos >= sign * t))
    f = int(np.count_nonzero(sign * neg >= sign * t))
    return p, f, neg.size - f, pos.size - p


def threshold_audit(
    neg_scores: Sequence[float],
    pos_scores: Sequence[float],
    *,
    delta: float,
    confidence: float = DEFAULT_CONFIDENCE,
    selection_fraction: float = 0.3,
    rng: Any,
    methods: Sequence[str] = ("gdp_clopper_pearson", "clopper_pearson"),
    n_thresholds: int = 64,
) -> dict[str, EpsilonBound]:
    """Repeated-runs audit from test statistics: ``neg_scores`` from runs on ``D`` (no canary),
    ``pos_scores`` from runs on ``D'``. The threshold and its direction are chosen on a random
    ``selection_fraction`` of each (maximising each method's bound there), and the bound is computed on
    the other part only, so the threshold search costs no confidence. Returns method -> bound.

    Args:
        neg_scores: the test statistic of each run on ``D`` (at least 2).
        pos_scores: the test statistic of each run on ``D'`` (at least 2).
        delta: the delta of the claim being audited, in [0, 1).
        confidence: the probability that each bound holds, in (0, 1).
        selection_fraction: the share of each side used to choose the threshold, in (0, 1).
        rng: randomness of the selection / evaluation split (keyword-only).
        methods: ``"gdp_clopper_pearson"`` and/or ``"clopper_pearson"``.
        n_thresholds: the number of quantiles tried as thresholds.

    Returns:
        Method -> bound; ``details`` hold the chosen threshold, its direction and the run counts.

    Raises:
        InvalidArgument: fewer than 2 scores on a side, an unknown method, or an argument out of range.
    """

    check_range(
        "selection_fraction", selection_fraction, 0.0, 1.0, lo_inclusive=False, hi_inclusive=False
    )
    g = as_numpy(rng)
    neg = _scores("neg_scores", neg_scores)
    pos = _scores("pos_scores", pos_scores)
    if neg.size < 2 or pos.size < 2:
        raise InvalidArgument(f"need >= 2 scores per side; got {neg.size} and {pos.size}")
    _check_confidence(confidence)
    if "gdp_clopper_pearson" in methods:
        _check_gdp_delta(delta)
    neg, pos = neg[g.permutation(neg.size)], pos[g.permutation(pos.size)]
    k0, k1 = max(1, int(neg.size * selection_fraction)), max(1, int(pos.size * selection_fraction))
    sel_n, ev_n, sel_p, ev_p = neg[:k0], neg[k0:], pos[:k1], pos[k1:]
    both = np.concatenate([sel_n, sel_p])
    both = both[np.isfinite(both)]
    qs = (
        np.unique(np.quantile(both, np.linspace(0.0, 1.0, n_thresholds)))
        if both.size
        else np.array([0.0])
    )
    cands = np.unique(np.concatenate([qs, np.nextafter(qs, np.inf)]))
    fns = {
        "clopper_pearson": lambda c: epsilon_lower_bound(*c, delta=delta, confidence=confidence),
        "gdp_clopper_pearson": lambda c: epsilon_lower_bound_gdp(
            *c, delta=delta, confidence=confidence
        ),
    }
    # selection criterion: the bound itself (mu for the GDP bound: epsilon(mu) is increasing, and cheaper)
    keys = {
        "clopper_pearson": lambda c: (
            epsilon_lower_bound(*c, delta=delta, confidence=confidence).epsilon
        ),
        "gdp_clopper_pearson": lambda c: gdp_mu_lower_bound(*c, confidence=confidence),
    }
    out = {}
    for meth in methods:
        if meth not in fns:
            raise InvalidArgument(f"methods: unknown {meth!r}; allowed {sorted(fns)}")
        best, best_key = -1.0, (float(cands[0]), 1)
        for sign in (1, -1):
            for t in cands:
                key = keys[meth](_counts_at(sel_n, sel_p, float(t), sign))
                if key > best:
                    best, best_key = key, (float(t), sign)
        t, sign = best_key
        b = fns[meth](_counts_at(ev_n, ev_p, t, sign))
        out[meth] = EpsilonBound(
            b.epsilon,
            b.method,
            b.delta,
            b.confidence,
            int(neg.size + pos.size),
            b.mu,
            {
                **b.details,
                "threshold": t,
                "direction": "high" if sign > 0 else "low",
                "selection_runs": k0 + k1,
                "evaluation_runs": int(ev_n.size + ev_p.size),
            },
        )
    return out


#: fractions of the canaries guessed on (half "in" from the top scores, half "out" from the bottom),
#: declared before the run; each is tested at level (1-confidence)/len(grid) (Bonferroni)
ONE_RUN_GUESS_FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def one_run_audit(
    scores: Sequence[float],
    included: Sequence[bool],
    *,
    delta: float,
    rng: Any,
    confidence: float = DEFAULT_CONFIDENCE,
    guess_fractions: Sequence[float] = ONE_RUN_GUESS_FRACTIONS,
) -> dict[str, EpsilonBound]:
    """One-run audit from per-canary scores (higher = "more likely included") and the true inclusion bits:
    for each pre-declared number of guesses ``r`` (``guess_fractions`` of ``m``), guess "in" for the
    ``r/2`` highest scores and "out" for the ``r/2`` lowest, ties in score broken at random (``rng``:
    the array order must not decide); both analyses (Steinke et al.; Mahloujifar et al. with the
    Gaussian curve, only for ``delta > 0``), Bonferroni over the grid; the best bound of each is
    returned. Which one to headline: :func:`headline_bound`.

    Args:
        scores: one score per canary, higher = more likely included (at least 2).
        included: whether each canary was included in the run.
        delta: the delta of the claim being audited, in [0, 1) (0: no f-DP/GDP bound).
        rng: breaks ties in score (keyword-only; a seed, Generator or SeedSequence).
        confidence: the overall probability that the bounds hold, in (0, 1) (split over the grid).
        guess_fractions: the pre-declared fractions of the canaries guessed on, each in (0, 1].

    Returns:
        ``{"steinke_one_run": ..., "fdp_gaussian_one_run": ...}``, the best bound of each analysis
        (without ``fdp_gaussian_one_run`` when ``delta == 0``).

    Raises:
        InvalidArgument: ``scores`` and ``included`` not 1-D of the same length >= 2, NaN scores, or
            ``delta`` / ``confidence`` out of range.
    """

    _check_conf(confidence, delta)
    s = _scores("scores", scores)
    inc = np.asarray(included, dtype=bool)
    if s.shape != inc.shape or s.ndim != 1 or s.size < 2:
        raise InvalidArgument(
            f"scores and included must be 1-D of the same length >= 2; got {s.shape}, {inc.shape}"
        )
    m = s.size
    # ties broken at random: sort by score, then by a random key (lexsort: last key is primary)
    order = np.lexsort((as_numpy(rng).random(m), -s))
    conf = 1.0 - (1.0 - confidence) / len(guess_fractions)
    best: dict[str, EpsilonBound] = {}
    for frac in guess_fractions:
        half = max(1, int(round(frac * m / 2)))
        half = min(half, m // 2)
        top, bottom = order[:half], order[m - half :]
        r = 2 * half
        v = int(inc[top].sum() + (~inc[bottom]).sum())
        cands = [one_run_epsilon_lower_bound(m, r, v, delta=delta, confidence=conf)]
        if delta > 0:
            cands.append(one_run_epsilon_lower_bound_gdp(m, r, v, delta=delta, confidence=conf))
        for b in cands:
            if b.method not in best or b.epsilon > best[b.method].epsilon:
                best[b.method] = EpsilonBound(
                    b.epsilon,
                    b.method,
                    b.delta,
                    float(confidence),
                    m,
                    b.mu,
                    {
                        **b.details,
                        "bonferroni_tests": len(guess_fractions),
                        "per_test_confidence": conf,
                    },
                )
    return best
