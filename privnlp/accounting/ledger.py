"""The DP-SGD ledger, epsilon computation, calibration and the hard budget guard.

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (DP-SGD; noise multiplier sigma with P
shards == one shard with sigma*sqrt(P)). Accountants: Google's ``dp_accounting`` (PLD and RDP) give the
**reported** epsilon; opacus' ``RDPAccountant`` / ``PRVAccountant`` are computed as *diagnostics* only.

Which accountant is reported (``accountant=``):

* ``"prv"`` (default, "tightest"): the smaller of dp_accounting's PLD (pessimistic discretisation, an
  upper bound) and dp_accounting's RDP over a wide order range (:data:`RDP_ORDERS`, up to 8192). Both
  are sound upper bounds, so their minimum is one too. PLD is tighter at moderate noise; at very large
  noise and many steps its 1e-4 loss discretisation dominates and RDP (large orders) is tighter.
* ``"rdp"``: dp_accounting's RDP over the wide order range (comparable with papers that use the
  moments accountant / TF Privacy).

opacus' RDP orders stop at 63, so at large sigma (>= 5) its epsilon is several times looser than the
above (sigma=10, q=1/64, 20 steps: 0.104 vs 0.022); the cross-check (:meth:`DPLedger.cross_check`)
reports the disagreement as a diagnostic and never raises after training. Configuration errors
(bad sigma/q/delta, an accountant that cannot evaluate the planned run) are raised *before* training
by :func:`check_accounting_configuration`.

Written by hand here: only the run-length ledger, the min() of the two dp_accounting accountants, the
caching of one-step RDP curves and the step-budget search (neither library has a hard budget).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from privnlp.core.errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    PrivacyBudgetExceeded,
    PrivnlpError,
    check_positive,
    check_range,
)

__all__ = [
    "ACCOUNTANTS",
    "REPORTED",
    "RDP_ORDERS",
    "check_accounting_configuration",
    "bisect_noise_multiplier",
    "LedgerRun",
    "DPLedger",
    "EpsilonEstimate",
    "epsilon_for",
    "epsilon_no_amplification",
    "gaussian_epsilon",
    "calibrate_noise_multiplier",
    "default_delta",
    "check_delta",
    "effective_noise_multiplier",
    "BudgetGuard",
    "PRV_DIAGNOSTIC_MAX_POINTS",
    "DiagnosticSkipped",
]

#: accountant name -> what is reported (dp_accounting); the opacus accountant of the same name is a diagnostic
ACCOUNTANTS = {"prv": "pld", "rdp": "rdp"}
#: the reported accountant, spelled out (claims / statements)
REPORTED = {
    "prv": "dp_accounting min(PLD, RDP wide orders)",
    "rdp": "dp_accounting RDP (wide orders)",
}
#: relative disagreement between the reported epsilon and opacus' above which the cross-check adds a
#: diagnostic note (never an error: opacus' RDP orders stop at 63 and are loose at large sigma)
CROSS_CHECK_RTOL = {"prv": 0.10, "rdp": 0.10}
#: wide RDP order range: dp_accounting's default fractional orders plus integer orders up to 8192 (the
#: optimal order grows like sigma * sqrt(log(1/delta) / steps) / q: ~2000 at sigma=50, q=1/64, 20 steps)
RDP_ORDERS = tuple(
    sorted(
        set(
            [1 + x / 10.0 for x in range(1, 100)]
            + list(range(11, 64))
            + [
                64,
                80,
                96,
                128,
                160,
                192,
                256,
                320,
                384,
                512,
                640,
                768,
                1024,
                1280,
                1536,
                2048,
                2560,
                3072,
                4096,
                6144,
                8192,
            ]
        )
    )
)
_RDP_ORDERS = RDP_ORDERS


def default_delta(n: int) -> float:
    """The default delta ``min(1e-5, N**-1.1)`` for a dataset of ``n`` records.

    Args:
        n: the dataset size N (number of records, or of users for user-level accounting); an integer >= 1.

    Returns:
        ``min(1e-5, n ** -1.1)``, always strictly below 1/N.

    Raises:
        InvalidArgument: ``n`` is not an integer >= 1.
    """
    check_range("dataset size N", n, 1, math.inf, integer=True)
    return float(min(1e-5, float(n) ** -1.1))


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


def effective_noise_multiplier(per_shard_noise_multiplier: float, num_shards: int) -> float:
    """DP-BERT Eq. (3): P shards each adding N(0, sigma^2 C^2) to their sum, averaged across shards,
    equal one unsharded DP-SGD step with noise multiplier ``sigma * sqrt(P)``.

    Args:
        per_shard_noise_multiplier: sigma added by each shard, relative to the clip norm C; >= 0.
        num_shards: P, the number of shards averaged; an integer >= 1.

    Returns:
        The noise multiplier of the equivalent single-shard step, ``sigma * sqrt(P)``.

    Raises:
        InvalidPrivacyParameter: ``per_shard_noise_multiplier`` is negative or not a number.
        InvalidArgument: ``num_shards`` is not an integer >= 1.
    """
    check_range(
        "per_shard_noise_multiplier",
        per_shard_noise_multiplier,
        0.0,
        math.inf,
        error=InvalidPrivacyParameter,
    )
    check_range("num_shards", num_shards, 1, math.inf, integer=True)
    return float(per_shard_noise_multiplier) * math.sqrt(int(num_shards))


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


@dataclass(frozen=True)
class EpsilonEstimate:
    """Epsilon of a ledger at ``delta``.

    ``epsilon`` is the reported value (dp_accounting, see the module docstring) and equals
    ``dp_accounting``; ``opacus`` is opacus' value of the same accountant name (a diagnostic, ``nan``
    when not computed); ``source`` names what was reported; ``diagnostics`` holds the other values."""

    epsilon: float
    opacus: float
    dp_accounting: float
    accountant: str
    delta: float
    source: str = ""
    diagnostics: Mapping[str, Any] = field(default_factory=dict)

    @property
    def relative_gap(self) -> float:
        """Relative gap between opacus (diagnostic) and the reported value (0 when opacus was not computed)."""
        a, b = self.opacus, self.dp_accounting
        if math.isnan(a) or math.isnan(b):
            return 0.0
        hi, lo = max(a, b), min(a, b)
        if math.isinf(hi):
            return 0.0 if math.isinf(lo) else math.inf
        return (hi - lo) / hi if hi > 0 else 0.0


def _check_accountant(accountant: str) -> str:
    if accountant not in ACCOUNTANTS:
        raise InvalidArgument(
            f"accountant must be one of {sorted(ACCOUNTANTS)}; got {accountant!r}"
        )
    return accountant


def _dp_event(runs: tuple[tuple[float, float, int], ...]):
    from dp_accounting import dp_event as de

    events = [
        de.SelfComposedDpEvent(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(s)), n)
        for s, q, n in runs
    ]
    return de.ComposedDpEvent(events)


#: the largest discretisation (number of mesh points) opacus' PRV accountant may use as a diagnostic:
#: at sigma = 1, q = 1, 10k steps it asks for 3.7e8 points (~10 GiB across its arrays) and can be
#: OOM-killed after training; above the cap the diagnostic is skipped with a note (~0.5 s, < 1 GiB here)
PRV_DIAGNOSTIC_MAX_POINTS = 4_000_000


class DiagnosticSkipped(PrivnlpError):
    """A diagnostic accountant was not run because it would exceed its memory / time cap."""


def _prv_domain_points(runs: tuple[tuple[float, float, int], ...], delta: float) -> int:
    """The number of mesh points opacus' ``PRVAccountant.get_epsilon(delta)`` would discretise on
    (its own domain computation, which is cheap; the allocation happens after)."""
    from opacus.accountants import PRVAccountant
    from opacus.accountants.analysis.prv import PoissonSubsampledGaussianPRV

    acc = PRVAccountant()
    dom = acc._get_domain(
        prvs=[PoissonSubsampledGaussianPRV(q, s) for s, q, _ in runs],
        num_self_compositions=[n for _, _, n in runs],
        eps_error=0.01,
        delta_error=delta / 1000,
    )
    return int(dom.size)


@lru_cache(maxsize=4096)
def _eps_opacus(runs: tuple[tuple[float, float, int], ...], delta: float, accountant: str) -> float:
    from opacus.accountants import PRVAccountant, RDPAccountant

    if accountant != "rdp":
        points = _prv_domain_points(runs, delta)
        if points > PRV_DIAGNOSTIC_MAX_POINTS:
            raise DiagnosticSkipped(
                f"opacus PRV diagnostic skipped: its discretisation needs {points:.3g} points "
                f"(> cap {PRV_DIAGNOSTIC_MAX_POINTS:.3g}, ~{points * 8 * 4 / 2**30:.3g} GiB); the "
                "reported epsilon (dp_accounting) is unaffected"
            )
    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    acc.history = [(float(s), float(q), int(n)) for s, q, n in runs]
    return float(acc.get_epsilon(delta=delta))


class _QuietAbsl:
    def __enter__(self):
        self.lg = logging.getLogger("absl")
        self.level = self.lg.level
        self.lg.setLevel(
            logging.ERROR
        )  # "_compute_log_a_frac failed to converge" just drops an order

    def __exit__(self, *exc):
        self.lg.setLevel(self.level)


@lru_cache(maxsize=8192)
def _rdp_one_step(sigma: float, q: float) -> tuple[float, ...]:
    """RDP curve (over :data:`RDP_ORDERS`) of ONE Poisson-subsampled Gaussian step (cached: RDP composes
    linearly, so a run of n steps is n times this)."""
    from dp_accounting import dp_event as de
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    with _QuietAbsl():
        acc = rdpa.RdpAccountant(orders=list(RDP_ORDERS))
        acc.compose(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)))
        return tuple(float(v) for v in np.asarray(acc._rdp))


@lru_cache(maxsize=4096)
def _eps_rdp_wide(runs: tuple[tuple[float, float, int], ...], delta: float) -> float:
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    total = np.zeros(len(RDP_ORDERS))
    for s, q, n in runs:
        total = total + n * np.asarray(_rdp_one_step(s, q))
    with _QuietAbsl():
        eps, _ = rdpa.compute_epsilon(list(RDP_ORDERS), list(total), delta)
    return float(eps)


@lru_cache(maxsize=4096)
def _eps_pld(runs: tuple[tuple[float, float, int], ...], delta: float) -> float:
    from dp_accounting.pld import pld_privacy_accountant as plda

    with _QuietAbsl():
        acc = plda.PLDAccountant()
        acc.compose(_dp_event(runs))
        return float(acc.get_epsilon(delta))


def _eps_dp_accounting(
    runs: tuple[tuple[float, float, int], ...], delta: float, accountant: str
) -> float:
    """The reported epsilon (see the module docstring)."""
    rdp = _eps_rdp_wide(runs, delta)
    if accountant == "rdp":
        return rdp
    return min(_eps_pld(runs, delta), rdp)


def _normalise_runs(runs: Iterable[Any]) -> tuple[tuple[float, float, int], ...]:
    out = []
    for r in runs:
        s, q, n = (r.noise_multiplier, r.sample_rate, r.steps) if isinstance(r, LedgerRun) else r
        if int(n) > 0:
            out.append((float(s), float(q), int(n)))
    return tuple(out)


def _diagnostics(
    rt: tuple[tuple[float, float, int], ...], delta: float, accountant: str
) -> dict[str, Any]:
    """opacus' value of ``accountant`` plus the dp_accounting values (errors are recorded, never raised). With
    ``accountant="rdp"`` the PLD value is not computed (it costs ~1 s per distinct ledger, e.g. on every
    federated client update); ``prv`` computes it anyway."""
    out: dict[str, Any] = {}
    fns = [(f"opacus.{accountant}", lambda: _eps_opacus(rt, delta, accountant))]
    if accountant == "prv":
        fns.append(("dp_accounting.pld", lambda: _eps_pld(rt, delta)))
    fns.append(("dp_accounting.rdp_wide", lambda: _eps_rdp_wide(rt, delta)))
    for name, fn in fns:
        try:
            out[name] = float(fn())
        except DiagnosticSkipped as e:
            out[name] = math.nan
            out[name + ".skipped"] = str(e)
        except Exception as e:  # noqa: BLE001 - a diagnostic must never throw a finished run away
            out[name] = math.nan
            out[name + ".error"] = f"{type(e).__name__}: {e}"[:300]
    return out


def epsilon_for(
    runs: Iterable[Any], delta: float, accountant: str = "prv", *, diagnostics: bool = False
) -> EpsilonEstimate:
    """Epsilon of a sequence of runs ``(noise_multiplier, sample_rate, steps)`` at ``delta``.

    ``epsilon`` is the reported (dp_accounting) value; with ``diagnostics=True`` opacus' value of the
    same accountant and both dp_accounting values are computed too (``opacus`` / ``diagnostics``).

    Args:
        runs: :class:`LedgerRun` objects or ``(noise_multiplier, sample_rate, steps)`` tuples, in order;
            runs with ``steps <= 0`` are ignored.
        delta: the target delta, in (0, 1).
        accountant: ``"prv"`` (min of PLD and wide-order RDP, the default) or ``"rdp"`` (wide-order RDP).
        diagnostics: also compute opacus' value and every dp_accounting value (slower).

    Returns:
        The estimate; epsilon is 0 for an empty ledger and ``inf`` when a run with q > 0 has sigma <= 0.

    Raises:
        InvalidArgument: unknown ``accountant``.
        InvalidPrivacyParameter: ``delta`` outside (0, 1).
    """
    _check_accountant(accountant)
    check_range(
        "delta",
        delta,
        0.0,
        1.0,
        lo_inclusive=False,
        hi_inclusive=False,
        error=InvalidPrivacyParameter,
    )
    rt = _normalise_runs(runs)
    src = REPORTED[accountant]
    if not rt:
        return EpsilonEstimate(0.0, 0.0, 0.0, accountant, float(delta), src)
    if any(s <= 0 and q > 0 for s, q, _ in rt):
        return EpsilonEstimate(math.inf, math.inf, math.inf, accountant, float(delta), src)
    b = _eps_dp_accounting(rt, float(delta), accountant)
    if not diagnostics:
        return EpsilonEstimate(b, math.nan, b, accountant, float(delta), src)
    diag = _diagnostics(rt, float(delta), accountant)
    return EpsilonEstimate(b, diag[f"opacus.{accountant}"], b, accountant, float(delta), src, diag)


def check_accounting_configuration(
    noise_multiplier: float,
    sample_rate: float,
    steps: int | None,
    delta: float,
    accountant: str = "prv",
) -> float | None:
    """Fail *before* training on an inconsistent accounting configuration: sigma not a finite number
    >= 0, q outside (0, 1], delta outside (0, 1), an unknown accountant, or a planned run whose epsilon
    the reported accountant cannot evaluate (returns that planned epsilon; ``None`` without ``steps``).

    Args:
        noise_multiplier: sigma relative to the clip norm; a finite number >= 0.
        sample_rate: q, the Poisson sampling probability, in (0, 1].
        steps: the planned number of steps, or ``None`` to check the parameters only.
        delta: the target delta, in (0, 1).
        accountant: ``"prv"`` or ``"rdp"`` (see the module docstring).

    Returns:
        The planned run's epsilon, or ``None`` when ``steps`` is ``None``.

    Raises:
        InvalidArgument: unknown ``accountant``.
        InvalidPrivacyParameter: a parameter is outside its range, or the accountant fails or returns NaN
            on the planned run.
    """
    _check_accountant(accountant)
    if not (
        isinstance(noise_multiplier, (int, float))
        and math.isfinite(noise_multiplier)
        and noise_multiplier >= 0
    ):
        raise InvalidPrivacyParameter(
            f"noise_multiplier must be a finite number >= 0; got {noise_multiplier!r}"
        )
    if not (0.0 < float(sample_rate) <= 1.0):
        raise InvalidPrivacyParameter(f"sample_rate must be in (0, 1]; got {sample_rate!r}")
    check_range(
        "delta",
        delta,
        0.0,
        1.0,
        lo_inclusive=False,
        hi_inclusive=False,
        error=InvalidPrivacyParameter,
    )
    if steps is None:
        return None
    try:
        eps = epsilon_for(
            [(float(noise_multiplier), float(sample_rate), int(steps))], delta, accountant
        ).epsilon
    except PrivnlpError:
        raise
    except Exception as e:  # noqa: BLE001
        raise InvalidPrivacyParameter(
            f"the accountant ({REPORTED[accountant]}) cannot evaluate the planned run "
            f"(sigma={noise_multiplier}, q={sample_rate}, steps={steps}, delta={delta}): "
            f"{type(e).__name__}: {e}"
        ) from e
    if math.isnan(eps):
        raise InvalidPrivacyParameter(
            f"the accountant returned nan for sigma={noise_multiplier}, q={sample_rate}, "
            f"steps={steps}, delta={delta}"
        )
    return eps


def epsilon_no_amplification(runs: Iterable[Any], delta: float) -> float:
    """Epsilon without privacy amplification by sampling (what a shuffled / fixed-size loader can
    claim without extra assumptions): every step is a full-batch Gaussian mechanism with sensitivity C.
    The composition of Gaussians with multipliers sigma_t is one Gaussian with
    ``(sum_t sigma_t^-2)^(-1/2)``; its epsilon is computed with dp_accounting's PLD accountant.

    Args:
        runs: :class:`LedgerRun` objects or ``(noise_multiplier, sample_rate, steps)`` tuples; the sample
            rates are ignored.
        delta: the target delta, in (0, 1).

    Returns:
        Epsilon at ``delta``: 0 for an empty ledger, ``inf`` if any run has sigma <= 0.
    """
    rt = _normalise_runs(runs)
    if not rt:
        return 0.0
    if any(s <= 0 for s, _, _ in rt):
        return math.inf
    inv = sum(n / (s * s) for s, _, n in rt)
    return gaussian_epsilon(1.0 / math.sqrt(inv), delta)


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact epsilon of the Gaussian mechanism (sensitivity 1, std ``noise_multiplier``) at ``delta``
    (Balle & Wang 2018, analytic Gaussian): delta(eps) = Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s).
    Written by hand (a closed form + bisection) because dp_accounting's PLD discretisation is slow
    for the small effective sigmas of many composed steps.

    Args:
        noise_multiplier: the Gaussian std relative to the sensitivity; > 0.
        delta: the target delta, in (0, 1).

    Returns:
        The smallest epsilon with delta(epsilon) <= ``delta`` (``inf`` beyond 1e8).
    """
    from scipy.stats import norm

    s = float(noise_multiplier)

    def delta_of(eps: float) -> float:
        return float(norm.cdf(0.5 / s - eps * s) - math.exp(eps + norm.logcdf(-0.5 / s - eps * s)))

    if delta_of(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while delta_of(hi) > delta:
        lo, hi = hi, hi * 2
        if hi > 1e8:
            return math.inf
    for _ in range(100):
        mid = (lo + hi) / 2
        if delta_of(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = "prv",
    *,
    tolerance: float = 0.01,
) -> float:
    """The smallest noise multiplier (up to ``tolerance`` relative in epsilon) such that ``steps``
    Poisson-subsampled Gaussian steps at ``sample_rate`` stay within ``target_epsilon`` under the
    reported accountant (see the module docstring).

    Args:
        target_epsilon: the epsilon to stay within; > 0 and finite.
        delta: the target delta, in (0, 1).
        sample_rate: q, the Poisson sampling probability, in (0, 1].
        steps: the number of training steps; an integer >= 1.
        accountant: ``"prv"`` or ``"rdp"`` (see the module docstring).
        tolerance: relative slack in epsilon at which the search stops (0.01 = within 1% below the target).

    Returns:
        A noise multiplier whose epsilon is <= ``target_epsilon`` (never above it).

    Raises:
        InvalidPrivacyParameter: ``target_epsilon``, ``sample_rate`` or ``delta`` out of range, or the target
            is unreachable with sigma <= 1e5.
        InvalidArgument: ``steps`` is not an integer >= 1, or unknown ``accountant``.
    """
    check_positive("target_epsilon", target_epsilon, error=InvalidPrivacyParameter)
    check_range(
        "sample_rate", sample_rate, 0.0, 1.0, lo_inclusive=False, error=InvalidPrivacyParameter
    )
    check_range("steps", steps, 1, math.inf, integer=True)

    def eps(s: float) -> float:
        return epsilon_for([(s, sample_rate, int(steps))], delta, accountant).epsilon

    return bisect_noise_multiplier(
        eps,
        target_epsilon,
        tolerance=tolerance,
        max_sigma=1e5,
        iters=60,
        unreachable=f"target_epsilon={target_epsilon} is unreachable for delta={delta}, sample_rate={sample_rate}, "
        f"steps={steps} (noise multiplier > 1e5)",
    )


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


@dataclass
class DPLedger:
    """Run-length ledger of Poisson-subsampled Gaussian steps (the persisted source of truth).

    Mutable by design (it is appended to during training); ``to_dict`` / ``from_dict`` round-trip
    exactly, so a resumed run reproduces epsilon bit for bit.

    Attributes:
        runs: the recorded runs, in order; consecutive steps with the same ``(sigma, q)`` are merged.

    Raises:
        InvalidArgument: (``from_dict``) the dict is not in the ``privnlp.dp_ledger/1`` format.
    """

    runs: list[LedgerRun] = field(default_factory=list)

    def record(self, noise_multiplier: float, sample_rate: float, count: int = 1) -> None:
        s, q = float(noise_multiplier), float(sample_rate)
        if self.runs and self.runs[-1].noise_multiplier == s and self.runs[-1].sample_rate == q:
            last = self.runs[-1]
            self.runs[-1] = LedgerRun(s, q, last.steps + int(count))
        else:
            self.runs.append(LedgerRun(s, q, int(count)))

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.runs)

    def as_tuple(self) -> tuple[tuple[float, float, int], ...]:
        return _normalise_runs(self.runs)

    def opacus_history(self) -> list[tuple[float, float, int]]:
        """The equivalent opacus accountant ``history``."""
        return [tuple(r) for r in self.as_tuple()]  # type: ignore[misc]

    def dp_event(self):
        """The dp_accounting ``DpEvent`` of everything recorded."""
        return _dp_event(self.as_tuple())

    def epsilon(
        self, delta: float, accountant: str = "prv", *, diagnostics: bool = False
    ) -> EpsilonEstimate:
        return epsilon_for(self.as_tuple(), delta, accountant, diagnostics=diagnostics)

    def epsilon_no_amplification(self, delta: float) -> float:
        return epsilon_no_amplification(self.as_tuple(), delta)

    def cross_check(
        self, delta: float, accountant: str = "prv", *, rtol: float | None = None
    ) -> EpsilonEstimate:
        """The reported epsilon plus every accountant as a diagnostic. Never raises on disagreement (a
        finished run is never thrown away): a gap above ``rtol`` between opacus and the reported value is
        recorded in ``diagnostics["cross_check"]`` (and logged)."""
        est = self.epsilon(delta, accountant, diagnostics=True)
        rtol = CROSS_CHECK_RTOL[accountant] if rtol is None else rtol
        diag = dict(est.diagnostics)
        gap = est.relative_gap
        diag["relative_gap"] = gap
        if gap > rtol:
            msg = (
                f"opacus.{accountant} epsilon={est.opacus:.6g} vs reported {est.source} epsilon="
                f"{est.epsilon:.6g} (relative gap {gap:.3g} > {rtol}); diagnostic only: opacus' RDP orders stop "
                "at 63 (loose at large noise) and PRV/PLD discretise differently"
            )
            diag["cross_check"] = msg

            logging.getLogger("privnlp.accounting").info(msg)
        return EpsilonEstimate(
            est.epsilon, est.opacus, est.dp_accounting, est.accountant, est.delta, est.source, diag
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": "privnlp.dp_ledger/1",
            "runs": [r.to_dict() for r in self.runs],
        }
        try:
            d["dp_event"] = repr(self.dp_event().to_named_tuple())
        except Exception:  # pragma: no cover - older dp_accounting
            d["dp_event"] = repr(self.dp_event())
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DPLedger:
        if d.get("format") != "privnlp.dp_ledger/1":
            raise InvalidArgument(
                f"ledger format must be 'privnlp.dp_ledger/1'; got {d.get('format')!r}"
            )
        return cls(
            [
                LedgerRun(float(r["noise_multiplier"]), float(r["sample_rate"]), int(r["steps"]))
                for r in d["runs"]
            ]
        )


@dataclass
class BudgetGuard:
    """Refuses the step that would take the ledger above ``target_epsilon`` (checked before the step).

    The number of further steps allowed with the current ``(sigma, q)`` is found once by an
    exponential + binary search over the accountants (epsilon is monotone in steps) and cached.

    Attributes:
        ledger: the ledger the guarded steps are recorded in.
        target_epsilon: the budget (``None`` = no budget: every step is allowed).
        delta: the delta at which epsilon is computed, in (0, 1).
        accountant: ``"prv"`` or ``"rdp"`` (see the module docstring).

    Raises:
        PrivacyBudgetExceeded: (``check_step``) one more step would exceed ``target_epsilon``; the
            exception's ``spent`` and ``target`` hold the epsilon spent so far and the budget.
    """

    ledger: DPLedger
    target_epsilon: float | None
    delta: float
    accountant: str = "prv"
    _cache: dict = field(default_factory=dict, repr=False)
    _bounds: dict = field(default_factory=dict, repr=False)

    def _max_count(self, base: tuple, s: float, q: float) -> int:
        key = (base, s, q)
        if key in self._cache:
            return self._cache[key]

        def ok(k: int) -> bool:
            return (
                epsilon_for(base + ((s, q, k),), self.delta, self.accountant).epsilon
                <= self.target_epsilon
            )

        if not ok(1):
            res = 0
        else:
            lo, hi = 1, 2
            while ok(hi):
                lo, hi = hi, hi * 2
                if hi > 1 << 40:  # pragma: no cover
                    break
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if ok(mid):
                    lo = mid
                else:
                    hi = mid
            res = lo
        self._cache[key] = res
        return res

    def _split(self, s: float, q: float) -> tuple[tuple, int]:
        runs = self.ledger.as_tuple()
        if runs and runs[-1][0] == s and runs[-1][1] == q:
            return runs[:-1], runs[-1][2]
        return runs, 0

    def allowed_steps(self, noise_multiplier: float, sample_rate: float) -> float:
        """How many more steps with these parameters fit in the budget (inf without a target)."""
        if self.target_epsilon is None:
            return math.inf
        s, q = float(noise_multiplier), float(sample_rate)
        if s <= 0:
            return 0
        base, trailing = self._split(s, q)
        return max(0, self._max_count(base, s, q) - trailing)

    def _fits(self, base: tuple, s: float, q: float, n: int) -> bool:
        """Whether a trailing run of ``n`` steps fits; lazily tightens cached [ok, bad) bounds with a
        doubling probe so that a long run costs O(log steps) accountant calls in total."""
        key = (base, s, q)
        if key in self._cache:
            return n <= self._cache[key]
        lo, hi = self._bounds.get(key, (0, math.inf))
        if n <= lo:
            return True
        if n >= hi:
            return False

        def ok(k: int) -> bool:
            return (
                epsilon_for(base + ((s, q, k),), self.delta, self.accountant).epsilon
                <= self.target_epsilon
            )

        probe = n if lo == 0 else max(n, 2 * lo)
        if probe < hi and ok(probe):
            self._bounds[key] = (probe, hi)
            return True
        if probe != n:
            hi = min(hi, probe)
            if ok(n):
                self._bounds[key] = (n, hi)
                return True
        self._bounds[key] = (lo, n)
        return False

    def check_step(self, noise_multiplier: float, sample_rate: float) -> None:
        """Raise :class:`PrivacyBudgetExceeded` if one more step would exceed the target."""
        if self.target_epsilon is None:
            return
        s, q = float(noise_multiplier), float(sample_rate)
        base, trailing = self._split(s, q)
        if s > 0 and self._fits(base, s, q, trailing + 1):
            return
        spent = self.ledger.epsilon(self.delta, self.accountant).epsilon
        raise PrivacyBudgetExceeded(
            f"refusing DP-SGD step {self.ledger.steps + 1}: it would exceed the target epsilon "
            f"{self.target_epsilon} at delta={self.delta:.3g} (spent so far: {spent:.4g} after "
            f"{self.ledger.steps} steps, {REPORTED[self.accountant]})",
            spent=spent,
            target=self.target_epsilon,
        )

    def record(self, noise_multiplier: float, sample_rate: float) -> None:
        self.ledger.record(noise_multiplier, sample_rate, 1)
