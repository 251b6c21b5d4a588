"""White-box audits of ``dp_fedavg`` (and its leaky twin): canary clients at the user level.

Papers: Nasr et al. 2021 (white-box Dirac canaries), Jagielski et al. 2020 (Clopper-Pearson),
Steinke, Nasr & Jagielski 2023 and Mahloujifar, Melis & Chaudhuri 2025 (one run); the audited mechanism
is DP-FedAvg (``../shared/papers/unintended-memorization-under-fl.txt``, Algorithm 1; App. A.3 for the
fixed-size rounds and replace-one neighbours that ``dp_fedavg`` claims).

Setting. The adversary is the honest-but-curious server of the claim's threat model, with a malicious
canary client: it sees the aggregate of every round. The audited code path is the server's own:
``mech.plan(N, rounds)`` then ``mech.aggregate(reference, replies, num_selected=M, plan=plan,
generator=...)`` -- exactly what :class:`~privnlp.mechanisms.federated.FedSimulator` calls each round
(local training is skipped: a malicious client sends whatever update it likes). Every user takes
part in the round (``clients_per_round = num_users``, fixed-size sampling: no amplification).

* **Repeated rounds**: ``M - 1`` benign users send fixed random updates that are zero on coordinate 0;
  the canary user sends ``+1000 e_0`` on ``D'`` and ``-1000 e_0`` on ``D`` (``dp_fedavg`` claims
  replace-one neighbours: replacing one user's update by its opposite is the worst case, a change of
  ``2S`` after clipping). Statistic: coordinate 0 of the aggregate; one round per trial.
* **One run**: ``m`` canary users, user ``i`` sends ``+1000 e_i`` or ``-1000 e_i`` with probability 1/2
  each, plus two benign users; one round; the score of canary ``i`` is coordinate ``i``.

The claim audited is the mechanism's planned claim for that configuration (one round of ``M`` of ``M``
users, replace-one): its headline, the epsilon against the server (no amplification: one Gaussian
of noise multiplier z/2, dp_accounting's analytic Gaussian privacy loss). The headline bounds of both
games are the Gaussian conversions, valid here because the audited round is one Gaussian step
(:func:`~privnlp.auditing.bounds.headline_bound`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from privnlp.mechanisms.federated import FitRes

from .bounds import DEFAULT_CONFIDENCE, headline_bound, one_run_audit, threshold_audit
from .result import DPAuditResult, qualname
from .training import _ideal_gaussian_one_run

__all__ = ["audit_dp_fedavg", "AUDIT_PRESETS"]

AUDIT_PRESETS = {
    "quick": {"epsilons": (4.0,), "trials": 4000, "twin_trials": 500, "canaries": 1000, "users": 4},
    "full": {
        "epsilons": (4.0, 1.0),
        "trials": 40000,
        "twin_trials": 4000,
        "canaries": 5000,
        "users": 4,
    },
}
DELTA = 1e-5
CLIP = 0.5
CANARY_SCALE = 1000.0
DIM = 16
EXAMPLES_PER_USER = 8


def _mechanism(cls: Any, target_epsilon: float, users: int) -> tuple[Any, dict, Any]:
    """The audited instance, its plan and its claim for one round of ``users`` of ``users`` users."""
    mech = cls(
        clip_norm=CLIP,
        noise_multiplier=None,
        target_epsilon=float(target_epsilon),
        delta=DELTA,
        rounds=1,
        num_users=int(users),
        clients_per_round=int(users),
        sampling="fixed",
    )
    plan = mech.plan(int(users), 1)
    return mech, plan, mech.claim()


def _replies(updates: np.ndarray) -> list:

    return [
        FitRes(
            {"w": torch.from_numpy(u.astype(np.float32))},
            {"num-examples": float(EXAMPLES_PER_USER)},
        )
        for u in updates
    ]


def _repeated(
    cls: Any,
    name: str,
    system: str,
    target_epsilon: float,
    users: int,
    trials: int,
    seed: int,
    confidence: float,
) -> DPAuditResult:

    t0 = time.perf_counter()
    mech, plan, claim = _mechanism(cls, target_epsilon, users)
    ss = np.random.SeedSequence([seed, 0xFED])
    s_data, s_in, s_out, s_split = ss.spawn(4)
    benign = np.random.default_rng(s_data).standard_normal((users - 1, DIM)) * 0.1
    benign[:, 0] = 0.0
    reference = {"w": torch.zeros(DIM)}
    scores = {}
    for label, sign, s in (("in", 1.0, s_in), ("out", -1.0, s_out)):
        canary = np.zeros(DIM)
        canary[0] = sign * CANARY_SCALE
        replies = _replies(np.vstack([benign, canary[None]]))
        gen = torch.Generator().manual_seed(int(s.generate_state(1)[0]))
        vals = np.empty(trials)
        for t in range(trials):
            out, _ = mech.aggregate(
                reference, replies, num_selected=users, plan=plan, generator=gen
            )
            vals[t] = float(out["w"][0])
        scores[label] = vals
    bounds = threshold_audit(
        scores["out"],
        scores["in"],
        delta=float(claim.delta),
        confidence=confidence,
        rng=np.random.default_rng(s_split),
    )
    return DPAuditResult(
        mechanism=name,
        system=system,
        implementation=qualname(cls),
        variant="white-box canary client (+/-1000 e_0, replace-one), one DP-FedAvg round, repeated rounds",
        claimed_epsilon=float(claim.epsilon),
        claimed_delta=float(claim.delta),
        unit="user",
        audited=bounds["gdp_clopper_pearson"],
        others=(bounds["clopper_pearson"],),
        config={
            "noise_multiplier": plan["noise_multiplier"],
            "clip_norm": CLIP,
            "users": users,
            "clients_per_round": users,
            "rounds": 1,
            "target_epsilon": target_epsilon,
            "rounds_per_side": trials,
            "update_dim": DIM,
            "statistic": "aggregate projected on the canary coordinate",
            "accountant": claim.accountant,
        },
        seconds=time.perf_counter() - t0,
        calls=2 * trials,
        seed=seed,
        notes=(
            "headline: GDP bound (mu from Clopper-Pearson on FPR/FNR, converted at delta; one round of M "
            "of M users is one Gaussian step); the other bound assumes nothing about the mechanism's "
            "trade-off curve; the claim is the server's (no amplification: the analytic Gaussian), "
            "so a tight audit approaches it",
        ),
    )


def _one_run(
    cls: Any, name: str, system: str, target_epsilon: float, m: int, seed: int, confidence: float
) -> DPAuditResult:

    t0 = time.perf_counter()
    users = m + 2
    mech, plan, claim = _mechanism(cls, target_epsilon, users)
    ss = np.random.SeedSequence([seed, 0xFED1])
    s_inc, s_data, s_noise, s_ties = ss.spawn(4)
    inc = np.random.default_rng(s_inc).random(m) < 0.5
    dim = m + 4
    ups = np.zeros((users, dim))
    ups[np.arange(m), np.arange(m)] = np.where(inc, CANARY_SCALE, -CANARY_SCALE)
    ups[m:, m:] = np.random.default_rng(s_data).standard_normal((2, 4)) * 0.1
    out, _ = mech.aggregate(
        {"w": torch.zeros(dim)},
        _replies(ups),
        num_selected=users,
        plan=plan,
        generator=torch.Generator().manual_seed(int(s_noise.generate_state(1)[0])),
    )
    scores = out["w"].numpy().astype(np.float64)[:m]
    bounds = one_run_audit(
        scores,
        inc,
        delta=float(claim.delta),
        confidence=confidence,
        rng=np.random.default_rng(s_ties),
    )
    # one round of M of M users: one Gaussian step, the f-DP conversion is a lower bound
    head, others = headline_bound(bounds, gaussian_shaped=True)
    z = float(plan["noise_multiplier"])
    ideal = _ideal_gaussian_one_run(
        2.0 / z if z > 0 else np.inf, m, float(claim.delta), confidence, seed
    )
    return DPAuditResult(
        mechanism=name,
        system=system,
        implementation=qualname(cls),
        variant=f"white-box canary clients, one run (m={m} canary users, one DP-FedAvg round)",
        claimed_epsilon=float(claim.epsilon),
        claimed_delta=float(claim.delta),
        unit="user",
        audited=head,
        others=others,
        config={
            "noise_multiplier": z,
            "clip_norm": CLIP,
            "users": users,
            "clients_per_round": users,
            "rounds": 1,
            "target_epsilon": target_epsilon,
            "canaries": m,
            "ideal_gaussian_same_setting": ideal,
        },
        seconds=time.perf_counter() - t0,
        calls=1,
        seed=seed,
        notes=(
            "reference: the same one-run analyses on an ideal Gaussian mechanism with the same mu and m, "
            f"simulated here: f-DP {ideal['fdp_gaussian_one_run']:.3f}, "
            f"Steinke et al. {ideal['steinke_one_run']:.3f}",
        ),
    )


def audit_dp_fedavg(
    cls: Any,
    *,
    name: str = "dp_fedavg",
    system: str = "defense",
    preset: str = "quick",
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> list[DPAuditResult]:
    """Audit ``cls`` (``dp_fedavg``'s class or its leaky twin): repeated rounds, then one run."""
    p = AUDIT_PRESETS[preset]
    trials = p["trials"] if system == "defense" else p["twin_trials"]
    out = [
        _repeated(cls, name, system, eps, p["users"], trials, seed, confidence)
        for eps in p["epsilons"]
    ]
    out.append(_one_run(cls, name, system, p["epsilons"][0], p["canaries"], seed, confidence))
    return out
