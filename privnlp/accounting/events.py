"""The events a :class:`~privnlp.accounting.DPLedger` records, and the accounting primitives every
ledger component shares (one RDP order list, one analytic-Gaussian conversion, one noise search).

Event types (each a frozen, run-length record that round-trips through ``to_dict`` / ``from_dict``):

* :class:`LedgerRun` -- ``steps`` Poisson-subsampled Gaussian steps of central DP-SGD (record level);
* :class:`~privnlp.accounting.federated.RoundRun` -- DP-FedAvg rounds (user level, defined beside its
  accounting in :mod:`privnlp.accounting.federated`);
* :class:`ThresholdRelease` -- a DP vocabulary's noised, thresholded contributor histogram (DP WordPiece,
  ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` Section 3.2): Laplace or Gaussian noise on each
  count, released iff it reaches the threshold (partition selection). Its (epsilon, delta) is derived
  HERE from the released parameters (scale, threshold, k, neighbouring), independently of the
  mechanism's calibration: Laplace ``epsilon = L1 / b`` with the threshold's delta
  ``(k/2) exp(-(tau - 1)/b)``; Gaussian: dp_accounting's analytic Gaussian privacy loss of
  ``sigma / L2`` at what is left of delta after the threshold's ``k * P[N(0, sigma^2) >= tau - 1]``;
* :class:`MetricDPRun` -- local metric-DP word perturbation (``epsilon * d(x, x')`` per word; over the
  words of a record the guarantee adds up: ``epsilon * sum_i d(x_i, x'_i)``; repeated releases of the
  same record add their epsilons).

Written by hand: only the run-length records, the threshold-release formulas (no dp_accounting event
models a thresholded release) and the bisection searches; every Gaussian conversion is dp_accounting's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from dp_accounting.pld import privacy_loss_mechanism as plm
from scipy.stats import norm

from privnlp.core.errors import InvalidArgument, InvalidPrivacyParameter, check_range

__all__ = [
    "check_delta",
    "RDP_ORDERS",
    "LedgerRun",
    "ThresholdRelease",
    "MetricDPRun",
    "bisect_noise_multiplier",
    "gaussian_epsilon",
    "gaussian_mu_epsilon",
    "normalise_runs",
    "quiet_absl",
]

#: THE RDP order list of the package (DP-SGD steps, DP-FedAvg rounds): dp_accounting's default
#: fractional orders plus integer orders up to 8192 (the optimal order grows like
#: sigma * sqrt(log(1/delta) / steps) / q: ~2000 at sigma=50, q=1/64, 20 steps)
RDP_ORDERS = tuple(
    sorted(
        set(
            [1 + x / 10.0 for x in range(1, 100)]
            + list(range(11, 64))
            + [64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024, 1280, 1536]
            + [2048, 2560, 3072, 4096, 6144, 8192]
        )
    )
)


@contextmanager
def quiet_absl() -> Iterator[None]:
    """Silence absl's "_compute_log_a_frac failed to converge" warnings (dp_accounting just drops
    that order) for the duration of the block."""
    lg = logging.getLogger("absl")
    level = lg.level
    lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        lg.setLevel(level)


def gaussian_mu_epsilon(mu_squared: float, delta: float) -> float:
    """Epsilon at ``delta`` of the Gaussian mechanism of sensitivity 1 and std ``1/mu`` (the exact
    composition of Gaussians with ``sum_i 1/z_i^2 = mu^2``): dp_accounting's analytic
    ``GaussianPrivacyLoss.get_delta_for_epsilon`` (Balle & Wang 2018) inverted by bisection, the
    upper end returned. (A discretised PLD takes ~15 s at mu = 20 and is no tighter.)

    Args:
        mu_squared: ``mu^2 = sum_i 1 / z_i^2``; >= 0 (0: no release, epsilon 0; inf: no noise).
        delta: the target delta, in (0, 1).

    Returns:
        The smallest epsilon (to 1e-9 relative) with ``delta(epsilon) <= delta``.
    """
    if mu_squared <= 0:
        return 0.0
    if math.isinf(mu_squared):
        return math.inf
    mu = math.sqrt(mu_squared)
    loss = plm.GaussianPrivacyLoss(1.0 / mu, sensitivity=1.0)
    if loss.get_delta_for_epsilon(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, mu_squared / 2.0 + mu * math.sqrt(2.0 * math.log(1.25 / delta)) + 1.0
    while loss.get_delta_for_epsilon(hi) > delta:
        lo, hi = hi, 2.0 * hi
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if loss.get_delta_for_epsilon(mid) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * max(1.0, hi):
            break
    return float(hi)


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact epsilon of the Gaussian mechanism (sensitivity 1, std ``noise_multiplier``) at ``delta``
    (Balle & Wang 2018, analytic Gaussian, via dp_accounting: :func:`gaussian_mu_epsilon`).

    Args:
        noise_multiplier: the Gaussian std relative to the sensitivity; > 0 (<= 0: ``inf``).
        delta: the target delta, in (0, 1).

    Returns:
        The smallest epsilon with delta(epsilon) <= ``delta``.
    """
    s = float(noise_multiplier)
    if s <= 0:
        return math.inf
    return gaussian_mu_epsilon(1.0 / (s * s), float(delta))


def bisect_noise_multiplier(
    eps: Any,
    target_epsilon: float,
    *,
    tolerance: float,
    max_sigma: float,
    iters: int,
    unreachable: str,
    rel_width: float = 0.0,
) -> float:
    """The smallest noise multiplier ``s`` (up to ``tolerance`` relative in epsilon, or a bracket
    narrower than ``rel_width * s``) with ``eps(s) <= target_epsilon``, for a decreasing ``eps``:
    doubling to bracket, then bisection. Raises :class:`InvalidPrivacyParameter` (``unreachable``)
    past ``max_sigma``. The answer is always on the safe side (``eps(answer) <= target``).

    Args:
        eps: a decreasing function noise multiplier -> epsilon.
        target_epsilon: the epsilon to stay within.
        tolerance: relative slack in epsilon at which the search stops.
        max_sigma: the largest noise multiplier tried before giving up.
        iters: the maximum number of bisection steps.
        unreachable: the error message when ``max_sigma`` is exceeded.
        rel_width: stop once the bracket is narrower than ``rel_width`` times its upper end (0 = off).

    Returns:
        The upper end of the final bracket (``eps(answer) <= target_epsilon``).

    Raises:
        InvalidPrivacyParameter: ``target_epsilon`` is not reached below ``max_sigma``.
    """
    lo, hi = 0.0, 1.0
    while eps(hi) > target_epsilon:
        lo, hi = hi, hi * 2
        if hi > max_sigma:
            raise InvalidPrivacyParameter(unreachable)
    for _ in range(iters):
        mid = (lo + hi) / 2
        e = eps(mid)
        if e <= target_epsilon:
            hi = mid
            if target_epsilon - e <= tolerance * target_epsilon:
                break
        else:
            lo = mid
        if hi - lo < rel_width * hi:
            break
    return float(hi)


@dataclass(frozen=True)
class LedgerRun:
    """``steps`` consecutive Poisson-subsampled Gaussian steps with the same parameters.

    Attributes:
        noise_multiplier: sigma, the Gaussian noise std relative to the clip norm (>= 0).
        sample_rate: q, the Poisson sampling probability of each example, in (0, 1].
        steps: how many consecutive steps used these parameters.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "noise_multiplier": self.noise_multiplier,
            "sample_rate": self.sample_rate,
            "steps": self.steps,
        }


def normalise_runs(runs: Iterable[Any]) -> tuple[tuple[float, float, int], ...]:
    """``(sigma, q, steps)`` tuples of the runs with ``steps > 0`` (:class:`LedgerRun` objects or tuples)."""
    out = []
    for r in runs:
        s, q, n = (r.noise_multiplier, r.sample_rate, r.steps) if isinstance(r, LedgerRun) else r
        if int(n) > 0:
            out.append((float(s), float(q), int(n)))
    return tuple(out)


_NOISES = ("laplace", "gaussian")
_NEIGHBOURING = ("add/remove", "replace-one")


@dataclass(frozen=True)
class ThresholdRelease:
    """``releases`` DP-vocabulary histogram releases with the same parameters (DP WordPiece: noise on
    every contributor count, a count released iff its noisy value reaches ``threshold``).

    Attributes:
        noise: ``"laplace"`` or ``"gaussian"``.
        scale: the Laplace scale b or the Gaussian sigma; > 0.
        threshold: tau, a noisy count is released iff ``>= tau``; > 1.
        k: the most distinct words one contributor adds (contribution bound), an integer >= 1.
        neighbouring: ``"add/remove"`` or ``"replace-one"`` contributors (replace-one doubles the
            sensitivities: up to 2k counts change).
        delta: the delta the release was calibrated to (noise and threshold together), in (0, 1): the
            Gaussian noise gets what the threshold leaves of it.
        unit: the contributor (``"document"`` or ``"user"``).
        releases: how many releases used these parameters (each on the same contributors).

    Raises:
        InvalidArgument / InvalidPrivacyParameter: a field out of its range, or a threshold whose
            delta alone exceeds ``delta``.
    """

    noise: str
    scale: float
    threshold: float
    k: int
    neighbouring: str
    delta: float
    unit: str = "document"
    releases: int = 1

    def __post_init__(self) -> None:
        if self.noise not in _NOISES:
            raise InvalidArgument(f"noise must be one of {_NOISES}; got {self.noise!r}")
        if self.neighbouring not in _NEIGHBOURING:
            raise InvalidArgument(
                f"neighbouring must be one of {_NEIGHBOURING}; got {self.neighbouring!r}"
            )
        check_range(
            "scale", self.scale, 0.0, math.inf, lo_inclusive=False, error=InvalidPrivacyParameter
        )
        check_range("threshold", self.threshold, 1.0, math.inf, lo_inclusive=False)
        check_range("k", self.k, 1, math.inf, integer=True)
        check_range("releases", self.releases, 1, math.inf, integer=True)
        check_range(
            "delta",
            self.delta,
            0.0,
            1.0,
            lo_inclusive=False,
            hi_inclusive=False,
            error=InvalidPrivacyParameter,
        )
        if self.threshold_delta() > self.delta * (1 + 1e-9):
            raise InvalidPrivacyParameter(
                f"threshold {self.threshold:.6g} releases a single contributor's word with "
                f"probability {self.threshold_delta():.3g} > delta {self.delta:.3g}"
            )

    @property
    def _m(self) -> int:
        return 1 if self.neighbouring == "add/remove" else 2

    @property
    def l1(self) -> float:
        """L1 sensitivity of the histogram: k (add/remove) or 2k (replace-one)."""
        return float(self._m * self.k)

    @property
    def l2(self) -> float:
        """L2 sensitivity: sqrt(k) or sqrt(2k)."""
        return math.sqrt(self._m * self.k)

    def key(self) -> tuple:
        return (self.noise, self.scale, self.threshold, self.k, self.neighbouring, self.delta)

    def threshold_delta(self) -> float:
        """Probability that ONE release publishes a word only one contributor has (at most k such words,
        each of count 1, union bound): ``(k/2) exp(-(tau-1)/b)`` (Laplace), ``k P[N(0, s^2) >= tau-1]``."""
        t = self.threshold - 1.0
        if self.noise == "laplace":
            return min(1.0, 0.5 * self.k * math.exp(-t / self.scale))
        return min(1.0, self.k * float(norm.sf(t / self.scale)))

    def epsilon(self) -> float:
        """Epsilon of ONE release at its own ``delta`` (noise part; the threshold's delta is charged
        first): Laplace ``L1 / b``; Gaussian: analytic Gaussian of ``sigma / L2`` at the delta left."""
        if self.noise == "laplace":
            return self.l1 / self.scale
        rest = self.delta - self.threshold_delta()
        if rest <= 0:
            return math.inf
        return gaussian_epsilon(self.scale / self.l2, rest)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ThresholdRelease:
        return cls(
            str(d["noise"]),
            float(d["scale"]),
            float(d["threshold"]),
            int(d["k"]),
            str(d["neighbouring"]),
            float(d["delta"]),
            str(d.get("unit", "document")),
            int(d.get("releases", 1)),
        )


@dataclass(frozen=True)
class MetricDPRun:
    """``releases`` passes of local metric-DP word perturbation over a dataset, each record perturbed
    once per pass: every word ``epsilon * d(x, x')``-private in ``metric``.

    Attributes:
        epsilon: the per-word metric-DP epsilon (per unit of distance); > 0.
        metric: the metric (``"euclidean"``, ``"mahalanobis"``, ...).
        words: the most words one record holds (the record-level guarantee is
            ``epsilon * sum_i d(x_i, x'_i)``, at most ``epsilon * words * max d``).
        releases: how many passes used these parameters.

    Raises:
        InvalidPrivacyParameter / InvalidArgument: a field out of its range.
    """

    epsilon: float
    metric: str
    words: int = 1
    releases: int = 1

    def __post_init__(self) -> None:
        check_range(
            "epsilon",
            self.epsilon,
            0.0,
            math.inf,
            lo_inclusive=False,
            hi_inclusive=False,
            error=InvalidPrivacyParameter,
        )
        if not isinstance(self.metric, str) or not self.metric:
            raise InvalidArgument(f"metric must be a non-empty string; got {self.metric!r}")
        check_range("words", self.words, 1, math.inf, integer=True)
        check_range("releases", self.releases, 1, math.inf, integer=True)

    def key(self) -> tuple:
        return (self.epsilon, self.metric, self.words)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MetricDPRun:
        return cls(
            float(d["epsilon"]), str(d["metric"]), int(d.get("words", 1)), int(d.get("releases", 1))
        )


def check_delta(delta: float, n: int | None) -> float:
    """Validate delta: in (0, 1) and strictly below 1/N (delta >= 1/N allows releasing a record).

    Args:
        delta: the delta to check.
        n: the dataset size N (records or users at the accounting unit), or ``None`` to check (0, 1) only.

    Returns:
        ``delta`` as a float.

    Raises:
        InvalidPrivacyParameter: ``delta`` is outside (0, 1), or ``delta >= 1/n``.
    """
    check_range(
        "delta",
        delta,
        0.0,
        1.0,
        lo_inclusive=False,
        hi_inclusive=False,
        error=InvalidPrivacyParameter,
    )
    if n is not None and delta >= 1.0 / n:
        raise InvalidPrivacyParameter(
            f"delta must be in (0, 1/N) = (0, {1.0 / n:.3g}) for a dataset of N={n} records "
            f"(delta >= 1/N permits publishing a whole record); got {delta!r}; the default is min(1e-5, N^-1.1)"
        )
    return float(delta)
