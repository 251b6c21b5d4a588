"""User-level accounting of DP-FedAvg rounds, per adversary, + record-level client DP-SGD.

**Per adversary** (issue 28): the honest-but-curious server and the eavesdropper see which users were
selected, and against an adversary who knows whether a user took part, sampling does not amplify. Their
epsilon (:func:`no_amplification_epsilon`) is the Gaussian composition over the rounds the user took
part in: the participations K ~ Binomial(rounds, m/N) are bounded by k with P(K > k) <= delta/2
(charged to delta), the composition of k Gaussians (one Gaussian of mu = sqrt(k)/z) is evaluated at
delta/2 with dp_accounting's analytic Gaussian privacy loss; every round at the whole delta is used
where tighter. That epsilon is the claim's HEADLINE, and budgets (``target_epsilon``, refusal, the
calibration of z) use it. The amplified figures below are reported only against an observer of the
released models who does not see the selection (:func:`dp_fedavg_adversary_bounds`).

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (App. A.3, Algorithm 1: fixed-size
rounds, RDP of the subsampled Gaussian via the analytical moments accountant of Wang et al. 2019,
composition over rounds, conversion to (epsilon, delta)); McMahan et al. 2018 (DP-FedAvg, Poisson).

* **fixed-size rounds** (m of N users, without replacement): ``SampledWithoutReplacementDpEvent(N, m,
  GaussianDpEvent(z / 2))`` under ``NeighboringRelation.REPLACE_ONE``. The noise std on the *sum* of
  clipped updates is ``z * S``; replacing one user changes that sum by up to ``2 S`` (two clipped
  vectors pointing in opposite directions), so the accountant's noise multiplier (std / sensitivity)
  is ``z / 2``. Written out here because it is the easy thing to get wrong.
* **Poisson rounds** (each user independently with probability q): ``PoissonSampledDpEvent(q,
  GaussianDpEvent(z))`` under add/remove (sensitivity ``S`` of the sum with a fixed denominator).
* **client DP-SGD** (record level): each participating client's local DP-SGD steps are recorded in a
  per-client :class:`privnlp.accounting.DPLedger` inside the run's ledger (opacus + dp_accounting, Poisson within the client);
  the record-level epsilon is the worst client's. A fixed-size user-level guarantee also covers any
  change inside one user's data (replace-one user), so the record-level epsilon reported is the
  smaller of the two where both apply.

The rounds are recorded in the one ledger type of the package, :class:`privnlp.accounting.DPLedger`
(``record_round``, ``check_round``, ``user_epsilon``, ``adversary_bounds``); this module holds the
accounting of a round (events, RDP, the no-amplification composition, the adversary bounds).

Written by hand: only the run-length round record, the caching of the one-round RDP curve (computing
the without-replacement RDP takes ~1 s per (N, m, z)) and the budget/calibration searches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from dp_accounting import NeighboringRelation
from dp_accounting import dp_event as de
from dp_accounting.rdp import rdp_privacy_accountant as rdpa
from scipy.stats import binom

from privnlp.core.claims import Adversary, AdversaryBound
from privnlp.core.errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    check_positive,
    check_range,
)

from .events import (
    RDP_ORDERS,
    bisect_noise_multiplier,
    check_delta,
    gaussian_mu_epsilon,
    quiet_absl,
)

__all__ = [
    "SAMPLINGS",
    "RoundRun",
    "rounds_epsilon",
    "rounds_bounds",
    "round_event",
    "user_epsilon",
    "headline_user_epsilon",
    "calibrate_user_noise",
    "accountant_noise_multiplier",
    "dp_fedavg_adversary_bounds",
    "no_amplification_epsilon",
    "participation_tail_bound",
    "SELECTION_OBSERVERS",
]

#: the adversaries of DP-FedAvg who see which users took part in each round (no amplification by
#: sampling against them) and what they observe
SELECTION_OBSERVERS: tuple[tuple[str, str], ...] = (
    (
        Adversary.HONEST_BUT_CURIOUS_SERVER.value,
        "every noised aggregate and the selection log (which users took part in each round)",
    ),
    (
        Adversary.EAVESDROPPER.value,
        "the broadcast global model of every round and the selection (which clients were selected)",
    ),
)
#: the adversary who sees only what is released (final model, published snapshots, black-box queries)
RELEASE_OBSERVER: tuple[str, str] = (
    Adversary.MODEL_OBSERVER.value,
    "the released models only (final model, published snapshots or black-box queries), "
    "not which users were selected",
)
#: the share of delta charged to the binomial tail bound on participations (the rest goes to the
#: Gaussian composition over the participations)
TAIL_DELTA_SHARE = 0.5

SAMPLINGS = ("fixed", "poisson")
#: The amplified round RDP (observer of the released models) uses the one RDP order list of the package,
#: :data:`privnlp.accounting.ledger.RDP_ORDERS` (as DP-SGD does): the without-replacement RDP of a
#: fixed-size round takes ~1.5 s per (N, m, z) with it (0.8 s with dp_accounting's defaults; same epsilon
#: at N = 1000, m = 100 and N = 35, m = 10). The calibration of z targets the headline
#: (no-amplification) epsilon and uses no RDP.


def accountant_noise_multiplier(noise_multiplier: float, sampling: str) -> float:
    """The noise multiplier handed to the accountant: ``z/2`` for fixed-size (replace-one: sensitivity
    of the sum is 2S), ``z`` for Poisson (add/remove: sensitivity S).

    Raises:
        InvalidArgument: ``sampling`` is neither ``"fixed"`` nor ``"poisson"`` (a typo must never be accounted
            as the other scheme).
    """
    _check_scheme(sampling)
    return float(noise_multiplier) / 2.0 if sampling == "fixed" else float(noise_multiplier)


def _check_scheme(sampling: Any) -> None:
    if sampling not in SAMPLINGS:
        raise InvalidArgument(f"sampling must be one of {SAMPLINGS}; got {sampling!r}")


def round_event(
    sampling: str, num_users: int, clients_per_round: float, noise_multiplier: float
) -> Any:
    """The dp_accounting event of one DP-FedAvg round (see the module docstring).

    Args:
        sampling: ``"fixed"`` (m of N users without replacement, replace-one neighbours) or ``"poisson"``
            (each user with probability m/N, add/remove-one neighbours).
        num_users: N, the population size.
        clients_per_round: m, the (expected) number of users per round.
        noise_multiplier: z, the noise std relative to the clip norm S (halved for the accountant under
            ``"fixed"``: the sum's replace-one sensitivity is 2S).

    Returns:
        A ``dp_accounting`` ``DpEvent``.

    Raises:
        InvalidArgument: an unknown ``sampling``.
    """
    z = accountant_noise_multiplier(noise_multiplier, sampling)
    if sampling == "fixed":
        return de.SampledWithoutReplacementDpEvent(
            int(num_users), int(clients_per_round), de.GaussianDpEvent(z)
        )
    return de.PoissonSampledDpEvent(
        float(clients_per_round) / float(num_users), de.GaussianDpEvent(z)
    )


def _relation(sampling: str) -> Any:
    return (
        NeighboringRelation.REPLACE_ONE
        if sampling == "fixed"
        else NeighboringRelation.ADD_OR_REMOVE_ONE
    )


@lru_cache(maxsize=256)
def _round_rdp(
    sampling: str,
    num_users: int,
    clients_per_round: float,
    noise_multiplier: float,
    orders: tuple[float, ...] | None,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(orders, RDP curve) of ONE round, via dp_accounting's RdpAccountant (cached)."""
    with quiet_absl():
        acc = rdpa.RdpAccountant(
            orders=list(orders or RDP_ORDERS), neighboring_relation=_relation(sampling)
        )
        acc.compose(round_event(sampling, num_users, clients_per_round, noise_multiplier))
        return tuple(float(o) for o in acc._orders), tuple(float(v) for v in np.asarray(acc._rdp))


def rounds_epsilon(
    runs: tuple[tuple[str, int, float, float, int], ...],
    delta: float,
    orders: tuple[float, ...] | None = None,
) -> float:
    """User-level epsilon of DP-FedAvg ``runs`` ``(sampling, N, m, z, rounds)`` AMPLIFIED by user sampling
    (dp_accounting RDP over :data:`RDP_ORDERS`): sound only against an adversary who does not see the
    selection. 0 without rounds, ``inf`` with a round of z <= 0."""
    if not runs:
        return 0.0
    if any(z <= 0 for _, _, _, z, n in runs if n > 0):
        return math.inf
    total = None
    ords = None
    for sampling, n_users, m, z, n in runs:
        o, r = _round_rdp(sampling, n_users, m, z, orders)
        v = np.asarray(r) * n
        total = v if total is None else total + v
        ords = o
    eps, _ = rdpa.compute_epsilon(list(ords), list(total), delta)
    return float(eps)


def headline_user_epsilon(
    sampling: str,
    num_users: int,
    clients_per_round: float,
    noise_multiplier: float,
    rounds: int,
    delta: float,
) -> float:
    """The headline user-level epsilon of ``rounds`` identical DP-FedAvg rounds: the epsilon against
    the strongest named adversary (the server, who sees the selection; no amplification), see
    :func:`dp_fedavg_adversary_bounds`.

    Args:
        sampling: ``poisson`` or ``fixed`` client selection.
        num_users: the (authenticated) population N.
        clients_per_round: m, the expected / fixed number of clients per round.
        noise_multiplier: z, the noise std over the clipping norm.
        rounds: the number of rounds.
        delta: the delta of the claim.
    """
    runs = (
        (sampling, int(num_users), float(clients_per_round), float(noise_multiplier), int(rounds)),
    )
    return no_amplification_epsilon(runs, float(delta))[0]


def user_epsilon(
    sampling: str,
    num_users: int,
    clients_per_round: float,
    noise_multiplier: float,
    rounds: int,
    delta: float,
) -> float:
    """User-level epsilon of ``rounds`` identical DP-FedAvg rounds AMPLIFIED by user sampling
    (dp_accounting RDP): sound only against an adversary who does not see which users were selected.
    The claim's headline is :func:`headline_user_epsilon` (the server sees the selection).

    Args:
        sampling: ``"fixed"`` or ``"poisson"`` (see :func:`round_event`).
        num_users: N, the population size.
        clients_per_round: m, the (expected) number of users per round.
        noise_multiplier: z, relative to the clip norm; <= 0 gives ``inf``.
        rounds: the number of rounds.
        delta: the target delta, in (0, 1).

    Returns:
        The user-level epsilon at ``delta``.
    """
    return rounds_epsilon(
        (
            (
                sampling,
                int(num_users),
                float(clients_per_round),
                float(noise_multiplier),
                int(rounds),
            ),
        ),
        float(delta),
    )


def calibrate_user_noise(
    target_epsilon: float,
    delta: float,
    *,
    sampling: str,
    num_users: int,
    clients_per_round: float,
    rounds: int,
    tolerance: float = 0.02,
) -> float:
    """Smallest noise multiplier z (up to ``tolerance`` relative in epsilon) with ``rounds`` rounds
    within ``target_epsilon`` against the strongest named adversary (the server, who sees the
    selection: :func:`no_amplification_epsilon`, the claim's headline epsilon).

    Args:
        target_epsilon: the user-level epsilon to stay within; > 0 and finite.
        delta: the target delta, in (0, 1).
        sampling: ``"fixed"`` or ``"poisson"`` (see :func:`round_event`).
        num_users: N, the population size.
        clients_per_round: m, the (expected) number of users per round.
        rounds: the number of rounds, an integer >= 1.
        tolerance: relative slack in epsilon at which the search stops.

    Returns:
        The noise multiplier z.

    Raises:
        InvalidPrivacyParameter: ``target_epsilon`` not > 0, or unreachable with z <= 1e4.
        InvalidArgument: ``rounds`` not an integer >= 1, or an unknown ``sampling``.
    """
    check_positive("target_epsilon", target_epsilon, error=InvalidPrivacyParameter)
    check_range("rounds", rounds, 1, math.inf, integer=True)
    _check_scheme(sampling)

    def eps(z: float) -> float:
        # the headline epsilon: against the server, who sees the selection (no amplification)
        runs = ((sampling, int(num_users), float(clients_per_round), z, int(rounds)),)
        return no_amplification_epsilon(runs, float(delta))[0]

    return bisect_noise_multiplier(
        eps,
        target_epsilon,
        tolerance=tolerance,
        max_sigma=1e4,
        iters=40,
        rel_width=1e-3,
        unreachable=f"target_epsilon={target_epsilon} unreachable for {rounds} rounds of "
        f"{clients_per_round} of {num_users} users (z > 1e4)",
    )


def participation_tail_bound(rounds: int, rate: float, tail_delta: float) -> int:
    """Smallest k with P(K > k) <= ``tail_delta`` for K ~ Binomial(``rounds``, ``rate``): the number
    of rounds one user takes part in, when each round selects it independently with probability
    ``rate`` (Poisson rounds: q; fixed-size rounds of m of N users: m / N).

    Raises:
        InvalidArgument: ``rounds`` not an integer >= 0, ``rate`` outside [0, 1], ``tail_delta``
            outside (0, 1).
    """
    check_range("rounds", rounds, 0, math.inf, integer=True)
    check_range("rate", rate, 0.0, 1.0)
    check_range("tail_delta", tail_delta, 0.0, 1.0, lo_inclusive=False, hi_inclusive=False)
    k = int(max(0.0, binom.isf(tail_delta, int(rounds), float(rate))))
    while k < rounds and binom.sf(k, int(rounds), float(rate)) > tail_delta:
        k += 1
    while k > 0 and binom.sf(k - 1, int(rounds), float(rate)) <= tail_delta:
        k -= 1
    return min(k, int(rounds))


def no_amplification_epsilon(
    runs: tuple[tuple[str, int, float, float, int], ...], delta: float
) -> tuple[float, str]:
    """User-level epsilon against an adversary who sees which users were selected (no amplification).

    Conditioned on the selection, a user's view is the Gaussian mechanism of each round it took part
    in (noise multiplier :func:`accountant_noise_multiplier`), so epsilon is their composition. The
    number of participations K_i of run i is Binomial(rounds_i, m_i / N_i); with k_i the
    :func:`participation_tail_bound` at ``TAIL_DELTA_SHARE * delta / len(runs)`` (a union bound
    over the runs), epsilon is the Gaussian composition over k_i rounds of each run at the remaining
    delta. Every round of every run (at the whole delta) is also a bound; the smaller is returned.

    Args:
        runs: ``(sampling, N, m, z, rounds)`` tuples (see :class:`RoundRun`).
        delta: the target delta, in (0, 1).

    Returns:
        ``(epsilon, note)``: the note states the bound used (k, its tail probability, the deltas).
    """
    check_delta(delta, None)
    runs = tuple(r for r in runs if int(r[4]) > 0)
    if not runs:
        return 0.0, "no rounds"
    for r in runs:
        _check_scheme(r[0])
    if any(float(z) <= 0 for _, _, _, z, _ in runs):
        return math.inf, "a round without noise (z = 0): no guarantee"
    every = sum(int(t) / accountant_noise_multiplier(z, s) ** 2 for s, _, _, z, t in runs)
    eps_every = gaussian_mu_epsilon(every, delta)
    tail_delta = TAIL_DELTA_SHARE * delta / len(runs)
    ks = [
        participation_tail_bound(int(t), min(1.0, float(m) / float(n)), tail_delta)
        for _, n, m, _, t in runs
    ]
    tail = sum(k / accountant_noise_multiplier(z, s) ** 2 for k, (s, _, _, z, _) in zip(ks, runs))
    eps_tail = gaussian_mu_epsilon(tail, (1.0 - TAIL_DELTA_SHARE) * delta)
    parts = ", ".join(
        f"{k} of {int(t)} rounds at rate {float(m) / float(n):.3g}"
        for k, (_, n, m, _, t) in zip(ks, runs)
    )
    if eps_tail < eps_every:
        note = (
            f"no amplification by sampling: Gaussian composition over the rounds the user took part "
            f"in, at most {parts} (binomial tail P(K > k) <= {tail_delta:.3g} per run, charged to "
            f"delta; the Gaussian composition at delta {(1.0 - TAIL_DELTA_SHARE) * delta:.3g})"
        )
        return eps_tail, note + ", dp_accounting analytic Gaussian"
    note = (
        "no amplification by sampling: Gaussian composition over every round (tighter here than the "
        f"binomial tail bound on participations, {parts}: epsilon {eps_tail:.4g})"
    )
    return eps_every, note


def rounds_bounds(
    runs: tuple[tuple[str, int, float, float, int], ...], delta: float
) -> tuple[AdversaryBound, ...]:
    """The server / eavesdropper / observer-of-the-released-models bounds of DP-FedAvg ``runs``
    ``(sampling, N, m, z, rounds)`` at ``delta`` (see :func:`dp_fedavg_adversary_bounds`)."""
    eps_na, note = no_amplification_epsilon(runs, delta)
    # the no-amplification bound holds against this observer too: the smaller of the two is reported
    eps_amp = min(rounds_epsilon(runs, float(delta)), eps_na)
    sampling = runs[0][0] if runs else "poisson"
    scheme = (
        "fixed-size rounds (m of N without replacement, replace-one users)"
        if sampling == "fixed"
        else "Poisson rounds (add/remove one user)"
    )
    bounds = [
        AdversaryBound(
            adv, obs, eps_na, float(delta), "dp_accounting analytic Gaussian", False, note
        )
        for adv, obs in SELECTION_OBSERVERS
    ]
    bounds.append(
        AdversaryBound(
            RELEASE_OBSERVER[0],
            RELEASE_OBSERVER[1],
            eps_amp,
            float(delta),
            "dp_accounting RDP",
            True,
            f"amplified by user sampling ({scheme}); sound only against an adversary who does not "
            "see the selection (the no-amplification bound where smaller)",
        )
    )
    return tuple(bounds)


def dp_fedavg_adversary_bounds(
    *,
    noise_multiplier: float,
    clients_per_round: int,
    population: int,
    rounds: int,
    delta: float,
    sampling: str,
) -> tuple[AdversaryBound, ...]:
    """The user-level (epsilon, delta) of DP-FedAvg against each adversary it names.

    The honest-but-curious server and the eavesdropper see which users were selected: against them
    sampling does not amplify, and epsilon is :func:`no_amplification_epsilon` (Gaussian composition
    over the rounds the user took part in, a binomial tail bound on participations charged to delta,
    or every round if tighter). An observer of the released models only, who does not see the
    selection, gets the amplified figure (:func:`user_epsilon`), labelled ``amplified=True``.

    Args:
        noise_multiplier: z, the noise std on the sum relative to the clip norm S; >= 0 (0: inf).
        clients_per_round: m, the (expected) number of users per round; in [1, population].
        population: N, the number of users; an integer >= 1.
        rounds: the number of rounds; an integer >= 0.
        delta: the target delta, in (0, 1).
        sampling: ``"fixed"`` or ``"poisson"`` (see :func:`round_event`).

    Returns:
        ``(server, eavesdropper, observer of the released models)`` bounds; the claim's headline
        epsilon is the largest (:class:`privnlp.core.claims.PrivacyClaim` enforces it).

    Raises:
        InvalidArgument: an unknown ``sampling``; ``population``, ``clients_per_round`` or ``rounds``
            out of range.
        InvalidPrivacyParameter: ``noise_multiplier`` < 0 or ``delta`` outside (0, 1).
    """
    _check_scheme(sampling)
    check_range("population", population, 1, math.inf, integer=True)
    check_range("clients_per_round", clients_per_round, 1, population)
    check_range("rounds", rounds, 0, math.inf, integer=True)
    check_range("noise_multiplier", noise_multiplier, 0.0, math.inf, error=InvalidPrivacyParameter)
    check_delta(delta, None)
    runs = (
        (sampling, int(population), float(clients_per_round), float(noise_multiplier), int(rounds)),
    )
    return rounds_bounds(runs, float(delta))


@dataclass(frozen=True)
class RoundRun:
    """``rounds`` consecutive DP-FedAvg rounds with the same parameters.

    Attributes:
        sampling: ``"fixed"`` or ``"poisson"``.
        num_users: N, the population size.
        clients_per_round: m, the (expected) number of users per round.
        noise_multiplier: z, the noise std relative to the clip norm.
        rounds: how many consecutive rounds used these parameters.
    """

    sampling: str
    num_users: int
    clients_per_round: float
    noise_multiplier: float
    rounds: int

    def key(self) -> tuple:
        return (self.sampling, self.num_users, self.clients_per_round, self.noise_multiplier)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sampling": self.sampling,
            "num_users": self.num_users,
            "clients_per_round": self.clients_per_round,
            "noise_multiplier": self.noise_multiplier,
            "rounds": self.rounds,
        }

    def as_tuple(self) -> tuple[str, int, float, float, int]:
        return (
            self.sampling,
            self.num_users,
            self.clients_per_round,
            self.noise_multiplier,
            self.rounds,
        )

    @classmethod
    def from_dict(cls, r: Mapping[str, Any]) -> RoundRun:
        return cls(
            str(r["sampling"]),
            int(r["num_users"]),
            float(r["clients_per_round"]),
            float(r["noise_multiplier"]),
            int(r["rounds"]),
        )
