"""Registered federated mechanisms: ``fedavg`` (no formal guarantee) and ``dp_fedavg`` (user-level DP),
plus the leaky twin of ``dp_fedavg``.

Papers (``../shared/papers/``): ``unintended-memorization-under-fl.txt`` (DP-FedAvg Algorithm 1 with
fixed-size rounds, clip-only mode, server momentum), ``fl-dp-sequence-tagging-ner.txt`` (client DP-SGD),
``record-level-privacy-leakage-in-fl.txt`` (M of N clients per round, global snapshots observed by an
eavesdropper).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from privnlp.accounting.ledger import DPLedger, check_delta, default_delta
from privnlp.core.claims import Adversary, AdversaryBound, PrivacyClaim, ThreatModel
from privnlp.core.errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    ProtocolError,
    check_positive,
    check_range,
)
from privnlp.core.protocols import Mechanism
from privnlp.core.registry import LEAKY_TWINS, MECHANISMS

from .accounting import SAMPLINGS, calibrate_user_noise
from .aggregation import AggregateInfo, dp_average, weighted_average
from .client import FitRes
from .secagg import SkellamPlan, secagg_adversary_bounds

__all__ = [
    "FedAvg",
    "DPFedAvg",
    "LeakyDPFedAvgWeighted",
    "SERVER_OBSERVER",
    "SNAPSHOT_EAVESDROPPER",
    "MODEL_QUERIER",
]

SERVER_OBSERVER = ThreatModel(
    adversary=Adversary.HONEST_BUT_CURIOUS_SERVER,
    observes=("every aggregated global model", "the selection log"),
    knows=("the model architecture", "the tokenizer", "the protocol parameters"),
    goal="learn whether / what a user contributed (user-level membership, canary extraction)",
)
SNAPSHOT_EAVESDROPPER = ThreatModel(
    adversary=Adversary.EAVESDROPPER,
    observes=("global model snapshots of every round", "which clients were selected"),
    knows=("model architecture", "public vocabulary"),
    goal="extract or test membership of individual records (record-level leakage in FL)",
)
MODEL_QUERIER = ThreatModel(
    adversary=Adversary.BLACK_BOX_QUERIER,
    observes=("log-probabilities of the final global model",),
    knows=("the canary format and randomness space",),
    goal="extract memorised canaries (federated secret sharer)",
)


def _check_client_dp(
    client_noise_multiplier: float | None, client_max_grad_norm: float | None, client_delta: float
) -> None:
    if (client_noise_multiplier is None) != (client_max_grad_norm is None):
        raise InvalidPrivacyParameter(
            "client DP-SGD needs both client_noise_multiplier (>= 0) and client_max_grad_norm (> 0)"
        )
    if client_max_grad_norm is not None:
        check_positive("client_max_grad_norm", client_max_grad_norm, error=InvalidPrivacyParameter)
        check_range(
            "client_noise_multiplier",
            client_noise_multiplier,
            0.0,
            math.inf,
            error=InvalidPrivacyParameter,
        )
    check_range(
        "client_delta",
        client_delta,
        0.0,
        1.0,
        lo_inclusive=False,
        hi_inclusive=False,
        error=InvalidPrivacyParameter,
    )


def _require_client_dp_metrics(mech: Any, replies: Sequence[FitRes]) -> None:
    """With client DP-SGD configured, a reply without record-level accounting metrics is refused."""
    if getattr(mech, "client_max_grad_norm", None) is None:
        return
    for r in replies:
        if not all(k in r.metrics for k in ("dp-steps", "dp-sample-rate", "dp-noise-multiplier")):
            raise ProtocolError(
                "client DP-SGD is configured but a reply carries no dp-steps / dp-sample-rate / "
                "dp-noise-multiplier metrics; refusing a reply without record-level accounting"
            )
        if float(r.metrics["dp-noise-multiplier"]) < float(mech.client_noise_multiplier):
            raise ProtocolError(
                f"a client ran DP-SGD with noise multiplier {r.metrics['dp-noise-multiplier']} < the "
                f"configured client_noise_multiplier={mech.client_noise_multiplier}"
            )


_CLIENT_DP_NOTE = (
    "record level: client DP-SGD (opacus, Poisson sampling within each client, per-example clipping "
    "to client_max_grad_norm, Gaussian noise) composed per client over every round it took part in "
    "(dp_accounting RDP, worst client reported); each client's data set size is treated as public "
    "(it sets the sampling rate, as in central DP-SGD); no amplification by user sampling is claimed"
)


def client_dp_adversary_bounds(epsilon: float, delta: float) -> tuple[AdversaryBound, ...]:
    """The record-level bound of client DP-SGD against each federated adversary: the same epsilon for
    all, amplified only by each client's local Poisson sampling of its examples (which no named
    adversary observes), composed over every round the client took part in (no amplification by
    user sampling: the server and the eavesdropper see the selection)."""
    note = (
        "amplified only by the client's local Poisson sampling of its records, which none of these "
        "adversaries sees; composed over every round the client took part in (no amplification by "
        "user sampling)"
    )
    acct = "dp_accounting RDP (per-client PoissonSampledDpEvent steps)"
    return (
        AdversaryBound(
            Adversary.HONEST_BUT_CURIOUS_SERVER,
            "every DP-SGD update the client sends and the selection log",
            epsilon,
            delta,
            acct,
            True,
            note,
        ),
        AdversaryBound(
            Adversary.EAVESDROPPER,
            "the global model of every round and the selection",
            epsilon,
            delta,
            acct,
            True,
            note,
        ),
        AdversaryBound(
            Adversary.MODEL_OBSERVER,
            "the released models only",
            epsilon,
            delta,
            acct,
            True,
            note,
        ),
    )


class _FedBase(Mechanism):
    """Shared hyperparameters of FedAvg-style training (server and the client config it sends)."""

    paper = "unintended-memorization-under-fl.txt (FedAvg / DP-FedAvg, Algorithm 1)"
    paired_attacks = ("canary_exposure", "eavesdropping", "watermark")
    threat_models = (SERVER_OBSERVER, SNAPSHOT_EAVESDROPPER, MODEL_QUERIER)
    scenario = "fl.dp_fedavg"  # privnlp/evaluation/scenarios/federated.py (federated secret sharer)

    def __init__(
        self,
        clients_per_round: float = 10,
        sampling: str = "fixed",
        local_epochs: float = 1.0,
        local_batch_size: int = 8,
        local_lr: float = 0.1,
        local_steps: int = 0,
        fedsgd: bool = False,
        server_lr: float = 1.0,
        server_momentum: float = 0.0,
    ) -> None:
        check_positive("clients_per_round", clients_per_round)
        if sampling not in SAMPLINGS:
            raise InvalidArgument(f"sampling must be one of {SAMPLINGS}; got {sampling!r}")
        if sampling == "fixed":
            check_range("clients_per_round", clients_per_round, 1, math.inf, integer=True)
        check_positive("local_epochs", local_epochs)
        check_range("local_batch_size", local_batch_size, 1, 10**7, integer=True)
        check_positive("local_lr", local_lr)
        check_range("local_steps", local_steps, 0, 10**9, integer=True)
        check_positive("server_lr", server_lr)
        check_range("server_momentum", server_momentum, 0.0, 1.0, hi_inclusive=False)
        self.clients_per_round = clients_per_round
        self.sampling = sampling
        self.local_epochs = local_epochs
        self.local_batch_size = local_batch_size
        self.local_lr = local_lr
        self.local_steps = local_steps
        self.fedsgd = fedsgd
        self.server_lr = server_lr
        self.server_momentum = server_momentum

    # -- protocol pieces used by the simulator and the Flower ServerApp ------------------------
    def check_population(self, num_users: int) -> None:
        if self.sampling == "fixed" and self.clients_per_round > num_users:
            raise InvalidArgument(
                f"clients_per_round={self.clients_per_round} must be <= the number of users "
                f"({num_users})"
            )
        if self.sampling == "poisson" and self.clients_per_round > num_users:
            raise InvalidArgument(
                f"clients_per_round (expected) must be <= the number of users ({num_users})"
            )

    def client_config(self, server_round: int, seed: int) -> dict[str, Any]:
        """The ``ConfigRecord`` sent to clients (Flower-style hyphenated keys)."""
        cfg = {
            "server-round": int(server_round),
            "local-epochs": float(self.local_epochs),
            "batch-size": int(self.local_batch_size),
            "lr": float(self.local_lr),
            "local-steps": int(self.local_steps),
            "fedsgd": bool(self.fedsgd),
            "seed": int(seed),
        }
        if getattr(self, "client_max_grad_norm", None) is not None:  # client DP-SGD (record level)
            cfg["dp-noise-multiplier"] = float(self.client_noise_multiplier)
            cfg["dp-max-grad-norm"] = float(self.client_max_grad_norm)
            cfg["dp-delta"] = float(self.client_delta)
        return cfg

    def plan(self, num_users: int, rounds: int) -> dict[str, Any]:
        """Round-independent server parameters (calibrated once per run)."""
        return {}

    def require_all_replies(self) -> bool:
        return False

    @abc.abstractmethod
    def aggregate(
        self,
        reference: Mapping[str, torch.Tensor],
        replies: Sequence[FitRes],
        *,
        num_selected: int,
        plan: Mapping[str, Any],
        generator: torch.Generator,
    ) -> tuple[dict[str, torch.Tensor], AggregateInfo]:
        """Combine the replies of one round into the new global state."""

    def account(
        self, ledger: DPLedger, plan: Mapping[str, Any], num_users: int, *, check: bool
    ) -> None:
        """Record one round in the ledger (``check``: raise before a round that would exceed the budget)."""

    def claim_for(self, ledger: DPLedger, num_users: int, plan: Mapping[str, Any]) -> PrivacyClaim:
        return self.claim()


@MECHANISMS.register("fedavg")
class FedAvg(_FedBase):
    """Federated Averaging (McMahan et al. 2017) without a privacy mechanism: the baseline.

    Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (FedAvg reduces unintended
    memorization compared to central training, thanks to non-IID users and clustering of each user's
    data, but gives no guarantee), ``../shared/papers/record-level-privacy-leakage-in-fl.txt`` (an
    eavesdropper on the global snapshots extracts records). Rounds sample M of N clients (without
    replacement) or each client with probability q (Poisson); the average is weighted by the clients'
    example counts. Threat model: honest-but-curious server / eavesdropper on snapshots / querier of
    the final model. Claim: heuristic (no formal guarantee). Audited on ``fl.rare_canary`` (the
    4-digit canary of ``fl.dp_fedavg`` saturates plain FedAvg's exposure).

    Args:
        clients_per_round: m, users per round (``"fixed"``: an integer in [1, N]; ``"poisson"``: the expected
            number, > 0 and <= N).
        sampling: ``"fixed"`` (m of N without replacement) or ``"poisson"`` (each user with probability m/N).
        local_epochs: E, local passes over a client's data; > 0 (fractions allowed).
        local_batch_size: B, local batch size, an integer in [1, 10**7].
        local_lr: eta, the local SGD learning rate; > 0.
        local_steps: a cap on local steps per round, an integer in [0, 10**9] (0 = no cap).
        fedsgd: one full-batch gradient step per round instead of local epochs (not with client DP-SGD).
        server_lr: the server learning rate applied to the aggregate; > 0.
        server_momentum: server momentum, in [0, 1) (post-processing).
        weighted: weight the average by the clients' example counts (``False`` = unweighted).
        client_noise_multiplier: client DP-SGD noise multiplier (>= 0), with ``client_max_grad_norm``; ``None`` =
            no client DP-SGD.
        client_max_grad_norm: client DP-SGD per-example clip norm (> 0), with ``client_noise_multiplier``.
        client_delta: the record-level delta of client DP-SGD, in (0, 1).

    Raises:
        InvalidArgument: an argument out of range, an unknown ``sampling``, or ``fedsgd`` with client DP-SGD.
        InvalidPrivacyParameter: client DP-SGD parameters out of range or only one of the two given.
    """

    scenario = "fl.rare_canary"

    def __init__(
        self,
        clients_per_round: float = 10,
        sampling: str = "fixed",
        local_epochs: float = 1.0,
        local_batch_size: int = 8,
        local_lr: float = 0.1,
        local_steps: int = 0,
        fedsgd: bool = False,
        server_lr: float = 1.0,
        server_momentum: float = 0.0,
        weighted: bool = True,
        client_noise_multiplier: float | None = None,
        client_max_grad_norm: float | None = None,
        client_delta: float = 1e-5,
    ) -> None:
        super().__init__(
            clients_per_round,
            sampling,
            local_epochs,
            local_batch_size,
            local_lr,
            local_steps,
            fedsgd,
            server_lr,
            server_momentum,
        )
        _check_client_dp(client_noise_multiplier, client_max_grad_norm, client_delta)
        if client_max_grad_norm is not None and fedsgd:
            raise InvalidArgument(
                "fedsgd=True (one full-batch step) cannot be combined with client DP-SGD"
            )
        self.weighted = weighted
        self.client_noise_multiplier = client_noise_multiplier
        self.client_max_grad_norm = client_max_grad_norm
        self.client_delta = client_delta

    def aggregate(self, reference, replies, *, num_selected, plan, generator):
        if not replies:
            raise ProtocolError("FedAvg round got no replies")
        _require_client_dp_metrics(self, replies)
        weights = [
            float(r.metrics.get("num-examples", 1.0)) if self.weighted else 1.0 for r in replies
        ]
        return weighted_average([r.arrays for r in replies], weights, reference)

    def claim_for(self, ledger: DPLedger, num_users: int, plan: Mapping[str, Any]) -> PrivacyClaim:
        rec = ledger.record_epsilon(self.client_delta)
        if self.client_max_grad_norm is None or rec is None:
            return self.claim()
        extra = {
            "record_epsilon": float(rec),
            "record_delta": float(self.client_delta),
            "record_epsilon_client_dp_sgd": float(rec),
            "user_epsilon": math.inf,
            "client_noise_multiplier": float(self.client_noise_multiplier),
            "client_max_grad_norm": float(self.client_max_grad_norm),
            "rounds": int(ledger.rounds),
            "num_users": int(num_users),
            "clients_with_dp_sgd": len(ledger.client_ledgers),
        }
        return PrivacyClaim.dp(
            rec,
            self.client_delta,
            "record",
            neighbouring="add/remove",
            accountant="dp_accounting.rdp (per-client PoissonSampledDpEvent DP-SGD steps)",
            ledger=ledger.to_dict(),
            extra=extra,
            adversaries=client_dp_adversary_bounds(rec, self.client_delta),
            notes=(
                _CLIENT_DP_NOTE,
                "user level: no guarantee (epsilon = inf): FedAvg neither "
                "clips user updates nor adds server noise",
            ),
        )

    def claim(self) -> PrivacyClaim:
        if self.client_max_grad_norm is not None:
            return PrivacyClaim.heuristic(
                "FedAvg with client DP-SGD: the record-level epsilon depends on how many rounds each client takes "
                "part in and on its data set size, so it is accounted per run (FedSimulator.run(...).claim); no "
                "user-level guarantee",
                extra={
                    "user_epsilon": math.inf,
                    "client_noise_multiplier": float(self.client_noise_multiplier),
                    "client_max_grad_norm": float(self.client_max_grad_norm),
                },
            )
        return PrivacyClaim.heuristic(
            "FedAvg: raw data stays on the clients, but every (weighted) model update and global snapshot can "
            "leak records; no clipping, no noise, no formal guarantee"
        )

    @classmethod
    def example(cls, preset: str = "quick") -> FedAvg:
        # the client hyperparameters of the fl.dp_fedavg scenario's presets
        return cls(
            clients_per_round=4 if preset == "quick" else 10,
            local_epochs=2,
            local_batch_size=8,
            local_lr=0.5,
        )


@MECHANISMS.register("dp_fedavg")
class DPFedAvg(_FedBase):
    """User-level DP-FedAvg (McMahan et al. 2018; Algorithm 1 of the FL memorization paper).

    Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (App. A.3: fixed-size rounds of
    m = qN users sampled without replacement, each user's model delta clipped to L2 norm S, the
    *unweighted* sum divided by the fixed denominator m, Gaussian noise of std z*S/m added once; RDP
    accounting of sampling without replacement, replace-one neighbours). Poisson rounds are accounted
    as Poisson sampling (add/remove). ``noise_multiplier=0`` is the paper's "clip only" mode (epsilon =
    inf). A round with fewer replies than planned fails closed (:class:`ProtocolError`): dividing by the
    number of replies, or weighting by example counts, would change the sensitivity. Optional client
    DP-SGD (``client_noise_multiplier``/``client_max_grad_norm``, ``fl-dp-sequence-tagging-ner.txt``)
    adds a record-level guarantee in the same ledger. Threat model: honest-but-curious server seeing
    every aggregate, eavesdropper on snapshots, querier of the final model. Claim: (epsilon, delta)-DP
    per user (dp_accounting RDP), record-level epsilon in ``extra``.

    Claim: (epsilon, delta)-DP per user (the paper's App. A.3), see above.

    Args:
        clip_norm: S, the L2 bound of each user's model delta; > 0.
        noise_multiplier: z, the server noise std relative to S, >= 0 (0 = clip only, epsilon = inf);
            ``None`` = calibrate z from ``target_epsilon`` and ``rounds``.
        target_epsilon: the user-level budget, > 0; a round that would exceed it is refused
            (``PrivacyBudgetExceeded``) when ``enforce_budget``.
        delta: the user-level delta, in (0, 1/N) (``None`` = ``min(1e-5, N^-1.1)``).
        rounds: the planned number of rounds, an integer >= 1 (needed to calibrate z; used by ``claim()``).
        num_users: N, the population size, an integer >= 1 (used by ``claim()``; 100 assumed when ``None``).
        clients_per_round: m, users per round (``"fixed"``: an integer in [1, N]; ``"poisson"``: the expected
            number, > 0 and <= N).
        sampling: ``"fixed"`` (m of N without replacement) or ``"poisson"`` (each user with probability m/N).
        local_epochs: E, local passes over a client's data; > 0 (fractions allowed).
        local_batch_size: B, local batch size, an integer in [1, 10**7].
        local_lr: eta, the local SGD learning rate; > 0.
        local_steps: a cap on local steps per round, an integer in [0, 10**9] (0 = no cap).
        fedsgd: one full-batch gradient step per round instead of local epochs (not with client DP-SGD).
        server_lr: the server learning rate applied to the aggregate; > 0.
        server_momentum: server momentum, in [0, 1) (post-processing).
        client_noise_multiplier: client DP-SGD noise multiplier (>= 0), with ``client_max_grad_norm``; ``None`` =
            no client DP-SGD.
        client_max_grad_norm: client DP-SGD per-example clip norm (> 0), with ``client_noise_multiplier``.
        client_delta: the record-level delta of client DP-SGD, in (0, 1).
        enforce_budget: refuse a round that would exceed ``target_epsilon``.

    Raises:
        InvalidPrivacyParameter: ``clip_norm``, ``noise_multiplier``, ``target_epsilon``, ``delta`` or the client
            DP-SGD parameters out of range, neither ``noise_multiplier`` nor ``target_epsilon`` given, or
            ``target_epsilon`` without ``rounds`` when z is calibrated.
        InvalidArgument: another argument out of range, or ``fedsgd`` with client DP-SGD.
        ProtocolError: (``aggregate``) a round with fewer replies than planned users (fails closed).
    """

    def __init__(
        self,
        clip_norm: float = 1.0,
        noise_multiplier: float | None = 1.0,
        target_epsilon: float | None = None,
        delta: float | None = None,
        rounds: int | None = None,
        num_users: int | None = None,
        clients_per_round: float = 10,
        sampling: str = "fixed",
        local_epochs: float = 1.0,
        local_batch_size: int = 8,
        local_lr: float = 0.1,
        local_steps: int = 0,
        fedsgd: bool = False,
        server_lr: float = 1.0,
        server_momentum: float = 0.0,
        client_noise_multiplier: float | None = None,
        client_max_grad_norm: float | None = None,
        client_delta: float = 1e-5,
        enforce_budget: bool = True,
    ) -> None:
        super().__init__(
            clients_per_round,
            sampling,
            local_epochs,
            local_batch_size,
            local_lr,
            local_steps,
            fedsgd,
            server_lr,
            server_momentum,
        )
        check_positive("clip_norm", clip_norm, error=InvalidPrivacyParameter)
        if noise_multiplier is not None:
            check_range(
                "noise_multiplier", noise_multiplier, 0.0, math.inf, error=InvalidPrivacyParameter
            )
        if target_epsilon is not None:
            check_positive("target_epsilon", target_epsilon, error=InvalidPrivacyParameter)
        if noise_multiplier is None and target_epsilon is None:
            raise InvalidPrivacyParameter(
                "pass noise_multiplier (>= 0; 0 = clip only) or target_epsilon (> 0)"
            )
        if noise_multiplier is None and rounds is None:
            raise InvalidPrivacyParameter(
                "target_epsilon without noise_multiplier needs rounds (>= 1) to calibrate z"
            )
        if delta is not None:
            check_delta(delta, None)
        if rounds is not None:
            check_range("rounds", rounds, 1, math.inf, integer=True)
        if num_users is not None:
            check_range("num_users", num_users, 1, math.inf, integer=True)
        _check_client_dp(client_noise_multiplier, client_max_grad_norm, client_delta)
        if client_max_grad_norm is not None and fedsgd:
            raise InvalidArgument(
                "fedsgd=True (one full-batch step) cannot be combined with client DP-SGD"
            )
        self.clip_norm = clip_norm
        self.noise_multiplier = noise_multiplier
        self.target_epsilon = target_epsilon
        self.delta = delta
        self.rounds = rounds
        self.num_users = num_users
        self.client_noise_multiplier = client_noise_multiplier
        self.client_max_grad_norm = client_max_grad_norm
        self.client_delta = client_delta
        self.enforce_budget = enforce_budget
        self._last_claim: PrivacyClaim | None = None

    # -- server plan ---------------------------------------------------------------------
    def delta_for(self, num_users: int) -> float:
        d = default_delta(num_users) if self.delta is None else float(self.delta)
        if d >= 1.0 / num_users:
            raise InvalidPrivacyParameter(
                f"delta must be < 1/N = {1.0 / num_users:.3g} for N={num_users} users; got {d}"
            )
        return d

    def plan(self, num_users: int, rounds: int) -> dict[str, Any]:
        self.check_population(num_users)
        delta = self.delta_for(num_users)
        z = self.noise_multiplier
        if z is None:
            z = calibrate_user_noise(
                self.target_epsilon,
                delta,
                sampling=self.sampling,
                num_users=num_users,
                clients_per_round=self.clients_per_round,
                rounds=int(self.rounds or rounds),
            )
        return {
            "noise_multiplier": float(z),
            "delta": delta,
            "denominator": float(self.clients_per_round),
            "clip_norm": float(self.clip_norm),
            "num_users": int(num_users),
        }

    def client_config(self, server_round: int, seed: int) -> dict[str, Any]:
        cfg = super().client_config(server_round, seed)
        cfg["clip-norm"] = float(
            self.clip_norm
        )  # honest clients clip locally too (Algorithm 1); the server re-clips
        return cfg

    def require_all_replies(self) -> bool:
        return True

    def aggregate(self, reference, replies, *, num_selected, plan, generator):
        if len(replies) < num_selected or (
            self.sampling == "fixed" and len(replies) < plan["denominator"]
        ):
            raise ProtocolError(
                f"DP-FedAvg round got {len(replies)} replies but {num_selected} clients were selected "
                f"(denominator m={plan['denominator']:g}); failing closed: averaging fewer updates "
                "with the same noise would not match the accounted mechanism"
            )
        if len(replies) > num_selected:
            raise ProtocolError(
                f"DP-FedAvg round got {len(replies)} replies for {num_selected} selected clients"
            )
        _require_client_dp_metrics(self, replies)
        return dp_average(
            [r.arrays for r in replies],
            reference,
            clip_norm=plan["clip_norm"],
            noise_multiplier=plan["noise_multiplier"],
            denominator=plan["denominator"],
            generator=generator,
        )

    def account(
        self, ledger: DPLedger, plan: Mapping[str, Any], num_users: int, *, check: bool
    ) -> None:
        args = (self.sampling, num_users, float(self.clients_per_round), plan["noise_multiplier"])
        if (
            check
            and self.enforce_budget
            and self.target_epsilon is not None
            and plan["noise_multiplier"] > 0
        ):
            ledger.check_round(*args, plan["delta"], self.target_epsilon)
        if not check:
            ledger.record_round(*args)

    # -- claims --------------------------------------------------------------------------
    def claim_for(self, ledger: DPLedger, num_users: int, plan: Mapping[str, Any]) -> PrivacyClaim:
        delta = plan["delta"]
        z = plan["noise_multiplier"]
        bounds = ledger.adversary_bounds(delta)
        eps = max(b.epsilon for b in bounds)  # the strongest named adversary: the server
        if z <= 0:
            eps = math.inf if ledger.rounds else 0.0
        neighbouring = "replace-one" if self.sampling == "fixed" else "add/remove"
        acct = (
            "per adversary: server / eavesdropper dp_accounting analytic Gaussian (no amplification, "
            "tail-bounded participations); observer of the released models dp_accounting.rdp ("
            + (
                "SampledWithoutReplacementDpEvent, REPLACE_ONE; accountant noise multiplier z/2)"
                if self.sampling == "fixed"
                else "PoissonSampledDpEvent, ADD_OR_REMOVE_ONE)"
            )
        )
        extra: dict[str, Any] = {
            "noise_multiplier": float(z),
            "clip_norm": float(self.clip_norm),
            "clients_per_round": float(self.clients_per_round),
            "num_users": int(num_users),
            "rounds": int(ledger.rounds),
            "sampling": self.sampling,
            "noise_std_on_average": float(z)
            * float(self.clip_norm)
            / float(self.clients_per_round),
        }
        if self.target_epsilon is not None:
            extra["target_epsilon"] = float(self.target_epsilon)
        notes = []
        if z == 0:
            notes.append(
                "clip only (noise_multiplier=0): bounded user contribution, no formal guarantee (epsilon = inf)"
            )
        rec = ledger.record_epsilon(self.client_delta)
        extra["user_epsilon"] = float(eps)
        extra["user_epsilon_amplified_release_only"] = float(
            min(b.epsilon for b in bounds) if z > 0 else eps
        )
        if rec is not None:
            # both bounds hold at once; they are reported side by side (different deltas, no min taken)
            extra["record_epsilon"] = float(rec)
            extra["record_delta"] = float(self.client_delta)
            extra["record_epsilon_client_dp_sgd"] = float(rec)
            extra["client_noise_multiplier"] = float(self.client_noise_multiplier)
            extra["client_max_grad_norm"] = float(self.client_max_grad_norm)
            if self.sampling == "fixed" and ledger.rounds:
                extra["record_epsilon_from_user_level"] = float(eps)
                extra["record_delta_from_user_level"] = float(delta)
            notes.append(
                f"record level: ({rec:.4g}, {self.client_delta:.3g})-DP per record from client DP-SGD"
                + (
                    f" and ({eps:.4g}, {delta:.3g}) implied by the user-level replace-one guarantee; "
                    if self.sampling == "fixed" and ledger.rounds
                    else "; "
                )
                + _CLIENT_DP_NOTE
            )
        elif self.sampling == "fixed" and ledger.rounds:
            extra["record_epsilon"] = float(eps)
            extra["record_delta"] = float(delta)
            notes.append(
                "record level: implied by the user-level replace-one guarantee (any change inside one user)"
            )
        return PrivacyClaim.dp(
            eps,
            delta,
            "user",
            neighbouring=neighbouring,
            accountant=acct,
            ledger=ledger.to_dict(),
            notes=tuple(notes),
            extra=extra,
            adversaries=bounds if z > 0 else (),
        )

    def claim(self) -> PrivacyClaim:
        if self._last_claim is not None:
            return self._last_claim
        n = self.num_users or 100
        rounds = self.rounds or 100
        plan = self.plan(n, rounds)
        ledger = DPLedger()
        for _ in range(rounds):
            ledger.record_round(
                self.sampling, n, float(self.clients_per_round), plan["noise_multiplier"]
            )
        c = self.claim_for(ledger, n, plan)
        note = f"planned claim for {rounds} rounds over N={n} users" + (
            "" if self.num_users else " (num_users not given: N=100 assumed)"
        )
        return PrivacyClaim.dp(
            c.epsilon,
            c.delta,
            c.unit,
            neighbouring=c.neighbouring,
            accountant=c.accountant,
            ledger=c.ledger,
            notes=(note,) + c.notes,
            extra=c.extra,
            adversaries=c.adversaries,
        )

    def deployment_claims(
        self, *, dim: int, levels: int = 1024, modulus_bits: int = 32, tls: bool = True
    ) -> dict[str, tuple[AdversaryBound, ...]]:
        """The user-level bound per adversary in each deployment mode of these parameters (the planned
        rounds over ``num_users``), for the card (issue 28 item 8):

        * central noise: the server adds the Gaussian noise to the clipped average (it is trusted with
          the noise, sees every update and the selection): :meth:`claim`'s adversaries;
        * SecAgg+ with distributed Skellam noise (the Flower deployment's secure mode, fixed-size rounds
          only): each client adds its share of the noise, the server sees only the SecAgg+ sum
          (:func:`~privnlp.mechanisms.federated.secagg.secagg_adversary_bounds`, reconstruction threshold
          t = m, zero-out neighbours with N public).

        Args:
            dim: the number of trainable model coordinates (the quantised vector's length).
            levels: SecAgg+'s quantisation levels (the deployment's default 1024).
            modulus_bits: SecAgg+'s modulus (at most 32 in Flower).
            tls: whether the deployment runs over TLS (what the eavesdropper sees).

        Returns:
            ``{mode: bounds}``; the SecAgg+ mode is left out for Poisson rounds (not supported there).
        """
        modes: dict[str, tuple[AdversaryBound, ...]] = {
            "central noise (the server adds it)": self.claim().adversaries
        }
        if self.sampling == "fixed":
            n = self.num_users or 100
            plan = self.plan(n, self.rounds or 100)
            m = int(self.clients_per_round)
            skellam = SkellamPlan(
                clip_norm=float(self.clip_norm),
                levels=int(levels),
                dim=int(dim),
                clients=m,
                min_survivors=m,
                noise_multiplier=float(plan["noise_multiplier"]),
                modulus_bits=int(modulus_bits),
            )
            modes["SecAgg+ with distributed Skellam noise (each client adds its share)"] = (
                secagg_adversary_bounds(
                    skellam,
                    rounds=int(self.rounds or 100),
                    population=n,
                    delta=plan["delta"],
                    tls=tls,
                )
            )
        return modes

    @classmethod
    def example(cls, preset: str = "quick") -> DPFedAvg:
        # rounds / num_users / clients_per_round match the fl.dp_fedavg scenario's presets, so the planned claim
        # is the claim of the audited run
        if preset == "full":
            return cls(
                clip_norm=0.5,
                noise_multiplier=1.0,
                rounds=60,
                num_users=35,
                clients_per_round=10,
                local_epochs=2,
                local_batch_size=8,
                local_lr=0.5,
            )
        return cls(
            clip_norm=0.5,
            noise_multiplier=1.0,
            rounds=12,
            num_users=8,
            clients_per_round=4,
            local_epochs=2,
            local_batch_size=8,
            local_lr=0.5,
        )


@LEAKY_TWINS.register("dp_fedavg")
class LeakyDPFedAvgWeighted(DPFedAvg):
    """Deliberately broken DP-FedAvg (a Flower-default-style aggregation): same claim, but the server
    averages *unclipped* updates weighted by example counts and divides by the number of replies, so one
    user (a large or malicious client) moves the model arbitrarily far; missing replies are tolerated.
    Caught by ``tests/federated/test_dp_fedavg.py::test_leaky_twin_is_caught``.

    Args:
        clip_norm: S, the L2 bound of each user's model delta; > 0.
        noise_multiplier: z, the server noise std relative to S, >= 0 (0 = clip only, epsilon = inf);
            ``None`` = calibrate z from ``target_epsilon`` and ``rounds``.
        target_epsilon: the user-level budget, > 0; a round that would exceed it is refused
            (``PrivacyBudgetExceeded``) when ``enforce_budget``.
        delta: the user-level delta, in (0, 1/N) (``None`` = ``min(1e-5, N^-1.1)``).
        rounds: the planned number of rounds, an integer >= 1 (needed to calibrate z; used by ``claim()``).
        num_users: N, the population size, an integer >= 1 (used by ``claim()``; 100 assumed when ``None``).
        clients_per_round: m, users per round (``"fixed"``: an integer in [1, N]; ``"poisson"``: the expected
            number, > 0 and <= N).
        sampling: ``"fixed"`` (m of N without replacement) or ``"poisson"`` (each user with probability m/N).
        local_epochs: E, local passes over a client's data; > 0 (fractions allowed).
        local_batch_size: B, local batch size, an integer in [1, 10**7].
        local_lr: eta, the local SGD learning rate; > 0.
        local_steps: a cap on local steps per round, an integer in [0, 10**9] (0 = no cap).
        fedsgd: one full-batch gradient step per round instead of local epochs (not with client DP-SGD).
        server_lr: the server learning rate applied to the aggregate; > 0.
        server_momentum: server momentum, in [0, 1) (post-processing).
        client_noise_multiplier: client DP-SGD noise multiplier (>= 0), with ``client_max_grad_norm``; ``None`` =
            no client DP-SGD.
        client_max_grad_norm: client DP-SGD per-example clip norm (> 0), with ``client_noise_multiplier``.
        client_delta: the record-level delta of client DP-SGD, in (0, 1).
        enforce_budget: refuse a round that would exceed ``target_epsilon``.

    Raises:
        InvalidPrivacyParameter: ``clip_norm``, ``noise_multiplier``, ``target_epsilon``, ``delta`` or the client
            DP-SGD parameters out of range, neither ``noise_multiplier`` nor ``target_epsilon`` given, or
            ``target_epsilon`` without ``rounds`` when z is calibrated.
        InvalidArgument: another argument out of range, or ``fedsgd`` with client DP-SGD.
    """

    def require_all_replies(self) -> bool:
        return False

    def aggregate(self, reference, replies, *, num_selected, plan, generator):
        weights = [float(r.metrics.get("num-examples", 1.0)) for r in replies]
        avg, info = weighted_average([r.arrays for r in replies], weights, reference)
        std = plan["noise_multiplier"] * plan["clip_norm"] / max(1, len(replies))
        out = {
            k: v + std * torch.randn(v.shape, generator=generator, dtype=v.dtype)
            for k, v in avg.items()
        }
        return out, AggregateInfo(len(replies), float(len(replies)), info.update_norms, 0, std)
