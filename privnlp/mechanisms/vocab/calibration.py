"""Noise calibration for a DP word histogram with contribution bounding ("Laplace / Gaussian
with thresholding", a.k.a. DP partition selection).

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` Section 3.2 (Laplace(2/eps) noise and
threshold ``1 + 2 ln(2/delta)/eps``, after Korolova et al. 2009 and Bun et al. 2019).

Setting. Every *contributor* (a document or a user, the privacy unit) adds 1 to the count of
each of at most ``k`` distinct words (contribution bounding). A word's count is therefore the
number of distinct contributors that use it. Only words with count > 0 are noised (the word
universe is unknown), and a noisy count survives only if it reaches the threshold ``tau``.

Sensitivities. Adding/removing one contributor changes at most ``k`` counts (L0 = k), each by
at most 1 (Linf = 1): L1 = k, L2 = sqrt(k). Replacing one contributor by another (replace-one
neighbours) changes at most ``2k`` counts by 1: L1 = 2k, L2 = sqrt(2k), but in each direction at
most ``k`` words can exist in one dataset and not in the other.

Laplace with thresholding (add/remove, Google differential-privacy ``noise.Laplace.Threshold``,
Wilson et al. 2020 "Differentially private SQL with bounded user contribution"; OpenDP
``make_laplace_threshold``, Rogers 2023): scale ``b = k/eps``; the only way to break eps-DP is to
release a word that exists in one dataset only. Such a word has count exactly 1 and there are at
most ``k`` of them, so by a union bound ``delta = k * P[1 + Lap(b) >= tau] = (k/2) exp(-(tau-1)/b)``:

    tau = 1 + (k/eps) * ln(k / (2 delta))                                   (add/remove)
    tau = 1 + (2k/eps) * ln(k / (2 delta)),  b = 2k/eps                      (replace-one)

The paper's k = 1, replace-one parameters: Lap(2/eps) because replacing one word moves *two*
counts (L1 sensitivity 2); ``ln(2/delta)`` because its analysis splits delta over the two bins
that can appear/disappear and uses the one-sided tail bound ``P[Lap(b) > t] <= exp(-t/b)``
instead of ``exp(-t/b)/2``. It is valid but conservative: our replace-one threshold for k = 1 is
``1 + (2/eps) ln(1/(2 delta))``, lower by ``(2/eps) ln 4``.

Gaussian with thresholding: ``sigma`` from the analytic Gaussian mechanism (Balle & Wang 2018,
Thm 8) for L2 sensitivity sqrt(k) (sqrt(2k) for replace-one) at ``(eps, delta/2)``; the other
``delta/2`` pays for the threshold: ``tau = 1 + sigma * Phi^-1(1 - delta/(2k))``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from privnlp.core.errors import InvalidArgument, InvalidPrivacyParameter, check_range

__all__ = [
    "NoiseCalibration",
    "calibrate",
    "laplace_threshold",
    "gaussian_threshold",
    "analytic_gaussian_sigma",
    "analytic_gaussian_delta",
    "paper_calibration",
    "single_contributor_release_probability",
    "NEIGHBOURING",
]

NEIGHBOURING = ("add/remove", "replace-one")


def _norm():
    """``scipy.stats.norm``, imported on first use: scipy.stats costs ~2 s to import and this module sits
    on the CLI's light path (``privnlp vocab`` imports the DP vocabulary at its top)."""
    from scipy.stats import norm

    return norm


NOISES = ("laplace", "gaussian")


@dataclass(frozen=True)
class NoiseCalibration:
    """The noise and threshold that give ``(epsilon, delta)``-DP to the contributor histogram.

    Attributes:
        noise: ``"laplace"`` or ``"gaussian"``.
        scale: Laplace scale ``b`` or Gaussian ``sigma``.
        threshold: a noisy count is released iff it is ``>= threshold``.
        epsilon, delta: the guarantee (delta includes the thresholding part).
        k: maximum number of distinct words per contributor (L0 sensitivity for add/remove).
        neighbouring: ``"add/remove"`` or ``"replace-one"``.
        l0, l1, l2, linf: the sensitivities used.
    """

    noise: str
    scale: float
    threshold: float
    epsilon: float
    delta: float
    k: int
    neighbouring: str
    l0: int
    l1: float
    l2: float
    linf: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


def _check_common(epsilon: float, delta: float, k: int, neighbouring: str) -> None:
    check_range(
        "epsilon",
        epsilon,
        0.0,
        math.inf,
        lo_inclusive=False,
        hi_inclusive=False,
        error=InvalidPrivacyParameter,
    )
    check_range(
        "delta",
        delta,
        0.0,
        1.0,
        lo_inclusive=False,
        hi_inclusive=False,
        error=InvalidPrivacyParameter,
    )
    check_range("max_words_per_contributor (k)", k, 1, math.inf, integer=True, hi_inclusive=False)
    if neighbouring not in NEIGHBOURING:
        raise InvalidArgument(f"neighbouring must be one of {NEIGHBOURING}; got {neighbouring!r}")


def _sens(k: int, neighbouring: str) -> tuple[int, float, float]:
    m = 1 if neighbouring == "add/remove" else 2
    return m * k, float(m * k), math.sqrt(m * k)


def laplace_threshold(
    epsilon: float, delta: float, k: int = 1, neighbouring: str = "add/remove"
) -> NoiseCalibration:
    """Laplace scale and threshold for ``(epsilon, delta)``-DP (see the module docstring).

    Args:
        epsilon: the target epsilon; > 0 and finite.
        delta: the target delta (noise and threshold together), in (0, 1).
        k: the maximum number of distinct words per contributor, an integer >= 1.
        neighbouring: ``"add/remove"`` or ``"replace-one"`` contributors.

    Returns:
        The calibration.

    Raises:
        InvalidPrivacyParameter: ``epsilon`` or ``delta`` out of range.
        InvalidArgument: ``k`` out of range or unknown ``neighbouring``.
    """
    _check_common(epsilon, delta, k, neighbouring)
    l0, l1, l2 = _sens(int(k), neighbouring)
    b = l1 / epsilon
    # k words (per direction) can exist in one neighbour only; each has count exactly 1.
    p_bin = delta / k
    if p_bin <= 0.5:
        tau = 1.0 - b * math.log(2.0 * p_bin)
    else:  # delta > k/2 (e.g. k = 1, delta = 0.6): P[1 + Lap(b) >= tau] = p_bin still holds on this side
        tau = 1.0 + b * math.log(2.0 * (1.0 - p_bin))
    return NoiseCalibration(
        "laplace", b, tau, float(epsilon), float(delta), int(k), neighbouring, l0, l1, l2
    )


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """delta(eps) of the Gaussian mechanism (Balle & Wang 2018, Theorem 8), exact.

    Args:
        sigma: the Gaussian std; > 0.
        epsilon: the epsilon; >= 0.
        sensitivity: the L2 sensitivity; > 0.

    Returns:
        delta(epsilon).
    """
    a = sensitivity / (2.0 * sigma)
    c = epsilon * sigma / sensitivity
    # Phi(a - c) - e^eps Phi(-a - c), computed with log-cdf for stability
    return float(_norm().cdf(a - c) - math.exp(epsilon + _norm().logcdf(-a - c)))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest sigma (to 1e-10 relative) with ``analytic_gaussian_delta(sigma, eps, s) <= delta``.

    Args:
        epsilon: the target epsilon; > 0.
        delta: the target delta, in (0, 1).
        sensitivity: the L2 sensitivity; > 0.

    Returns:
        The Gaussian std sigma.
    """
    lo, hi = 1e-6 * sensitivity, sensitivity
    while analytic_gaussian_delta(hi, epsilon, sensitivity) > delta:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if analytic_gaussian_delta(mid, epsilon, sensitivity) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-10 * hi:
            break
    return hi


def gaussian_threshold(
    epsilon: float, delta: float, k: int = 1, neighbouring: str = "add/remove"
) -> NoiseCalibration:
    """Gaussian sigma (analytic, delta/2) and threshold (delta/2 over k bins).

    Args:
        epsilon: the target epsilon; > 0 and finite.
        delta: the target delta (noise and threshold together), in (0, 1).
        k: the maximum number of distinct words per contributor, an integer >= 1.
        neighbouring: ``"add/remove"`` or ``"replace-one"`` contributors.

    Returns:
        The calibration.

    Raises:
        InvalidPrivacyParameter: ``epsilon`` or ``delta`` out of range.
        InvalidArgument: ``k`` out of range or unknown ``neighbouring``.
    """
    _check_common(epsilon, delta, k, neighbouring)
    l0, l1, l2 = _sens(int(k), neighbouring)
    sigma = analytic_gaussian_sigma(epsilon, delta / 2.0, l2)
    tau = 1.0 + sigma * float(_norm().isf(delta / (2.0 * k)))
    return NoiseCalibration(
        "gaussian", sigma, tau, float(epsilon), float(delta), int(k), neighbouring, l0, l1, l2
    )


def calibrate(
    noise: str, epsilon: float, delta: float, k: int = 1, neighbouring: str = "add/remove"
) -> NoiseCalibration:
    """Laplace or Gaussian calibration with thresholding (:func:`laplace_threshold` / :func:`gaussian_threshold`).

    Args:
        noise: ``"laplace"`` or ``"gaussian"``.
        epsilon: the target epsilon; > 0 and finite.
        delta: the target delta (noise and threshold together), in (0, 1).
        k: the maximum number of distinct words per contributor, an integer >= 1.
        neighbouring: ``"add/remove"`` or ``"replace-one"`` contributors.

    Returns:
        The calibration.

    Raises:
        InvalidPrivacyParameter: ``epsilon`` or ``delta`` out of range.
        InvalidArgument: unknown ``noise``, ``k`` out of range or unknown ``neighbouring``.
    """
    if noise == "laplace":
        return laplace_threshold(epsilon, delta, k, neighbouring)
    if noise == "gaussian":
        return gaussian_threshold(epsilon, delta, k, neighbouring)
    raise InvalidArgument(f"noise must be one of {NOISES}; got {noise!r}")


def paper_calibration(epsilon: float, delta: float) -> NoiseCalibration:
    """The paper's parameters (Section 3.2): Lap(2/eps), threshold 1 + 2 ln(2/delta)/eps, k = 1,
    replace-one *word* neighbours.

    Args:
        epsilon: the target epsilon; > 0 and finite.
        delta: the target delta, in (0, 1).

    Returns:
        The calibration (``k=1``, ``"replace-one"``).

    Raises:
        InvalidPrivacyParameter: ``epsilon`` or ``delta`` out of range.
    """
    _check_common(epsilon, delta, 1, "replace-one")
    return NoiseCalibration(
        "laplace",
        2.0 / epsilon,
        1.0 + 2.0 * math.log(2.0 / delta) / epsilon,
        float(epsilon),
        float(delta),
        1,
        "replace-one",
        2,
        2.0,
        math.sqrt(2.0),
    )


def single_contributor_release_probability(cal: NoiseCalibration) -> float:
    """P[a word with exactly one contributor is released] = P[1 + noise >= threshold].

    Args:
        cal: the calibration.

    Returns:
        The probability in [0, 1].
    """
    t = cal.threshold - 1.0
    if cal.noise == "laplace":
        return 0.5 * math.exp(-t / cal.scale) if t >= 0 else 1.0 - 0.5 * math.exp(t / cal.scale)
    return float(_norm().sf(t / cal.scale))
