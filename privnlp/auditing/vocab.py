"""Audit of ``dp_wordpiece`` (and its leaky twin): canary words contributed by one document, over
repeated builds.

Papers: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (Section 3.2, the DP word histogram that the
WordPiece vocabulary is post-processing of); Jagielski et al. 2020 (Clopper-Pearson bound).

Setting. The adversary of the claim's threat model (a data recipient who knows every other contributor's
data and sees the released noisy histogram) runs the mechanism as a user would,
``cls(epsilon, delta, max_words_per_contributor=k).release_histogram(texts, rng=seed)`` (the histogram
is what :meth:`DPWordPiece.build` trains the tokenizer on; the vocabulary is post-processing of it).
The corpus ``D`` has 40 documents (more when the release threshold needs it: threshold + 10 noise
scales) that each use the same ``k`` common words; ``D'`` adds one canary
document that uses those ``k`` words, each repeated 4 times (a correct implementation counts the
document once per word; one that counts occurrences, or does not cap contributions, counts it more).
The words are common, so they are released on both sides and the threshold plays no part: the test
is on the ``epsilon`` part of the guarantee. With ``x_j`` the released noisy count of canary word ``j``
minus its count without the canary (a missing word: minus the count), two statistics (Bonferroni): the
log-likelihood ratio of the claimed Laplace mechanism, ``sum_j clip(x_j, 0, 1)`` (the most powerful test
against a correct implementation), and ``sum_j x_j`` (stronger against double counting). One build per
trial; the threshold is chosen on 30% of the builds, the bound computed on the other 70%.

With ``k = 1`` the likelihood-ratio test has ratio exactly ``e^eps``, so the audit can be tight; with
``k > 1`` the full privacy loss ``eps`` is reached only when all ``k`` words land high (probability about
``2^-k``), so the audit needs many more builds (the full preset audits k = 1 and k = 4; the card's k = 8 /
16 is out of reach of a few thousand builds and would report a bound near 0).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from privnlp.core.registry import MECHANISMS

from .bounds import DEFAULT_CONFIDENCE, EpsilonBound, threshold_audit
from .result import DPAuditResult, qualname

__all__ = ["audit_dp_wordpiece", "AUDIT_PRESETS"]

AUDIT_PRESETS = {
    "quick": {"ks": (1,), "trials": 4000, "twin_trials": 500},
    "full": {"ks": (1, 4), "trials": 30000, "twin_trials": 3000},
}
N_DOCS = 40
REPEATS = 4


def _build_trials(
    mech: Any, texts: list[str], words: list[str], counts: dict, trials: int, seed: Any
) -> np.ndarray:
    """(trials, k) released noisy count minus the count without the canary (a missing word: -count)."""
    g = np.random.default_rng(seed)
    out = np.empty((trials, len(words)))
    for t in range(trials):
        h = mech.release_histogram(texts, rng=g)
        out[t] = [float(h.counts.get(w, 0.0)) - counts[w] for w in words]
    return out


#: the two test statistics (each bound at confidence 1 - (1-confidence)/2, the larger one reported:
#: Bonferroni): the log-likelihood ratio of the *claimed* Laplace mechanism for a shift of 1 per word
#: (``sum_j clip(x_j, 0, 1)``, the most powerful test against a correct implementation), and the plain sum
#: (more powerful against an implementation that counts a contributor more than once)
STATISTICS = {
    "laplace_llr": lambda x: np.clip(x, 0.0, 1.0).sum(axis=1),
    "sum": lambda x: x.sum(axis=1),
}


def _repeated(
    cls: Any, name: str, system: str, k: int, preset: str, trials: int, seed: int, confidence: float
) -> DPAuditResult:
    t0 = time.perf_counter()
    ex = MECHANISMS.get(name).example(preset)
    k = int(k or ex.max_words_per_contributor)
    mech = cls(
        epsilon=ex.epsilon, delta=ex.delta, max_words_per_contributor=k, vocab_size=ex.vocab_size
    )
    claim = mech.claim()
    cal = mech.calibration()
    # enough documents that the common words clear the release threshold on both sides (10 noise scales)
    n_docs = max(N_DOCS, int(math.ceil(cal.threshold + 10.0 * cal.scale)))
    words = [f"common{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(k)]
    corpus = [" ".join(words)] * n_docs
    canary = " ".join(w for w in words for _ in range(REPEATS))
    counts = {w: float(n_docs) for w in words}
    ss = np.random.SeedSequence([seed, 0x70CAB])
    s_in, s_out, s_split = ss.spawn(3)
    pos = _build_trials(mech, corpus + [canary], words, counts, trials, s_in)
    neg = _build_trials(mech, corpus, words, counts, trials, s_out)
    per_stat = {}
    for sname, fn in STATISTICS.items():
        b = threshold_audit(
            fn(neg),
            fn(pos),
            delta=float(claim.delta),
            confidence=1.0 - (1.0 - confidence) / 2,
            rng=np.random.default_rng(s_split),
            methods=("clopper_pearson",),
        )["clopper_pearson"]
        per_stat[sname] = b
    sname, b = max(per_stat.items(), key=lambda kv: kv[1].epsilon)
    best = EpsilonBound(
        b.epsilon,
        b.method,
        b.delta,
        float(confidence),
        b.trials,
        b.mu,
        {
            **b.details,
            "statistic": sname,
            "bonferroni_tests": len(STATISTICS),
            **{f"epsilon_{k}": v.epsilon for k, v in per_stat.items()},
        },
    )
    return DPAuditResult(
        mechanism=name,
        system=system,
        implementation=qualname(cls),
        variant=f"canary document (k={k} common words x{REPEATS}), released histogram, repeated builds",
        claimed_epsilon=float(claim.epsilon),
        claimed_delta=float(claim.delta),
        unit=claim.unit.value,
        audited=best,
        config={
            "epsilon": ex.epsilon,
            "delta": ex.delta,
            "max_words_per_contributor": k,
            "noise": mech.noise,
            "documents": n_docs,
            "release_threshold": cal.threshold,
            "canary_repeats": REPEATS,
            "builds_per_side": trials,
            "statistics": "x_j = released noisy count - count without the canary, per canary word; "
            "sum_j clip(x_j, 0, 1) (Laplace log-likelihood ratio) and sum_j x_j, Bonferroni",
        },
        seconds=time.perf_counter() - t0,
        calls=2 * trials,
        seed=seed,
    )


def audit_dp_wordpiece(
    cls: Any,
    *,
    name: str = "dp_wordpiece",
    system: str = "defense",
    preset: str = "quick",
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> list[DPAuditResult]:
    p = AUDIT_PRESETS[preset]
    trials = p["trials"] if system == "defense" else p["twin_trials"]
    return [_repeated(cls, name, system, k, preset, trials, seed, confidence) for k in p["ks"]]
