"""The DP-SGD ledger, epsilon computation (opacus + dp_accounting, cross-checked), calibration and the
hard budget guard.

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (DP-SGD; noise multiplier sigma with P
shards == one shard with sigma*sqrt(P)). Accountants: opacus ``RDPAccountant`` / ``PRVAccountant``
and Google's ``dp_accounting`` (RDP, PLD). Written by hand here: only the run-length ledger, the
max() of the two accountants and the step-budget search (neither library has a hard budget).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Mapping

from privnlp.core.errors import (InvalidArgument, InvalidPrivacyParameter, PrivacyBudgetExceeded,
                                 check_positive, check_range)

__all__ = ["ACCOUNTANTS", "bisect_noise_multiplier", "LedgerRun", "DPLedger", "EpsilonEstimate", "epsilon_for", "epsilon_no_amplification", "gaussian_epsilon",
           "calibrate_noise_multiplier", "default_delta", "check_delta", "effective_noise_multiplier",
           "BudgetGuard"]

#: opacus accountant name -> the dp_accounting accountant kept in parallel
ACCOUNTANTS = {"prv": "pld", "rdp": "rdp"}
#: relative disagreement between opacus and dp_accounting tolerated by :meth:`DPLedger.cross_check`
# The parallel dp_accounting RDP ledger uses integer orders only (a valid but looser bound than
# opacus' fractional orders): at few steps / small epsilon the optimum order is fractional and the
# two differ by a few percent (3.3% seen at 5 steps, q=0.2, sigma~1.2). The claim takes the max of
# the two, so the cross-check only has to catch bugs, not rounding of the order grid.
CROSS_CHECK_RTOL = {"prv": 0.10, "rdp": 0.10}
_RDP_ORDERS = tuple(range(2, 65)) + (80, 96, 128, 160, 192, 256, 384, 512, 1024)


def default_delta(n: int) -> float:
    """The default delta ``min(1e-5, N**-1.1)`` for a dataset of ``n`` records."""
    check_range("dataset size N", n, 1, math.inf, integer=True)
    return float(min(1e-5, float(n) ** -1.1))


def check_delta(delta: float, n: int | None) -> float:
    """Validate delta: in (0, 1) and strictly below 1/N (delta >= 1/N allows releasing a record)."""
    check_range("delta", delta, 0.0, 1.0, lo_inclusive=False, hi_inclusive=False, error=InvalidPrivacyParameter)
    if n is not None and delta >= 1.0 / n:
        raise InvalidPrivacyParameter(
            f"delta must be in (0, 1/N) = (0, {1.0 / n:.3g}) for a dataset of N={n} records "
            f"(delta >= 1/N permits publishing a whole record); got {delta!r}; the default is min(1e-5, N^-1.1)")
    return float(delta)


def effective_noise_multiplier(per_shard_noise_multiplier: float, num_shards: int) -> float:
    """DP-BERT Eq. (3): P shards each adding N(0, sigma^2 C^2) to their sum, averaged across shards,
    equal one unsharded DP-SGD step with noise multiplier ``sigma * sqrt(P)``."""
    check_range("per_shard_noise_multiplier", per_shard_noise_multiplier, 0.0, math.inf, error=InvalidPrivacyParameter)
    check_range("num_shards", num_shards, 1, math.inf, integer=True)
    return float(per_shard_noise_multiplier) * math.sqrt(int(num_shards))


@dataclass(frozen=True)
class LedgerRun:
    """``steps`` consecutive Poisson-subsampled Gaussian steps with the same parameters."""

    noise_multiplier: float
    sample_rate: float
    steps: int

    def to_dict(self) -> dict[str, Any]:
        return {"noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate, "steps": self.steps}


@dataclass(frozen=True)
class EpsilonEstimate:
    """Epsilon of a ledger at ``delta``: the opacus value, the dp_accounting value and their max."""

    epsilon: float
    opacus: float
    dp_accounting: float
    accountant: str
    delta: float

    @property
    def relative_gap(self) -> float:
        hi, lo = max(self.opacus, self.dp_accounting), min(self.opacus, self.dp_accounting)
        if math.isinf(hi):
            return 0.0 if math.isinf(lo) else math.inf
        return (hi - lo) / hi if hi > 0 else 0.0


def _check_accountant(accountant: str) -> str:
    if accountant not in ACCOUNTANTS:
        raise InvalidArgument(f"accountant must be one of {sorted(ACCOUNTANTS)}; got {accountant!r}")
    return accountant


def _dp_event(runs: tuple[tuple[float, float, int], ...]):
    from dp_accounting import dp_event as de

    events = [de.SelfComposedDpEvent(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(s)), n) for s, q, n in runs]
    return de.ComposedDpEvent(events)


@lru_cache(maxsize=4096)
def _eps_opacus(runs: tuple[tuple[float, float, int], ...], delta: float, accountant: str) -> float:
    from opacus.accountants import PRVAccountant, RDPAccountant

    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    acc.history = [(float(s), float(q), int(n)) for s, q, n in runs]
    return float(acc.get_epsilon(delta=delta))


@lru_cache(maxsize=4096)
def _eps_dp_accounting(runs: tuple[tuple[float, float, int], ...], delta: float, accountant: str) -> float:
    import logging

    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)  # "_compute_log_a_frac failed to converge" just drops an order
    try:
        return _eps_dp_accounting_inner(runs, delta, accountant)
    finally:
        absl_logger.setLevel(level)


def _eps_dp_accounting_inner(runs: tuple[tuple[float, float, int], ...], delta: float, accountant: str) -> float:
    if accountant == "rdp":
        from dp_accounting.rdp import rdp_privacy_accountant as rdpa

        # integer orders only: closed-form and fast (fractional orders iterate up to 1000 times and may
        # not converge for large q); still a valid RDP bound, within the cross-check tolerance
        acc = rdpa.RdpAccountant(orders=_RDP_ORDERS)
    else:
        from dp_accounting.pld import pld_privacy_accountant as plda

        acc = plda.PLDAccountant()
    acc.compose(_dp_event(runs))
    return float(acc.get_epsilon(delta))


def _normalise_runs(runs: Iterable[Any]) -> tuple[tuple[float, float, int], ...]:
    out = []
    for r in runs:
        s, q, n = (r.noise_multiplier, r.sample_rate, r.steps) if isinstance(r, LedgerRun) else r
        if int(n) > 0:
            out.append((float(s), float(q), int(n)))
    return tuple(out)


def epsilon_for(runs: Iterable[Any], delta: float, accountant: str = "prv") -> EpsilonEstimate:
    """Epsilon of a sequence of runs ``(noise_multiplier, sample_rate, steps)`` at ``delta``.

    Both the opacus accountant and the parallel dp_accounting one are evaluated; ``epsilon`` is the
    larger (conservative) value.
    """
    _check_accountant(accountant)
    check_range("delta", delta, 0.0, 1.0, lo_inclusive=False, hi_inclusive=False, error=InvalidPrivacyParameter)
    rt = _normalise_runs(runs)
    if not rt:
        return EpsilonEstimate(0.0, 0.0, 0.0, accountant, float(delta))
    if any(s <= 0 and q > 0 for s, q, _ in rt):
        return EpsilonEstimate(math.inf, math.inf, math.inf, accountant, float(delta))
    a = _eps_opacus(rt, float(delta), accountant)
    b = _eps_dp_accounting(rt, float(delta), accountant)
    return EpsilonEstimate(max(a, b), a, b, accountant, float(delta))


def epsilon_no_amplification(runs: Iterable[Any], delta: float) -> float:
    """Epsilon without privacy amplification by sampling (what a shuffled / fixed-size loader can
    claim without extra assumptions): every step is a full-batch Gaussian mechanism with sensitivity C.
    The composition of Gaussians with multipliers sigma_t is one Gaussian with
    ``(sum_t sigma_t^-2)^(-1/2)``; its epsilon is computed with dp_accounting's PLD accountant."""
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
    for the small effective sigmas of many composed steps."""
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


def calibrate_noise_multiplier(target_epsilon: float, delta: float, sample_rate: float, steps: int,
                               accountant: str = "prv", *, tolerance: float = 0.01) -> float:
    """The smallest noise multiplier (up to ``tolerance`` relative in epsilon) such that ``steps``
    Poisson-subsampled Gaussian steps at ``sample_rate`` stay within ``target_epsilon`` under both
    the opacus and the dp_accounting accountant."""
    check_positive("target_epsilon", target_epsilon, error=InvalidPrivacyParameter)
    check_range("sample_rate", sample_rate, 0.0, 1.0, lo_inclusive=False, error=InvalidPrivacyParameter)
    check_range("steps", steps, 1, math.inf, integer=True)

    def eps(s: float) -> float:
        return epsilon_for([(s, sample_rate, int(steps))], delta, accountant).epsilon

    return bisect_noise_multiplier(
        eps, target_epsilon, tolerance=tolerance, max_sigma=1e5, iters=60,
        unreachable=f"target_epsilon={target_epsilon} is unreachable for delta={delta}, sample_rate={sample_rate}, "
                    f"steps={steps} (noise multiplier > 1e5)")


def bisect_noise_multiplier(eps: Any, target_epsilon: float, *, tolerance: float, max_sigma: float, iters: int,
                            unreachable: str, rel_width: float = 0.0) -> float:
    """The smallest noise multiplier ``s`` (up to ``tolerance`` relative in epsilon, or a bracket
    narrower than ``rel_width * s``) with ``eps(s) <= target_epsilon``, for a decreasing ``eps``:
    doubling to bracket, then bisection. Raises :class:`InvalidPrivacyParameter` (``unreachable``)
    past ``max_sigma``. The answer is always on the safe side (``eps(answer) <= target``)."""
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

    def epsilon(self, delta: float, accountant: str = "prv") -> EpsilonEstimate:
        return epsilon_for(self.as_tuple(), delta, accountant)

    def epsilon_no_amplification(self, delta: float) -> float:
        return epsilon_no_amplification(self.as_tuple(), delta)

    def cross_check(self, delta: float, accountant: str = "prv", *, rtol: float | None = None) -> EpsilonEstimate:
        """Compute epsilon with opacus and dp_accounting and raise if they disagree beyond ``rtol``."""
        est = self.epsilon(delta, accountant)
        rtol = CROSS_CHECK_RTOL[accountant] if rtol is None else rtol
        if est.relative_gap > rtol:
            raise RuntimeError(f"accountant cross-check failed: opacus {accountant} eps={est.opacus:.6g} vs "
                               f"dp_accounting {ACCOUNTANTS[accountant]} eps={est.dp_accounting:.6g} "
                               f"(relative gap {est.relative_gap:.3g} > {rtol})")
        return est

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": "privnlp.dp_ledger/1", "runs": [r.to_dict() for r in self.runs]}
        try:
            d["dp_event"] = repr(self.dp_event().to_named_tuple())
        except Exception:  # pragma: no cover - older dp_accounting
            d["dp_event"] = repr(self.dp_event())
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DPLedger":
        if d.get("format") != "privnlp.dp_ledger/1":
            raise InvalidArgument(f"ledger format must be 'privnlp.dp_ledger/1'; got {d.get('format')!r}")
        return cls([LedgerRun(float(r["noise_multiplier"]), float(r["sample_rate"]), int(r["steps"])) for r in d["runs"]])


@dataclass
class BudgetGuard:
    """Refuses the step that would take the ledger above ``target_epsilon`` (checked before the step).

    The number of further steps allowed with the current ``(sigma, q)`` is found once by an
    exponential + binary search over the accountants (epsilon is monotone in steps) and cached.
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
            return epsilon_for(base + ((s, q, k),), self.delta, self.accountant).epsilon <= self.target_epsilon

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
            return epsilon_for(base + ((s, q, k),), self.delta, self.accountant).epsilon <= self.target_epsilon

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
            f"{self.ledger.steps} steps, accountant {self.accountant} + dp_accounting)",
            spent=spent, target=self.target_epsilon)

    def record(self, noise_multiplier: float, sample_rate: float) -> None:
        self.ledger.record(noise_multiplier, sample_rate, 1)
