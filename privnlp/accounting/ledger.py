"""THE ledger of every DP mechanism (:class:`DPLedger`: DP-SGD steps, DP-FedAvg rounds and client
DP-SGD, DP-vocabulary releases, metric-DP text passes, each with its adversaries), DP-SGD's epsilon
computation, calibration and the hard budget guard.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np
from dp_accounting import dp_event as de
from dp_accounting.pld import pld_privacy_accountant as plda
from dp_accounting.rdp import rdp_privacy_accountant as rdpa

from privnlp.core.claims import AdversaryBound
from privnlp.core.errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    PrivacyBudgetExceeded,
    PrivnlpError,
    check_positive,
    check_range,
)

from .adversaries import (
    compose_adversary_bounds,
    dp_sgd_adversary_bounds,
    metric_dp_adversary_bounds,
    vocab_adversary_bounds,
)
from .events import (
    RDP_ORDERS,
    LedgerRun,
    MetricDPRun,
    ThresholdRelease,
    bisect_noise_multiplier,
    check_delta,
    gaussian_epsilon,
    normalise_runs,
    quiet_absl,
)
from .federated import (
    SAMPLINGS,
    RoundRun,
    no_amplification_epsilon,
    round_event,
    rounds_bounds,
    rounds_epsilon,
)

__all__ = [
    "ACCOUNTANTS",
    "REPORTED",
    "RDP_ORDERS",
    "check_accounting_configuration",
    "bisect_noise_multiplier",
    "LedgerRun",
    "DPLedger",
    "LEDGER_FORMAT",
    "LedgerEvent",
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
class EpsilonEstimate:
    """Epsilon of a ledger's DP-SGD steps at ``delta``.

    Attributes:
        epsilon: the reported value (dp_accounting, see the module docstring); equals ``dp_accounting``.
        opacus: opacus' value of the same accountant name (a diagnostic, ``nan`` when not computed).
        dp_accounting: dp_accounting's value (the reported one).
        accountant: ``"prv"`` or ``"rdp"``.
        delta: the delta it is stated at.
        source: what was reported, in words (:data:`REPORTED`).
        diagnostics: the other accountants' values, skipped / failed diagnostics with their reason.
    """

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
    # opacus imports torch: only the optional diagnostic needs it (the reported epsilon is dp_accounting's)
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
    # opacus imports torch: only the optional diagnostic needs it
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


@lru_cache(maxsize=8192)
def _rdp_one_step(sigma: float, q: float) -> tuple[float, ...]:
    """RDP curve (over :data:`RDP_ORDERS`) of ONE Poisson-subsampled Gaussian step (cached: RDP composes
    linearly, so a run of n steps is n times this)."""
    with quiet_absl():
        acc = rdpa.RdpAccountant(orders=list(RDP_ORDERS))
        acc.compose(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)))
        return tuple(float(v) for v in np.asarray(acc._rdp))


@lru_cache(maxsize=4096)
def _eps_rdp_wide(runs: tuple[tuple[float, float, int], ...], delta: float) -> float:
    total = np.zeros(len(RDP_ORDERS))
    for s, q, n in runs:
        total = total + n * np.asarray(_rdp_one_step(s, q))
    with quiet_absl():
        eps, _ = rdpa.compute_epsilon(list(RDP_ORDERS), list(total), delta)
    return float(eps)


@lru_cache(maxsize=4096)
def _eps_pld(runs: tuple[tuple[float, float, int], ...], delta: float) -> float:
    with quiet_absl():
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
    check_delta(delta, None)
    rt = normalise_runs(runs)
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
    check_delta(delta, None)
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
    rt = normalise_runs(runs)
    if not rt:
        return 0.0
    if any(s <= 0 for s, _, _ in rt):
        return math.inf
    inv = sum(n / (s * s) for s, _, n in rt)
    return gaussian_epsilon(1.0 / math.sqrt(inv), delta)


@lru_cache(maxsize=256)  # a pure function of its arguments; a hyperparameter search repeats them
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


#: the ledger's persisted format; :meth:`DPLedger.from_dict` also reads ``privnlp.dp_ledger/1`` (DP-SGD
#: steps only) and ``privnlp.fed_ledger/1`` (the federated ledger before issue 28 item 4)
LEDGER_FORMAT = "privnlp.dp_ledger/2"
_OLD_FORMATS = ("privnlp.dp_ledger/1", "privnlp.fed_ledger/1")

#: an event the ledger records
LedgerEvent = LedgerRun | RoundRun | ThresholdRelease | MetricDPRun


@dataclass
class DPLedger:
    """THE ledger of every DP mechanism of privnlp (the persisted source of truth of a claim).

    One run-length record per kind of event, each accounted with dp_accounting over one RDP order list
    (:data:`RDP_ORDERS`) and one analytic-Gaussian conversion:

    * ``runs``: central DP-SGD steps (:class:`LedgerRun`, Poisson-subsampled Gaussian; :meth:`record`,
      :meth:`epsilon`, :class:`BudgetGuard` for the per-step check);
    * ``round_runs``: DP-FedAvg rounds (:class:`~privnlp.accounting.federated.RoundRun`, user level;
      :meth:`record_round`, :meth:`check_round`, :meth:`user_epsilon`) and ``client_ledgers``: each
      client's local DP-SGD steps, one :class:`DPLedger` per client (record level, :meth:`record_epsilon`);
    * ``releases``: DP-vocabulary histogram releases (:class:`ThresholdRelease`; :meth:`release_epsilon`);
    * ``metric_runs``: local metric-DP text passes (:class:`MetricDPRun`; :meth:`metric_epsilon`).

    The adversary dimension: :meth:`adversary_bounds` gives the (epsilon, delta) against each adversary
    (DP-FedAvg's server and eavesdropper see the selection: no amplification; an observer of the
    released models gets the amplified rounds; DP-SGD's adversaries do not see the Poisson sample);
    :meth:`headline_epsilon` is the strongest adversary's. Components recorded in the same ledger compose
    by basic composition (delta split evenly between the Gaussian components after the releases' own
    deltas). Metric-DP passes are a different guarantee (epsilon per unit of distance, delta 0) and are
    reported apart (:meth:`metric_adversary_bounds`).

    One budget check for every kind: :meth:`check` (:meth:`charge` = check + record) refuses the event
    that would take the headline (or, for metric-DP, the composed per-word) epsilon above the target,
    before anything is recorded. :class:`BudgetGuard` is its cached fast path for DP-SGD steps.

    Mutable by design (appended to during a run); ``to_dict`` / ``from_dict`` round-trip exactly, so a
    resumed run reproduces epsilon bit for bit; ``from_dict`` also reads the old formats.

    Attributes:
        runs: DP-SGD steps; consecutive steps with the same ``(sigma, q)`` are merged.
        round_runs: DP-FedAvg rounds; consecutive identical rounds merged; one sampling scheme per ledger.
        client_ledgers: client id -> :class:`DPLedger` of its local DP-SGD steps.
        releases: DP-vocabulary releases; consecutive identical releases merged.
        metric_runs: metric-DP passes; consecutive identical passes merged.

    Raises:
        InvalidArgument: a round with an unknown sampling scheme or one other than the ledger's;
            (``from_dict``) a dict in none of the known formats.
        PrivacyBudgetExceeded: (:meth:`check`, :meth:`charge`, :meth:`check_round`) the event would
            exceed the target.
    """

    runs: list[LedgerRun] = field(default_factory=list)
    round_runs: list[RoundRun] = field(default_factory=list)
    client_ledgers: dict[str, DPLedger] = field(default_factory=dict)
    releases: list[ThresholdRelease] = field(default_factory=list)
    metric_runs: list[MetricDPRun] = field(default_factory=list)

    # -- recording --------------------------------------------------------------------------
    def record(self, noise_multiplier: float, sample_rate: float, count: int = 1) -> None:
        """Record ``count`` DP-SGD steps of noise multiplier sigma and Poisson rate q."""
        s, q = float(noise_multiplier), float(sample_rate)
        if self.runs and self.runs[-1].noise_multiplier == s and self.runs[-1].sample_rate == q:
            last = self.runs[-1]
            self.runs[-1] = LedgerRun(s, q, last.steps + int(count))
        else:
            self.runs.append(LedgerRun(s, q, int(count)))

    def add(self, event: LedgerEvent) -> None:
        """Record one event of any kind (no budget check: :meth:`charge` checks first).

        Raises:
            InvalidArgument: an unknown event type, or a round whose sampling differs from the ledger's.
        """
        if isinstance(event, LedgerRun):
            if event.steps > 0:
                self.record(event.noise_multiplier, event.sample_rate, event.steps)
        elif isinstance(event, RoundRun):
            self._check_sampling(event.sampling)
            _merge(self.round_runs, event, "rounds")
        elif isinstance(event, ThresholdRelease):
            _merge(self.releases, event, "releases")
        elif isinstance(event, MetricDPRun):
            _merge(self.metric_runs, event, "releases")
        else:
            raise InvalidArgument(
                "event must be a LedgerRun, RoundRun, ThresholdRelease or MetricDPRun; got "
                f"{type(event).__name__}"
            )

    def record_round(
        self, sampling: str, num_users: int, clients_per_round: float, noise_multiplier: float
    ) -> None:
        """Record one DP-FedAvg round (``sampling`` ``"fixed"`` or ``"poisson"``, N, m, z)."""
        self.add(
            RoundRun(sampling, int(num_users), float(clients_per_round), float(noise_multiplier), 1)
        )

    def record_client_steps(
        self, client_id: str, noise_multiplier: float, sample_rate: float, steps: int
    ) -> None:
        """Record ``steps`` local DP-SGD steps of one federated client (record level)."""
        led = self.client_ledgers.setdefault(str(client_id), DPLedger())
        if steps > 0:
            led.record(noise_multiplier, sample_rate, int(steps))

    def record_release(self, release: ThresholdRelease) -> None:
        """Record a DP-vocabulary histogram release."""
        self.add(release)

    def record_metric(self, epsilon: float, metric: str, words: int = 1) -> None:
        """Record one metric-DP pass over a dataset (every record perturbed once, at most ``words``
        words per record, each word ``epsilon * d_metric``-private)."""
        self.add(MetricDPRun(float(epsilon), str(metric), int(words), 1))

    def copy(self) -> DPLedger:
        """An independent copy (the event records are frozen; the lists and client ledgers are copied)."""
        return DPLedger(
            list(self.runs),
            list(self.round_runs),
            {k: v.copy() for k, v in self.client_ledgers.items()},
            list(self.releases),
            list(self.metric_runs),
        )

    # -- DP-SGD steps ---------------------------------------------------------------------
    @property
    def steps(self) -> int:
        """The number of DP-SGD steps recorded."""
        return sum(r.steps for r in self.runs)

    def as_tuple(self) -> tuple[tuple[float, float, int], ...]:
        return normalise_runs(self.runs)

    def opacus_history(self) -> list[tuple[float, float, int]]:
        """The equivalent opacus accountant ``history``."""
        return [tuple(r) for r in self.as_tuple()]  # type: ignore[misc]

    def dp_event(self) -> Any:
        """The dp_accounting ``DpEvent`` of the DP-SGD steps and the DP-FedAvg rounds recorded (a
        record: fixed-size rounds use the replace-one relation, steps add/remove; the vocabulary
        releases have no dp_accounting event and are composed by :meth:`release_epsilon`)."""
        steps = _dp_event(self.as_tuple()) if self.runs or not self.round_runs else None
        if not self.round_runs:
            return steps
        rounds = de.ComposedDpEvent(
            [
                de.SelfComposedDpEvent(
                    round_event(r.sampling, r.num_users, r.clients_per_round, r.noise_multiplier),
                    r.rounds,
                )
                for r in self.round_runs
            ]
        )
        return rounds if steps is None else de.ComposedDpEvent([steps, rounds])

    def epsilon(
        self, delta: float, accountant: str = "prv", *, diagnostics: bool = False
    ) -> EpsilonEstimate:
        """Epsilon of the DP-SGD steps at ``delta`` (see :func:`epsilon_for`)."""
        return epsilon_for(self.as_tuple(), delta, accountant, diagnostics=diagnostics)

    def epsilon_no_amplification(self, delta: float) -> float:
        """Epsilon of the DP-SGD steps without amplification by sampling."""
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

    # -- DP-FedAvg rounds (user level) and client DP-SGD (record level) ---------------------
    @property
    def rounds(self) -> int:
        """The number of DP-FedAvg rounds recorded."""
        return sum(r.rounds for r in self.round_runs)

    @property
    def sampling(self) -> str | None:
        """The rounds' sampling scheme (``None`` before the first round)."""
        return self.round_runs[0].sampling if self.round_runs else None

    def _check_sampling(self, sampling: str) -> None:
        if sampling not in SAMPLINGS:
            raise InvalidArgument(f"sampling must be one of {SAMPLINGS}; got {sampling!r}")
        if self.round_runs and self.round_runs[0].sampling != sampling:
            raise InvalidArgument(
                f"sampling={sampling!r} cannot be composed with the ledger's "
                f"{self.round_runs[0].sampling!r} rounds (different neighbouring relations)"
            )

    def _round_tuples(self) -> tuple[tuple[str, int, float, float, int], ...]:
        return tuple(r.as_tuple() for r in self.round_runs)

    def user_epsilon(self, delta: float) -> float:
        """The rounds' headline user-level epsilon: against the strongest named adversary (the server,
        who sees the selection: no amplification). Budgets and refusals use it."""
        return no_amplification_epsilon(self._round_tuples(), float(delta))[0]

    def amplified_user_epsilon(self, delta: float) -> float:
        """The rounds' user-level epsilon amplified by user sampling (dp_accounting RDP): only against
        an observer of the released models who does not see the selection."""
        return rounds_epsilon(self._round_tuples(), float(delta))

    def epsilon_after(
        self,
        sampling: str,
        num_users: int,
        clients_per_round: float,
        noise_multiplier: float,
        delta: float,
        extra_rounds: int = 1,
    ) -> float:
        """The rounds' headline user-level epsilon if ``extra_rounds`` more rounds with these parameters
        were run."""
        after = self.copy()
        after.add(
            RoundRun(
                sampling,
                int(num_users),
                float(clients_per_round),
                float(noise_multiplier),
                int(extra_rounds),
            )
        )
        return after.user_epsilon(delta)

    def check_round(
        self,
        sampling: str,
        num_users: int,
        clients_per_round: float,
        noise_multiplier: float,
        delta: float,
        target_epsilon: float | None,
    ) -> None:
        """Raise :class:`PrivacyBudgetExceeded` *before* a round that would exceed ``target_epsilon``
        (:meth:`check` of one :class:`~privnlp.accounting.federated.RoundRun`)."""
        self.check(
            RoundRun(
                sampling, int(num_users), float(clients_per_round), float(noise_multiplier), 1
            ),
            target_epsilon,
            delta,
        )

    def record_epsilon(self, delta: float, accountant: str = "rdp") -> float | None:
        """Worst client's record-level epsilon from client DP-SGD (``None`` without client DP-SGD)."""
        if not self.client_ledgers:
            return None
        return max(led.epsilon(delta, accountant).epsilon for led in self.client_ledgers.values())

    # -- DP vocabulary releases / metric-DP passes ------------------------------------------
    def release_delta(self) -> float:
        """The delta the recorded vocabulary releases use (their calibrated deltas, added)."""
        return sum(r.delta * r.releases for r in self.releases)

    def release_epsilon(self) -> float:
        """Epsilon of the recorded vocabulary releases at :meth:`release_delta`: basic composition of
        each release's epsilon, derived from its released parameters (:meth:`ThresholdRelease.epsilon`)."""
        return sum(r.epsilon() * r.releases for r in self.releases)

    def metric_epsilon(self) -> float:
        """The per-word metric-DP epsilon of the recorded passes (passes over the same records add)."""
        return sum(r.epsilon * r.releases for r in self.metric_runs)

    def metric_record_epsilon(self) -> float:
        """The record-level factor: ``sum(epsilon * words)`` over the passes, so that two records at
        per-word distance at most D are ``metric_record_epsilon() * D``-indistinguishable."""
        return sum(r.epsilon * r.words * r.releases for r in self.metric_runs)

    def metric_adversary_bounds(
        self, *, threat_models: Sequence[Any] | None = None
    ) -> tuple[AdversaryBound, ...]:
        """The metric-DP passes' bound against each adversary (delta 0; ``()`` without passes)."""
        if not self.metric_runs:
            return ()
        metrics = sorted({r.metric for r in self.metric_runs})
        return metric_dp_adversary_bounds(
            epsilon=self.metric_epsilon(),
            metric="+".join(metrics),
            words=max(r.words for r in self.metric_runs),
            releases=sum(r.releases for r in self.metric_runs),
            threat_models=threat_models,
        )

    # -- every adversary --------------------------------------------------------------------
    def _delta_shares(self, delta: float | None) -> tuple[float, float]:
        """``(delta of the DP-SGD steps, delta of the rounds)``: what the releases' own deltas leave,
        split evenly between the Gaussian components present."""
        gauss = int(bool(self.as_tuple())) + int(bool(self._round_tuples()))
        if not gauss:
            return 0.0, 0.0
        if delta is None:
            raise InvalidPrivacyParameter(
                "delta is required for a ledger with DP-SGD steps or rounds"
            )
        check_delta(delta, None)
        rest = float(delta) - self.release_delta()
        if rest <= 0:
            raise InvalidPrivacyParameter(
                f"delta={delta:.3g} leaves nothing for the Gaussian components after the vocabulary "
                f"releases' delta {self.release_delta():.3g}"
            )
        return rest / gauss, rest / gauss

    def adversary_bounds(
        self,
        delta: float | None = None,
        *,
        accountant: str = "prv",
        poisson_sampling: bool = True,
        threat_models: Sequence[Any] | None = None,
    ) -> tuple[AdversaryBound, ...]:
        """The (epsilon, delta) against each adversary after everything recorded (metric-DP passes
        apart: :meth:`metric_adversary_bounds`).

        Args:
            delta: the claim's delta (required with DP-SGD steps or rounds; the releases' own deltas
                count against it; ``None`` for a release-only ledger: their delta).
            accountant: the DP-SGD steps' accountant (``"prv"`` or ``"rdp"``).
            poisson_sampling: whether the DP-SGD steps used Poisson sampling (``False``: no
                amplification claimed).
            threat_models: the mechanism's threat models, whose adversaries the DP-SGD steps and the
                vocabulary releases name (defaults: :data:`~privnlp.accounting.adversaries.DP_SGD_ADVERSARIES`,
                :data:`~privnlp.accounting.adversaries.VOCAB_ADVERSARIES`). DP-FedAvg rounds always name
                the server, the eavesdropper and the observer of the released models.

        Returns:
            One bound per adversary (``()`` for a ledger without (epsilon, delta) events); several
            components compose per adversary (:func:`~privnlp.accounting.adversaries.compose_adversary_bounds`).
        """
        d_steps, d_rounds = self._delta_shares(delta)
        comps: list[tuple[str, tuple[AdversaryBound, ...]]] = []
        if self.as_tuple():
            comps.append(
                (
                    "DP-SGD steps",
                    dp_sgd_adversary_bounds(
                        epsilon=self.epsilon(d_steps, accountant).epsilon,
                        delta=d_steps,
                        accountant=REPORTED[accountant],
                        poisson_sampling=poisson_sampling,
                        epsilon_no_amplification=None
                        if poisson_sampling
                        else self.epsilon_no_amplification(d_steps),
                        threat_models=threat_models,
                    ),
                )
            )
        if self._round_tuples():
            comps.append(("DP-FedAvg rounds", rounds_bounds(self._round_tuples(), d_rounds)))
        if self.releases:
            comps.append(
                (
                    "vocabulary releases",
                    vocab_adversary_bounds(
                        epsilon=self.release_epsilon(),
                        delta=self.release_delta(),
                        noise="+".join(sorted({r.noise for r in self.releases})),
                        releases=sum(r.releases for r in self.releases),
                        threat_models=threat_models,
                    ),
                )
            )
        return compose_adversary_bounds(comps)

    def headline_epsilon(self, delta: float | None = None, accountant: str = "prv") -> float:
        """The epsilon against the strongest named adversary (what budgets use): the max of
        :meth:`adversary_bounds`, computed without the amplified round RDP (never the maximum)."""
        d_steps, d_rounds = self._delta_shares(delta)
        eps = 0.0
        if self.as_tuple():
            eps += self.epsilon(d_steps, accountant).epsilon
        if self._round_tuples():
            eps += self.user_epsilon(d_rounds)
        return eps + self.release_epsilon()

    # -- the one budget check ---------------------------------------------------------------
    def check(
        self,
        event: LedgerEvent,
        target_epsilon: float | None,
        delta: float | None = None,
        *,
        accountant: str = "prv",
    ) -> None:
        """Raise :class:`PrivacyBudgetExceeded` *before* ``event`` if recording it would take the
        headline epsilon (:meth:`headline_epsilon`; metric-DP: the per-word :meth:`metric_epsilon`)
        above ``target_epsilon``. Nothing is recorded. ``target_epsilon=None``: no budget."""
        if target_epsilon is None:
            return
        after = self.copy()
        after.add(event)
        if isinstance(event, MetricDPRun):
            new, what = after.metric_epsilon(), "per-word metric-DP"
        else:
            new = after.headline_epsilon(delta, accountant)
            what = "user-level" if isinstance(event, RoundRun) else "headline"
        if new > target_epsilon:  # the spent epsilon is computed only for the refusal's message
            if isinstance(event, MetricDPRun):
                spent = self.metric_epsilon()
            else:
                spent = self.headline_epsilon(delta, accountant)
            at = "" if delta is None else f" at delta={delta:.3g}"
            raise PrivacyBudgetExceeded(
                f"refusing {_describe(self, event)}: the {what} epsilon would become {new:.4g} > "
                f"target {target_epsilon}{at} (spent so far {spent:.4g})",
                spent=spent,
                target=target_epsilon,
            )

    def charge(
        self,
        event: LedgerEvent,
        *,
        target_epsilon: float | None = None,
        delta: float | None = None,
        accountant: str = "prv",
    ) -> None:
        """:meth:`check` then :meth:`add`: the event is recorded only when it fits the budget."""
        self.check(event, target_epsilon, delta, accountant=accountant)
        self.add(event)

    # -- persistence ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": LEDGER_FORMAT,
            "runs": [r.to_dict() for r in self.runs],
            "rounds": [r.to_dict() for r in self.round_runs],
            "client_ledgers": {k: v.to_dict() for k, v in self.client_ledgers.items()},
            "releases": [r.to_dict() for r in self.releases],
            "metric": [r.to_dict() for r in self.metric_runs],
        }
        d["dp_event"] = repr(self.dp_event().to_named_tuple())
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DPLedger:
        """Read :meth:`to_dict`'s output, or an old ``privnlp.dp_ledger/1`` / ``privnlp.fed_ledger/1``
        dict (checkpoints written before the ledgers were one).

        Raises:
            InvalidArgument: a dict in none of these formats.
        """
        fmt = d.get("format")
        if fmt not in (LEDGER_FORMAT, *_OLD_FORMATS):
            raise InvalidArgument(
                f"ledger format must be one of {(LEDGER_FORMAT, *_OLD_FORMATS)}; got {fmt!r}"
            )
        steps = [] if fmt == "privnlp.fed_ledger/1" else d["runs"]
        rounds = d["runs"] if fmt == "privnlp.fed_ledger/1" else d.get("rounds", [])
        return cls(
            [
                LedgerRun(float(r["noise_multiplier"]), float(r["sample_rate"]), int(r["steps"]))
                for r in steps
            ],
            [RoundRun.from_dict(r) for r in rounds],
            {k: cls.from_dict(v) for k, v in (d.get("client_ledgers") or {}).items()},
            [ThresholdRelease.from_dict(r) for r in d.get("releases", [])],
            [MetricDPRun.from_dict(r) for r in d.get("metric", [])],
        )


def _merge(records: list, event: Any, count: str) -> None:
    """Append ``event`` to a run-length list, merging it into the last record when the keys match."""
    if records and records[-1].key() == event.key():
        records[-1] = replace(
            records[-1], **{count: getattr(records[-1], count) + getattr(event, count)}
        )
    else:
        records.append(event)


def _describe(ledger: DPLedger, event: Any) -> str:
    if isinstance(event, LedgerRun):
        return f"DP-SGD step {ledger.steps + 1}"
    if isinstance(event, RoundRun):
        return f"DP-FedAvg round {ledger.rounds + 1}"
    if isinstance(event, ThresholdRelease):
        return f"DP vocabulary release {sum(r.releases for r in ledger.releases) + 1}"
    return f"metric-DP pass {sum(r.releases for r in ledger.metric_runs) + 1}"


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

        # galloping from what is known already (check_step's bounds, note_fits' plan): after a planned run the
        # first probe, one step more, usually settles it (one accountant call instead of ~2 log2(steps))
        lo, hi = self._bounds.get(key, (0, math.inf))
        if lo == 0 and hi > 1:
            if ok(1):
                lo = 1
            else:
                hi = 1
        gap = 1
        while hi == math.inf:
            probe = lo + gap
            if ok(probe):
                lo, gap = probe, gap * 2
            else:
                hi = probe
            if probe > 1 << 40:  # pragma: no cover
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

    def note_fits(self, noise_multiplier: float, sample_rate: float, steps: int) -> None:
        """Record that one run of ``steps`` steps with these parameters, alone in the ledger, fits the budget: what
        :func:`calibrate_noise_multiplier` established for the noise multiplier it returned (it evaluated this
        very ``epsilon_for([(sigma, q, steps)], delta, accountant)``). The guard then spends no accountant call
        on the planned steps (each costs ~1 s with the PLD accountant: 10-20 per run, before this) and checks
        as before beyond them."""
        s, q, n = float(noise_multiplier), float(sample_rate), int(steps)
        key = ((), s, q)
        lo, hi = self._bounds.get(key, (0, math.inf))
        if n < hi:
            self._bounds[key] = (max(lo, n), hi)

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
