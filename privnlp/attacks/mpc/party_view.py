"""``party_view``: audit of what one MPC party received (paired with ``crypten_textcnn``).

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt (Sec. 3: "to any individual
party, their shares of x look like random noise"; only the label is revealed, to Bob).

For every recorded int64 tensor in :class:`~privnlp.core.observations.PartyView` ``received``:

* Kolmogorov-Smirnov test of the top 32 bits (as a fraction in [0, 1)) against U(0, 1); a
  tensor whose values are all in {0, 1} (a 1-bit binary opening, masked by a random bit) is
  tested as a fair coin instead;
* the per-bit frequencies of all 64 bits (binomial z-scores);
* the absolute Pearson correlation between the tensor decoded as 16-bit fixed point and the
  secret it carries (ground truth: the other party's private values).

Headline ``distinguishing_advantage`` = max over tensors of ``max(0, D_KS - c(alpha, n))``, the
KS distance beyond its critical value at ``alpha`` (Bonferroni over tensors): 0 when every
tensor is indistinguishable from uniform ring elements, up to ~1 for unmasked values.
``unexpected_openings`` counts opened values other than the label to Bob; any such opening sets
the headline to 1 (a perfect distinguisher from the ideal view: uniform shares + label to Bob).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument, check_probability
from privnlp.core.observations import PartyView
from privnlp.core.protocols import Attack, AttackResult
from privnlp.core.registry import ATTACKS

__all__ = ["PartyViewAudit", "uniformity_stats"]


def _unsigned_top32(v: np.ndarray) -> np.ndarray:
    u = np.asarray(v, dtype=np.int64).view(np.uint64)
    return (u >> np.uint64(32)).astype(np.float64) / 2.0**32


def uniformity_stats(values: Any) -> dict[str, float]:
    """KS distance / p-value of the top 32 bits vs U(0,1) and the max per-bit |z| of 64 bits.

    Args:
        values: ring elements (int64; the 0/1 case is tested as fair coin flips instead).

    Returns:
        ``n``, ``ks_d``, ``ks_p``, ``bit_z_max`` and ``binary`` (1.0 for 0/1 values).

    Raises:
        InvalidArgument: ``values`` is empty.
    """
    from scipy import stats

    v = np.asarray(values).astype(np.int64).ravel()
    n = v.size
    if n == 0:
        raise InvalidArgument("values must be non-empty")
    if np.all((v == 0) | (v == 1)):
        k = int(v.sum())
        p = float(stats.binomtest(k, n, 0.5).pvalue)
        d = abs(k / n - 0.5)
        return {"n": float(n), "ks_d": d, "ks_p": p, "bit_z_max": 2 * d * np.sqrt(n), "binary": 1.0}
    res = stats.kstest(_unsigned_top32(v), "uniform")
    u = v.view(np.uint64)
    bits = ((u[:, None] >> np.arange(64, dtype=np.uint64)[None, :]) & np.uint64(1)).astype(
        np.float64
    )
    z = np.abs(bits.mean(0) - 0.5) * 2 * np.sqrt(n)
    return {
        "n": float(n),
        "ks_d": float(res.statistic),
        "ks_p": float(res.pvalue),
        "bit_z_max": float(z.max()),
        "binary": 0.0,
    }


def _ks_critical(n: int, alpha: float) -> float:
    return float(np.sqrt(-0.5 * np.log(alpha / 2) / n))


@ATTACKS.register("party_view")
class PartyViewAudit(Attack):
    """Is anything a party received distinguishable from uniform ring elements? Was anything
    opened beyond the label to Bob?

    Args:
        alpha: family-wise significance level (Bonferroni over the tested tensors).
        min_elements: tensors with fewer elements are skipped.
    """

    paper: ClassVar[str] = "mpc-cnn-private-text-classification.txt"
    observation_type: ClassVar[type] = PartyView
    threat_model: ClassVar[ThreatModel] = ThreatModel(
        adversary=Adversary.MPC_PARTY,
        observes=("everything one party received", "values opened to it"),
        knows=("the protocol", "the architecture", "its own inputs"),
        goal="distinguish the other party's shares from random / read its private values",
    )
    headline_metric: ClassVar[str] = "distinguishing_advantage"

    def __init__(self, alpha: float = 1e-3, min_elements: int = 64) -> None:
        check_probability("alpha", alpha, open_low=True, open_high=True)
        self.alpha = alpha
        self.min_elements = min_elements

    def run(self, observation: PartyView, *, rng: Any = None) -> AttackResult:
        if not isinstance(observation, PartyView):
            raise InvalidArgument(
                f"observation must be a PartyView; got {type(observation).__name__}"
            )
        tested = {
            k: np.asarray(v)
            for k, v in observation.received.items()
            if np.asarray(v).size >= self.min_elements
        }
        m = max(1, len(tested))
        per: dict[str, dict[str, float]] = {}
        adv = 0.0
        rejected = 0
        for k, v in tested.items():
            s = uniformity_stats(v)
            crit = (
                _ks_critical(int(s["n"]), self.alpha / m)
                if not s["binary"]
                else float(np.sqrt(-0.5 * np.log(self.alpha / m / 2) / s["n"]))
            )
            s["advantage"] = max(0.0, s["ks_d"] - crit)
            per[k] = s
            adv = max(adv, s["advantage"])
            rejected += int(s["ks_p"] < self.alpha / m)
        allowed = {"label"} if observation.party == "bob" else set()
        allowed |= (
            {"logit"} if observation.party == "bob" and "logit" in observation.opened else set()
        )
        unexpected = sorted(k for k in observation.opened if k not in allowed)
        # the attacker's best guess of a secret: its share read as 16-bit fixed point
        recon = {
            k: np.asarray(v).astype(np.int64).astype(np.float64) / 2.0**16
            for k, v in tested.items()
            if k.startswith(("share/", "plain/"))
        }
        raw = {
            "per_tensor": per,
            "n_tested": len(tested),
            "n_rejected": rejected,
            "advantage": adv,
            "unexpected_openings": unexpected,
            "party": observation.party,
            "opened_keys": sorted(observation.opened),
        }
        return AttackResult(
            attack=self.name or "party_view", reconstructions=(recon,), raw=raw, scorer=_score
        )


def _score(result: AttackResult, ground_truth: Any) -> Mapping[str, float]:
    """``ground_truth``: mapping secret-name -> private values, e.g. ``{"bob_input": x}`` for
    Alice's view, ``{"alice_weights/conv.weight": w, ...}`` for Bob's."""
    raw = result.raw
    recon = result.reconstructions[0] if result.reconstructions else {}
    corr = 0.0
    for key, guess in recon.items():
        name = key.split("/", 1)[1]
        if not isinstance(ground_truth, Mapping) or name not in ground_truth:
            continue
        t = np.asarray(ground_truth[name], np.float64).ravel()
        g = np.asarray(guess).ravel()
        k = min(len(g), len(t))
        if k < 3 or np.std(g[:k]) == 0 or np.std(t[:k]) == 0:
            continue
        corr = max(corr, abs(float(np.corrcoef(g[:k], t[:k])[0, 1])))
    # an opened value beyond the label to Bob is a perfect distinguisher from the ideal view
    adv = 1.0 if raw["unexpected_openings"] else float(raw["advantage"])
    return {
        "distinguishing_advantage": adv,
        "share_distinguishing_advantage": float(raw["advantage"]),
        "max_abs_correlation_with_secret": corr,
        "fraction_rejected_uniform": raw["n_rejected"] / max(1, raw["n_tested"]),
        "unexpected_openings": float(len(raw["unexpected_openings"])),
        "label_only_to_bob": float(
            not raw["unexpected_openings"]
            and (raw["party"] != "bob" or "label" in raw["opened_keys"])
        ),
    }
