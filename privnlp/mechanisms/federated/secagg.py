"""Distributed DP for DP-FedAvg over Flower's SecAgg+: the distributed Skellam mechanism (issue #33 item 3).

Papers: Agarwal, Kairouz, Liu, "The Skellam Mechanism for Differentially Private Federated Learning"
(NeurIPS 2021; the RDP bound of :func:`skellam_rdp`, its Theorem on the multi-dimensional Skellam mechanism)
and Kairouz, Liu, Steinke, "The Distributed Discrete Gaussian Mechanism for Federated Learning with Secure
Aggregation" (ICML 2021; conditional randomized rounding and its L2 bound, :func:`rounding_l2_bound`).
Flower's SecAgg+ (``SecAggPlusWorkflow`` / ``secaggplus_mod``, Bell et al. 2020) sums integer vectors modulo
2^bits without showing any single one to the server.

Threat model: an honest-but-curious server (it runs the protocol as written, sees every message it receives,
knows which users it selected) and an eavesdropper. Per round and selected user (client side,
:func:`encode_update`):

1. clip the model delta to L2 norm ``S`` (``clip_norm``); scale by ``1/gamma`` with ``gamma = S / levels``;
2. round every coordinate to an integer by randomized rounding, redrawn until the L2 norm of the integer
   vector is at most ``B`` (:func:`rounding_l2_bound`, Kairouz et al. 2021); the sensitivity of the integer sum
   to one user (zero-out neighbours, the relation of the central mode) is then ``B`` in L2 and
   ``min(B^2, sqrt(d) B)`` in L1 (an integer vector's L1 norm is at most its squared L2 norm);
3. add Skellam(mu_i) noise (Poisson(mu_i) - Poisson(mu_i)) to every coordinate, drawn from OS entropy
   (:func:`privnlp.core.rng.secure_numpy`; never from a seed of the run config, which every party knows);
4. refuse (the reply becomes an error, a SecAgg+ dropout) if a coordinate leaves ``[-c, c]``: the per-node
   bound that keeps the modular sum of every survivor from wrapping. The probability of that event is bounded
   (:attr:`SkellamPlan.overflow_probability`) and added to delta, since whether a user drops depends on its data.

SecAgg+ reveals to the server only the sum over the users that survived the round. Sums of Skellam variables
are Skellam: with ``k`` survivors the sum carries Skellam(k mu_i). ``mu_i = mu / t`` where ``t`` is the minimum
number of survivors (``min_survivors``, SecAgg+'s reconstruction threshold): a round whose sum could be
unmasked carries at least Skellam(mu) whatever the dropouts, and SecAgg+ refuses to unmask below ``t``
(the round fails closed). ``mu = (z B)^2 / 2`` matches the variance of the central Gaussian z B. The server
divides the noisy integer sum by the fixed denominator m (selected users) and multiplies by ``gamma``.

Accounting (:func:`server_bound`): the Skellam RDP curve of one round, composed over the rounds a user can take
part in (no amplification: the server knows the selection; participations beyond a binomial tail bound charged
to delta, or every round when all users are selected each round) and converted with dp_accounting's RDP
conversion. Modular wrap-around cannot happen for a sum of in-range vectors (``m (2c) < 2^bits``; checked
before the first round); quantisation error of the sum is at most ``k * sqrt(d) * gamma`` in L2 (rounding)
and is stated, not accounted (it is not noise).

Light imports only (numpy, privnlp.core): the ClientApp process loads this file for every training message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privnlp.core.claims import Adversary, AdversaryBound
from privnlp.core.errors import InvalidArgument

__all__ = [
    "SkellamPlan",
    "rounding_l2_bound",
    "encode_update",
    "decode_sum",
    "skellam_rdp",
    "server_bound",
    "secagg_adversary_bounds",
    "SECAGG_ACCOUNTANT",
    "participation_bound",
    "MAX_MODULUS_BITS",
]

MAX_MODULUS_BITS = 32  # Flower's SecAgg+ samples masks in [0, 2^32) and quantizes into int32
ROUNDING_BETA = float(
    np.exp(-0.5)
)  # Kairouz et al. 2021's choice for the conditional rounding bound
MAX_ROUNDING_TRIES = 1000
_ORDERS = tuple(range(2, 257))  # integer Renyi orders (the Skellam bound is stated for alpha > 1)


def rounding_l2_bound(levels: float, dim: int, beta: float = ROUNDING_BETA) -> float:
    """L2 bound ``B`` of a conditionally rounded vector whose unrounded norm is at most ``levels``
    (Kairouz et al. 2021): ``sqrt(levels^2 + d/4 + sqrt(2 ln(1/beta)) (levels + sqrt(d)/2))``; one randomized
    rounding meets it with probability at least ``1 - beta``."""
    return math.sqrt(
        levels**2
        + dim / 4.0
        + math.sqrt(2.0 * math.log(1.0 / beta)) * (levels + math.sqrt(dim) / 2.0)
    )


@dataclass(frozen=True)
class SkellamPlan:
    """Public parameters of distributed Skellam DP-FedAvg over SecAgg+ (one per run; sent to every client).

    Attributes:
        clip_norm: ``S``, the L2 bound of one user's model delta.
        levels: integer L2 norm of a clipped delta after scaling (``S / gamma``); more levels, less rounding
            error, bigger integers.
        dim: number of model coordinates ``d``.
        clients: users selected per round ``m`` (the fixed denominator).
        min_survivors: ``t``, SecAgg+'s reconstruction threshold; the noise of ``t`` users is the full noise.
        noise_multiplier: ``z``; the noise of the sum has the variance of N(0, (z B)^2).
        modulus_bits: SecAgg+ works modulo ``2^modulus_bits`` (at most 32 in Flower).
    """

    clip_norm: float
    levels: int
    dim: int
    clients: int
    min_survivors: int
    noise_multiplier: float
    modulus_bits: int = 32

    def __post_init__(self) -> None:
        if not (self.clip_norm > 0 and math.isfinite(self.clip_norm)):
            raise InvalidArgument(f"clip-norm must be > 0; got {self.clip_norm}")
        if int(self.levels) < 1:
            raise InvalidArgument(f"secagg-levels must be >= 1; got {self.levels}")
        if int(self.dim) < 1:
            raise InvalidArgument(f"dim must be >= 1; got {self.dim}")
        if int(self.clients) < 2:
            raise InvalidArgument(
                f"clients-per-round must be >= 2 for SecAgg+ (one client's sum is its update); got "
                f"{self.clients}"
            )
        t, m = int(self.min_survivors), int(self.clients)
        if not (m / 2 < t <= m):
            raise InvalidArgument(
                f"secagg-min-survivors must be in ({m / 2:g}, {m}] for {m} selected clients (SecAgg+ needs a "
                f"majority threshold; the selected clients cannot meet more than {m}); got {t}"
            )
        if not (self.noise_multiplier > 0 and math.isfinite(self.noise_multiplier)):
            raise InvalidArgument(
                f"noise-multiplier must be > 0 for distributed DP; got {self.noise_multiplier}"
            )
        if not (8 <= int(self.modulus_bits) <= MAX_MODULUS_BITS):
            raise InvalidArgument(
                f"secagg-bits must be in [8, {MAX_MODULUS_BITS}] (Flower's SecAgg+ limit); got "
                f"{self.modulus_bits}"
            )
        if self.coord_bound <= self.l2_bound:
            raise InvalidArgument(
                f"secagg-bits={self.modulus_bits}: modulus 2^{self.modulus_bits} too small for the clipped, "
                f"quantised sum of {m} clients: each client may use only [-{self.coord_bound}, "
                f"{self.coord_bound}] per coordinate, below the L2 bound {self.l2_bound:.0f} of one rounded "
                "update; lower secagg-levels or raise secagg-bits"
            )
        if self.overflow_probability > 1e-6:
            raise InvalidArgument(
                f"secagg-bits={self.modulus_bits}: modulus 2^{self.modulus_bits} too small for the clipped, "
                f"quantised, noised sum of {m} clients: a coordinate leaves [-{self.coord_bound}, "
                f"{self.coord_bound}] with probability up to {self.overflow_probability:.3g} (allowed 1e-6); "
                "lower secagg-levels or the noise, or raise secagg-bits"
            )

    # ---------------------------------------------------------------- derived, public
    @property
    def gamma(self) -> float:
        """Quantisation step (model units per integer)."""
        return self.clip_norm / self.levels

    @property
    def l2_bound(self) -> float:
        """``B``: L2 sensitivity of the integer sum to one user."""
        return rounding_l2_bound(self.levels, self.dim)

    @property
    def l1_bound(self) -> float:
        # an integer vector v has ||v||_1 <= ||v||_2^2, an integer <= B^2
        b = self.l2_bound
        return min(float(math.floor(b * b)), math.sqrt(self.dim) * b)

    @property
    def mu(self) -> float:
        """Skellam parameter of the noise of a sum of at least ``t`` users (variance 2 mu = (z B)^2)."""
        return (self.noise_multiplier * self.l2_bound) ** 2 / 2.0

    @property
    def mu_client(self) -> float:
        """Each client's share."""
        return self.mu / self.min_survivors

    @property
    def coord_bound(self) -> int:
        """``c``: each client's integers lie in [-c, c] so that ``m`` of them never wrap modulo 2^bits."""
        return (2 ** int(self.modulus_bits) - 1) // (2 * int(self.clients)) - 1

    @property
    def overflow_probability(self) -> float:
        """Union bound on any coordinate of any client leaving [-c, c] in one round (Chernoff bound of the
        Skellam tail: P(|X| >= a) <= 2 exp(-a^2 / (2 (2 mu_i + a)))) -- a Bernstein-type bound for a difference
        of two Poisson(mu_i))."""
        a = self.coord_bound - math.floor(self.l2_bound)
        if a <= 0:
            return 1.0
        v = 2.0 * self.mu_client
        return min(1.0, self.clients * self.dim * 2.0 * math.exp(-(a**2) / (2.0 * (v + a / 3.0))))

    def quantisation_error_bound(self, survivors: int) -> float:
        """L2 bound of (decoded sum - true clipped sum) without the noise: ``k sqrt(d) gamma``."""
        return survivors * math.sqrt(self.dim) * self.gamma

    def to_config(self) -> dict[str, float | int]:
        return {
            "sa-clip-norm": float(self.clip_norm),
            "sa-levels": int(self.levels),
            "sa-dim": int(self.dim),
            "sa-clients": int(self.clients),
            "sa-min-survivors": int(self.min_survivors),
            "sa-noise-multiplier": float(self.noise_multiplier),
            "sa-bits": int(self.modulus_bits),
        }

    @classmethod
    def from_config(cls, cfg: dict) -> SkellamPlan:
        return cls(
            clip_norm=float(cfg["sa-clip-norm"]),
            levels=int(cfg["sa-levels"]),
            dim=int(cfg["sa-dim"]),
            clients=int(cfg["sa-clients"]),
            min_survivors=int(cfg["sa-min-survivors"]),
            noise_multiplier=float(cfg["sa-noise-multiplier"]),
            modulus_bits=int(cfg["sa-bits"]),
        )


def encode_update(
    delta: list[np.ndarray], plan: SkellamPlan, *, rng: np.random.Generator
) -> list[np.ndarray]:
    """Client side: clip, scale, conditionally round, add this client's Skellam share; float arrays holding
    integers in [-c, c] (SecAgg+ adds ``c`` and sums them exactly). ``rng`` must be a secure generator
    (:func:`privnlp.core.rng.secure_numpy`); raises if a coordinate would leave [-c, c] (the node then drops
    out of the round; the probability is in delta)."""
    flat = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in delta])
    if flat.size != plan.dim:
        raise InvalidArgument(f"update has {flat.size} coordinates; the plan says dim={plan.dim}")
    norm = float(np.linalg.norm(flat))
    if norm > plan.clip_norm:
        flat = flat * (plan.clip_norm / norm)
    x = flat / plan.gamma
    lo = np.floor(x)
    frac = x - lo
    bound = plan.l2_bound
    for _ in range(MAX_ROUNDING_TRIES):
        r = lo + (rng.random(x.shape) < frac)
        if float(np.linalg.norm(r)) <= bound:
            break
    else:  # pragma: no cover - probability beta^1000
        raise RuntimeError("conditional rounding did not meet its L2 bound in 1000 tries")
    mu = plan.mu_client
    noisy = r + (rng.poisson(mu, x.shape) - rng.poisson(mu, x.shape))
    c = plan.coord_bound
    if np.any(np.abs(noisy) > c):
        raise OverflowError(
            f"a noised coordinate left [-{c}, {c}]; this node drops out of the round (accounted in delta)"
        )
    out, i = [], 0
    for a in delta:
        n = int(np.asarray(a).size)
        out.append(noisy[i : i + n].reshape(np.asarray(a).shape))
        i += n
    return out


def decode_sum(int_sum: list[np.ndarray], plan: SkellamPlan) -> list[np.ndarray]:
    """Server side: the SecAgg+ sum of integers (exact) back to model units (``gamma`` per integer). The caller
    divides by the fixed denominator m."""
    return [np.rint(np.asarray(s, dtype=np.float64)) * plan.gamma for s in int_sum]


def skellam_rdp(orders: tuple | list, l2: float, l1: float, mu: float) -> np.ndarray:
    """RDP of the multi-dimensional Skellam mechanism (Agarwal et al. 2021): at order alpha,
    ``alpha l2^2 / (4 mu) + min(((2 alpha - 1) l2^2 + 6 l1) / (16 mu^2), 3 l1 / (4 mu))``."""
    a = np.asarray(orders, dtype=np.float64)
    return a * l2**2 / (4 * mu) + np.minimum(
        ((2 * a - 1) * l2**2 + 6 * l1) / (16 * mu**2), 3 * l1 / (4 * mu)
    )


def participation_bound(rounds: int, rate: float, delta_tail: float) -> int:
    """Smallest k with P(Binomial(rounds, rate) > k) <= delta_tail (rounds when rate == 1)."""
    if rate >= 1.0:
        return int(rounds)
    from scipy.stats import binom  # deferred: scipy is only needed by the server's accounting

    k = int(binom.isf(delta_tail, rounds, rate))
    while k < rounds and binom.sf(k, rounds, rate) > delta_tail:
        k += 1
    return min(int(rounds), max(k, 0))


@dataclass(frozen=True)
class ServerBound:
    """The (epsilon, delta) against the honest-but-curious server of the SecAgg+ mode, with its parts."""

    epsilon: float
    delta: float
    participations: int
    delta_tail: float
    delta_overflow: float
    note: str


def server_bound(plan: SkellamPlan, *, rounds: int, population: int, delta: float) -> ServerBound:
    """Epsilon against the server (no amplification: it knows the selection) after ``rounds`` rounds.

    A user is selected in each round with probability m / N; participations beyond the binomial tail bound
    ``k`` are charged to delta (half of ``delta``; no charge when ``k`` is every round, e.g. m = N); the Skellam RDP of
    one round (at least ``t`` survivors) is composed ``k`` times and converted with dp_accounting; the
    probability that a client's data-dependent overflow makes it drop out is added to delta."""
    if not 0 < delta < 1:
        raise InvalidArgument(f"delta must be in (0, 1); got {delta}")
    if population < plan.clients:
        raise InvalidArgument(
            f"num-clients={population} is smaller than clients-per-round={plan.clients}"
        )
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon  # deferred: heavy

    rate = plan.clients / population
    d_tail = 0.0 if rate >= 1.0 else delta / 2.0
    k = participation_bound(rounds, rate, d_tail) if rate < 1.0 else int(rounds)
    if k >= rounds:  # P(more than every round) = 0: nothing to charge to delta
        d_tail = 0.0
    d_conv = delta - d_tail
    if k == 0:
        eps = 0.0
    else:
        rdp = k * skellam_rdp(_ORDERS, plan.l2_bound, plan.l1_bound, plan.mu)
        eps, _ = compute_epsilon(list(_ORDERS), list(rdp), d_conv)
    d_over = min(1.0, rounds * plan.overflow_probability)
    note = (
        f"Skellam RDP (Agarwal et al. 2021) of the SecAgg+ sum of >= {plan.min_survivors} survivors, "
        f"mu={plan.mu:.4g}, L2/L1 sensitivity {plan.l2_bound:.4g}/{plan.l1_bound:.4g} integers, composed over "
        f"{k} participations"
        + (
            f" (binomial tail P(> {k} of {rounds}) <= {d_tail:.3g} charged to delta)"
            if d_tail
            else ""
        )
        + f"; overflow drop-out probability {d_over:.3g} added to delta"
    )
    return ServerBound(
        epsilon=float(eps),
        delta=float(delta + d_over),
        participations=k,
        delta_tail=d_tail,
        delta_overflow=d_over,
        note=note,
    )


SECAGG_ACCOUNTANT = (
    "Skellam RDP (Agarwal et al. 2021), dp_accounting RDP-to-(eps, delta) conversion"
)


def secagg_adversary_bounds(
    plan: SkellamPlan, *, rounds: int, population: int, delta: float, tls: bool = True
) -> tuple[AdversaryBound, ...]:
    """The per-adversary bounds of DP-FedAvg over SecAgg+ with distributed Skellam noise (user level, zero-out
    neighbours, N public), one :class:`~privnlp.core.claims.AdversaryBound` per adversary the threat model names:

    * the honest-but-curious server sees only the SecAgg+ sum of the survivors' noised, quantised updates and
      knows the selection: no amplification (:func:`server_bound`); the noise is sized for ``min_survivors``
      (``t``, SecAgg+'s reconstruction threshold), so the missing noise shares of dropped clients are accounted:
      a sum of ``k >= t`` survivors carries Skellam(k mu / t) >= Skellam(mu), and SecAgg+ refuses to unmask a
      round with fewer than ``t`` survivors (fails closed). ``t`` also bounds collusion: fewer than ``t``
      colluding parties cannot reconstruct a client's masks;
    * the eavesdropper: with ``tls`` it sees encrypted traffic, without it SecAgg+-masked vectors (uniform
      without the pairwise keys) and the global models -- at most the server's view either way (the selection
      is visible in the traffic, so no amplification);
    * the observer of the released models: the server's bound (amplification by sampling is not claimed for
      the Skellam sum).

    The same function renders the SecAgg+ mode on the dp_fedavg card and builds the Flower deployment's claim.
    """
    sb = server_bound(plan, rounds=rounds, population=population, delta=delta)
    acc = SECAGG_ACCOUNTANT
    server_note = (
        f"{sb.note}; dropped clients' noise shares: each client adds Skellam(mu/t), t = {plan.min_survivors} "
        f"of {plan.clients} (the SecAgg+ reconstruction threshold), so any sum SecAgg+ can unmask (>= t "
        "survivors) carries at least Skellam(mu); no collusion of the server with clients is claimed"
    )
    return (
        AdversaryBound(
            Adversary.HONEST_BUT_CURIOUS_SERVER.value,
            "the SecAgg+ sum of the surviving clients' noised, quantised updates and the selection log "
            "(never an individual update)",
            sb.epsilon,
            sb.delta,
            acc,
            False,
            server_note,
        ),
        AdversaryBound(
            Adversary.EAVESDROPPER.value,
            (
                "TLS-encrypted traffic (who talks to the server, message sizes)"
                if tls
                else "every message in clear: SecAgg+-masked vectors (uniform without the keys) and the "
                "global models"
            ),
            sb.epsilon,
            sb.delta,
            acc,
            False,
            "at most what the server sees (no amplification: the selection is visible in the traffic)",
        ),
        AdversaryBound(
            Adversary.MODEL_OBSERVER.value,
            "the released global models",
            sb.epsilon,
            sb.delta,
            acc,
            False,
            "amplification by sampling not claimed for the Skellam sum (the server's bound applies)",
        ),
    )
