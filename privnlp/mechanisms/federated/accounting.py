"""User-level accounting of DP-FedAvg rounds (dp_accounting RDP) + record-level client DP-SGD.

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
  per-client :class:`privnlp.accounting.DPLedger` (opacus + dp_accounting, Poisson within the client);
  the record-level epsilon is the worst client's. A fixed-size user-level guarantee also covers any
  change inside one user's data (replace-one user), so the record-level epsilon reported is the
  smaller of the two where both apply.

Written by hand: only the run-length round ledger, the caching of the one-round RDP curve (computing
the without-replacement RDP takes ~1 s per (N, m, z)) and the budget/calibration searches.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from privnlp.core.errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    PrivacyBudgetExceeded,
    check_positive,
    check_range,
)

__all__ = [
    "SAMPLINGS",
    "RoundRun",
    "FedLedger",
    "round_event",
    "user_epsilon",
    "calibrate_user_noise",
    "accountant_noise_multiplier",
]

SAMPLINGS = ("fixed", "poisson")
#: orders used for the (conservative) calibration search: a subset of dp_accounting's defaults, so
#: the epsilon found is >= the one with all orders (the min over a subset is larger).
_CALIBRATION_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 65)))


def _quiet_absl():
    lg = logging.getLogger("absl")
    old = lg.level
    lg.setLevel(logging.ERROR)
    return lg, old


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
    from dp_accounting import dp_event as de

    z = accountant_noise_multiplier(noise_multiplier, sampling)
    if sampling == "fixed":
        return de.SampledWithoutReplacementDpEvent(
            int(num_users), int(clients_per_round), de.GaussianDpEvent(z)
        )
    return de.PoissonSampledDpEvent(
        float(clients_per_round) / float(num_users), de.GaussianDpEvent(z)
    )


def _relation(sampling: str) -> Any:
    from dp_accounting import NeighboringRelation

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
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    lg, old = _quiet_absl()
    try:
        acc = rdpa.RdpAccountant(
            orders=list(orders) if orders else None, neighboring_relation=_relation(sampling)
        )
        acc.compose(round_event(sampling, num_users, clients_per_round, noise_multiplier))
        return tuple(float(o) for o in acc._orders), tuple(float(v) for v in np.asarray(acc._rdp))
    finally:
        lg.setLevel(old)


def _eps_from_runs(
    runs: tuple[tuple[str, int, float, float, int], ...],
    delta: float,
    orders: tuple[float, ...] | None = None,
) -> float:
    if not runs:
        return 0.0
    if any(z <= 0 for _, _, _, z, n in runs if n > 0):
        return math.inf
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    total = None
    ords = None
    for sampling, n_users, m, z, n in runs:
        o, r = _round_rdp(sampling, n_users, m, z, orders)
        v = np.asarray(r) * n
        total = v if total is None else total + v
        ords = o
    eps, _ = rdpa.compute_epsilon(list(ords), list(total), delta)
    return float(eps)


def user_epsilon(
    sampling: str,
    num_users: int,
    clients_per_round: float,
    noise_multiplier: float,
    rounds: int,
    delta: float,
) -> float:
    """User-level epsilon of ``rounds`` identical DP-FedAvg rounds (dp_accounting RDP).

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
    return _eps_from_runs(
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
    within ``target_epsilon``. The search uses a subset of RDP orders (conservative: the returned z
    gives epsilon <= target with all of dp_accounting's default orders too).

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
        return _eps_from_runs(
            ((sampling, int(num_users), float(clients_per_round), z, int(rounds)),),
            float(delta),
            _CALIBRATION_ORDERS,
        )

    from privnlp.accounting.ledger import bisect_noise_multiplier

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


@dataclass
class FedLedger:
    """The ledger of a federated run: user-level rounds + per-client record-level DP-SGD ledgers.

    Mutable (appended to during training); ``to_dict``/``from_dict`` round-trip exactly, so a resumed
    run reports the same epsilon. One sampling scheme per ledger (fixed-size and Poisson rounds use
    different neighbouring relations and cannot be composed in one RDP accountant).

    Attributes:
        runs: the user-level rounds, consecutive identical rounds merged.
        client_ledgers: client id -> :class:`~privnlp.accounting.DPLedger` of its local DP-SGD steps.

    Raises:
        InvalidArgument: a round with an unknown sampling scheme or one other than the ledger's; (``from_dict``)
            a dict not in the ``privnlp.fed_ledger/1`` format.
        PrivacyBudgetExceeded: (``check_round``) the next round would exceed the target.
    """

    runs: list[RoundRun] = field(default_factory=list)
    client_ledgers: dict[str, Any] = field(
        default_factory=dict
    )  # client id -> privnlp.accounting.DPLedger

    # -- user level -----------------------------------------------------------------------
    @property
    def rounds(self) -> int:
        return sum(r.rounds for r in self.runs)

    @property
    def sampling(self) -> str | None:
        return self.runs[0].sampling if self.runs else None

    def _check_sampling(self, sampling: str) -> None:
        if sampling not in SAMPLINGS:
            raise InvalidArgument(f"sampling must be one of {SAMPLINGS}; got {sampling!r}")
        if self.runs and self.runs[0].sampling != sampling:
            raise InvalidArgument(
                f"sampling={sampling!r} cannot be composed with the ledger's "
                f"{self.runs[0].sampling!r} rounds (different neighbouring relations)"
            )

    def _with(self, run: RoundRun) -> tuple:
        runs = list(self.runs)
        if runs and runs[-1].key() == run.key():
            runs[-1] = RoundRun(*run.key(), runs[-1].rounds + run.rounds)
        else:
            runs.append(run)
        return tuple(
            (r.sampling, r.num_users, r.clients_per_round, r.noise_multiplier, r.rounds)
            for r in runs
        )

    def record_round(
        self, sampling: str, num_users: int, clients_per_round: float, noise_multiplier: float
    ) -> None:
        self._check_sampling(sampling)
        new = RoundRun(
            sampling, int(num_users), float(clients_per_round), float(noise_multiplier), 1
        )
        runs = list(self.runs)
        if runs and runs[-1].key() == new.key():
            runs[-1] = RoundRun(*new.key(), runs[-1].rounds + 1)
        else:
            runs.append(new)
        self.runs[:] = runs

    def user_epsilon(self, delta: float) -> float:
        runs = tuple(
            (r.sampling, r.num_users, r.clients_per_round, r.noise_multiplier, r.rounds)
            for r in self.runs
        )
        return _eps_from_runs(runs, float(delta))

    def epsilon_after(
        self,
        sampling: str,
        num_users: int,
        clients_per_round: float,
        noise_multiplier: float,
        delta: float,
        extra_rounds: int = 1,
    ) -> float:
        """User-level epsilon if ``extra_rounds`` more rounds with these parameters were run."""
        self._check_sampling(sampling)
        runs = self._with(
            RoundRun(
                sampling,
                int(num_users),
                float(clients_per_round),
                float(noise_multiplier),
                int(extra_rounds),
            )
        )
        return _eps_from_runs(runs, float(delta))

    def check_round(
        self,
        sampling: str,
        num_users: int,
        clients_per_round: float,
        noise_multiplier: float,
        delta: float,
        target_epsilon: float | None,
    ) -> None:
        """Raise :class:`PrivacyBudgetExceeded` *before* a round that would exceed ``target_epsilon``."""
        if target_epsilon is None:
            return
        after = self.epsilon_after(sampling, num_users, clients_per_round, noise_multiplier, delta)
        if after > target_epsilon:
            spent = self.user_epsilon(delta)
            raise PrivacyBudgetExceeded(
                f"refusing DP-FedAvg round {self.rounds + 1}: user-level epsilon would become {after:.4g} > target "
                f"{target_epsilon} at delta={delta:.3g} (spent so far {spent:.4g} after {self.rounds} rounds)",
                spent=spent,
                target=target_epsilon,
            )

    def dp_event(self) -> Any:
        """The dp_accounting event of every recorded round."""
        from dp_accounting import dp_event as de

        return de.ComposedDpEvent(
            [
                de.SelfComposedDpEvent(
                    round_event(r.sampling, r.num_users, r.clients_per_round, r.noise_multiplier),
                    r.rounds,
                )
                for r in self.runs
            ]
        )

    # -- record level ---------------------------------------------------------------------
    def record_client_steps(
        self, client_id: str, noise_multiplier: float, sample_rate: float, steps: int
    ) -> None:
        from privnlp.accounting import DPLedger

        led = self.client_ledgers.setdefault(str(client_id), DPLedger())
        if steps > 0:
            led.record(noise_multiplier, sample_rate, int(steps))

    def record_epsilon(self, delta: float, accountant: str = "rdp") -> float | None:
        """Worst client's record-level epsilon from client DP-SGD (``None`` without client DP-SGD)."""
        if not self.client_ledgers:
            return None
        return max(led.epsilon(delta, accountant).epsilon for led in self.client_ledgers.values())

    # -- persistence ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "privnlp.fed_ledger/1",
            "runs": [r.to_dict() for r in self.runs],
            "client_ledgers": {k: v.to_dict() for k, v in self.client_ledgers.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FedLedger:
        if d.get("format") != "privnlp.fed_ledger/1":
            raise InvalidArgument(
                f"ledger format must be 'privnlp.fed_ledger/1'; got {d.get('format')!r}"
            )
        from privnlp.accounting import DPLedger

        runs = [
            RoundRun(
                r["sampling"],
                int(r["num_users"]),
                float(r["clients_per_round"]),
                float(r["noise_multiplier"]),
                int(r["rounds"]),
            )
            for r in d["runs"]
        ]
        return cls(runs, {k: DPLedger.from_dict(v) for k, v in d.get("client_ledgers", {}).items()})
