"""Canary exposure (the secret sharer) for causal and masked LMs.

Papers: ``../shared/papers/unintended-memorization-under-fl.txt`` (App. A.1, the secret-sharer
framework of Carlini et al. 2019 adapted to FL) and ``../shared/papers/dp-bert-and-dp-wordpiece.txt``
(Sec. 5.2: HS / HSH / HHSHH secrets in a masked LM, exposure vs number of occurrences, DP vs non-DP).

Definitions (Carlini et al. 2019):

* log-perplexity of a candidate ``s``: ``-log2 Pr(s)`` under the model (causal LMs), or minus the
  pseudo-log-likelihood of the secret word (masked LMs);
* ``rank(canary)`` = 1 + number of *other* candidates of the randomness space ``R`` whose
  log-perplexity is **lower than or equal to** the canary's (ties count against the canary, so
  a constant model gives rank ``|R|`` and exposure 0, never a spurious positive);
* ``exposure = log2 |R| - log2 rank`` in ``[0, log2 |R|]``.

When ``|R|`` is small the space is enumerated (exact). Otherwise a sample of the space is scored,
a skew-normal is fitted to the sampled log-perplexities (``scipy.stats.skewnorm``) and
``exposure ~= -log2 P(X <= canary's log-perplexity)``, computed from the log-CDF (falls back to a
log-space integral of the log-pdf deep in the tail, where ``log(cdf)`` underflows to ``-inf``).

Threat model: black-box querier of the released model who knows the canary format and its
randomness space, not the secret.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats
from scipy.special import logsumexp

from privnlp.attacks.memorization._lm import LN2, causal_log_probs, masked_pll
from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument, check_range
from privnlp.core.observations import BlackBoxLM
from privnlp.core.protocols import Attack, AttackResult
from privnlp.core.registry import ATTACKS
from privnlp.core.rng import as_numpy
from privnlp.data.canaries import Canary, enumerate_space, make_canary, sample_space

__all__ = [
    "ExposureEstimate",
    "rank_with_ties",
    "exposure_from_rank",
    "exact_exposure",
    "extrapolated_exposure",
    "skewnorm_log_cdf",
    "canary_template",
    "make_masked_secret",
    "MASKED_FORMATS",
    "score_candidates",
    "canary_exposure",
    "CanaryExposure",
    "BLACK_BOX_CANARY",
]

BLACK_BOX_CANARY = ThreatModel(
    adversary=Adversary.BLACK_BOX_QUERIER,
    observes=("log-probabilities of the released (causal or masked) LM on chosen inputs",),
    knows=("the canary format (pattern) and its randomness space", "the tokenizer"),
    goal="measure / extract the secret of a canary inserted into the training data",
)

MASKED_FORMATS = ("HS", "HSH", "HHSHH")


# ----------------------------------------------------------------------------- the formula
def rank_with_ties(canary_score: float, reference: Sequence[float] | np.ndarray) -> int:
    """1 + number of reference log-perplexities ``<=`` the canary's (ties count against it).

    ``reference`` are the *other* candidates of the space (the canary itself excluded).
    NaN scores (a broken model) count against the canary too.

    Args:
        canary_score: the canary's log-perplexity (lower = more likely).
        reference: the other candidates' log-perplexities.

    Returns:
        The rank, in [1, len(reference) + 1].
    """
    ref = np.asarray(reference, dtype=float)
    c = float(canary_score)
    if math.isnan(c):
        return int(ref.size) + 1
    return int(1 + np.count_nonzero((ref <= c) | np.isnan(ref)))


def exposure_from_rank(rank: int, space_size: int) -> float:
    """``log2 |R| - log2 rank`` (rank in ``[1, |R|]``).

    Args:
        rank: the canary's rank, an integer in [1, space_size].
        space_size: |R|, the size of the randomness space, an integer >= 1.

    Returns:
        Exposure in bits, in [0, log2 |R|].

    Raises:
        InvalidArgument: ``rank`` or ``space_size`` out of range.
    """
    check_range("space_size", space_size, 1, math.inf, integer=True)
    check_range("rank", rank, 1, space_size, integer=True)
    return float(math.log2(space_size) - math.log2(rank))


def skewnorm_log_cdf(x: float, a: float, loc: float, scale: float) -> float:
    """``log P(X <= x)`` for a skew-normal, stable deep in the lower tail.

    Args:
        x: the point.
        a: skewness parameter (``scipy.stats.skewnorm``).
        loc: location.
        scale: scale; > 0.

    Returns:
        The natural-log CDF at ``x`` (``-inf`` when even the integral underflows).
    """

    v = float(stats.skewnorm.logcdf(x, a, loc=loc, scale=scale))
    if math.isfinite(v) and v > -600:
        return v
    # log-space integral of the density over [x - w, x]; the tail mass is concentrated near x.
    for width in (0.5, 2.0, 10.0):
        grid = np.linspace(x - width * scale, x, 20001)
        lp = stats.skewnorm.logpdf(grid, a, loc=loc, scale=scale)
        if np.isfinite(lp).any():
            dt = grid[1] - grid[0]
            return float(logsumexp(lp) + math.log(dt))
    return -math.inf


@dataclass(frozen=True)
class ExposureEstimate:
    """An exposure measurement. ``exposure`` is capped to ``[0, log2 |R|]``; ``raw_exposure`` is
    the uncapped extrapolated value (equal to ``exposure`` for the exact method).

    Attributes:
        exposure: exposure in bits, in [0, log2 |R|].
        rank: the canary's rank (estimated as ``2^(log2 |R| - exposure)`` when extrapolated).
        space_size: |R|, the size of the randomness space.
        method: ``"exact"`` or ``"extrapolated"``.
        canary_log_perplexity: the canary's log-perplexity in bits.
        raw_exposure: the uncapped value.
        fit: the skew-normal ``(a, loc, scale)`` of an extrapolation (``None`` when exact or constant).
        n_reference: the number of other candidates scored.
    """

    exposure: float
    rank: float
    space_size: int
    method: str  # "exact" | "extrapolated"
    canary_log_perplexity: float
    raw_exposure: float
    fit: tuple[float, float, float] | None = None  # skewnorm (a, loc, scale)
    n_reference: int = 0

    @property
    def log2_space(self) -> float:
        return math.log2(self.space_size)


def exact_exposure(
    canary_score: float, reference: Sequence[float], space_size: int | None = None
) -> ExposureEstimate:
    """Exposure from the full enumeration: ``reference`` = every other candidate's log-perplexity.

    Args:
        canary_score: the canary's log-perplexity.
        reference: the log-perplexities of all other candidates (``space_size - 1`` of them).
        space_size: |R| (default: ``len(reference) + 1``).

    Returns:
        The exact estimate.

    Raises:
        InvalidArgument: ``reference`` does not hold ``space_size - 1`` scores.
    """
    ref = np.asarray(reference, dtype=float)
    size = int(ref.size + 1 if space_size is None else space_size)
    if ref.size + 1 != size:
        raise InvalidArgument(
            f"reference must hold all other candidates (space_size - 1 = {size - 1}); got {ref.size}"
        )
    r = rank_with_ties(canary_score, ref)
    e = exposure_from_rank(r, size)
    return ExposureEstimate(e, float(r), size, "exact", float(canary_score), e, None, int(ref.size))


def extrapolated_exposure(
    canary_score: float, sample: Sequence[float], space_size: int
) -> ExposureEstimate:
    """Exposure from a uniform sample of the space: skew-normal fit of the sampled log-perplexities,
    ``exposure = -log2 P(X <= canary)`` (Carlini et al. 2019, Sec. 4.3), capped to ``[0, log2 |R|]``.

    Args:
        canary_score: the canary's log-perplexity.
        sample: log-perplexities of candidates drawn uniformly from the space (at least 10 finite).
        space_size: |R|, an integer >= 2.

    Returns:
        The extrapolated estimate.

    Raises:
        InvalidArgument: fewer than 10 finite sample scores, or ``space_size`` < 2.
    """

    s = np.asarray(sample, dtype=float)
    s = s[np.isfinite(s)]
    if s.size < 10:
        raise InvalidArgument(f"sample must hold at least 10 finite log-perplexities; got {s.size}")
    check_range("space_size", space_size, 2, math.inf, integer=True)
    c = float(canary_score)
    if np.ptp(s) == 0:  # a constant model: the canary ties with everything -> no exposure
        lcdf = 0.0 if c >= s[0] else -math.inf
        fit = None
    else:
        a, loc, scale = stats.skewnorm.fit(s)
        fit = (float(a), float(loc), float(scale))
        lcdf = skewnorm_log_cdf(c, *fit) if math.isfinite(c) else 0.0
    raw = -lcdf / math.log(2.0)
    log2r = math.log2(space_size)
    e = float(min(max(raw, 0.0), log2r))
    rank = float(2.0 ** (log2r - e))
    return ExposureEstimate(
        e, rank, int(space_size), "extrapolated", c, float(raw), fit, int(s.size)
    )


# ----------------------------------------------------------------------------- canaries
def canary_template(pattern: str, vocabulary: Sequence[str] | None = None) -> Canary:
    """The public part of a canary: pattern + randomness space, secret blanked (what the attacker knows).

    Args:
        pattern: the canary pattern (see :func:`~privnlp.data.make_canary`).
        vocabulary: the words of ``{words:N}`` placeholders.

    Returns:
        A :class:`~privnlp.data.Canary` with ``secret``, ``text`` and ``values`` empty.

    Raises:
        InvalidArgument: a pattern without a known placeholder.
    """
    c = make_canary(pattern, rng=np.random.default_rng(0), vocabulary=vocabulary)
    return replace(c, secret="", text="", values=())


def make_masked_secret(
    fmt: str = "HSH",
    *,
    rng: Any,
    generic_words: Sequence[str] | None = None,
    secret_words: Sequence[str] | None = None,
) -> Canary:
    """A DP-BERT style secret: ``fmt`` in HS / HSH / HHSHH, H = a generic word (fixed, drawn from
    ``generic_words``), S = the secret word drawn uniformly from ``secret_words``.

    Args:
        fmt: ``"HS"``, ``"HSH"`` or ``"HHSHH"``.
        rng: randomness of the generic words and the secret (keyword-only).
        generic_words: the H words (default: a fixed list of common words).
        secret_words: the S vocabulary (default: ``DEFAULT_WORDS``).

    Returns:
        The canary (one ``{words:1}`` slot).

    Raises:
        InvalidArgument: unknown ``fmt``.
    """
    if fmt not in MASKED_FORMATS:
        raise InvalidArgument(f"fmt must be one of {MASKED_FORMATS}; got {fmt!r}")
    g = as_numpy(rng)
    generic = list(
        generic_words or ("the", "patient", "was", "given", "today", "after", "visit", "with")
    )
    parts = [
        str(generic[int(g.integers(len(generic)))]) if ch == "H" else "{words:1}" for ch in fmt
    ]
    return make_canary(" ".join(parts), rng=g, vocabulary=secret_words)


def _secret_span(canary: Canary, text: str) -> tuple[int, int]:
    if len(canary.slots) != 1:
        raise InvalidArgument(
            f"canary: masked-LM exposure scores one contiguous secret span, so the pattern must have "
            f"exactly 1 placeholder (e.g. 'my pin is {{digits:4}}'); got {len(canary.slots)} in "
            f"{canary.pattern!r}"
        )
    start = len(canary.prefix)
    suffix_len = len(canary.pattern) - canary.pattern.index("}", start) - 1
    return start, len(text) - suffix_len


def score_candidates(
    model: Any,
    tokenizer: Any,
    canary: Canary,
    texts: Sequence[str],
    *,
    kind: str = "causal",
    batch_size: int = 256,
) -> np.ndarray:
    """Log-perplexity (bits; lower = more likely) of candidate texts of ``canary``'s space.

    Args:
        model: the LM.
        tokenizer: its tokenizer.
        canary: the canary (or template) the texts come from; a masked LM needs exactly one placeholder.
        texts: candidate texts.
        kind: ``"causal"`` (log-probability of the whole text) or ``"masked"`` (pseudo-log-likelihood of the
            secret span).
        batch_size: texts per forward pass.

    Returns:
        One log-perplexity per text, in bits.

    Raises:
        InvalidArgument: unknown ``kind``, or a masked-LM canary with other than one placeholder.
    """

    if kind == "causal":
        return -causal_log_probs(model, tokenizer, texts, batch_size=batch_size).total / LN2
    if kind == "masked":
        spans = [_secret_span(canary, t) for t in texts]
        return -masked_pll(model, tokenizer, texts, spans, batch_size=batch_size) / LN2
    raise InvalidArgument(f"kind must be 'causal' or 'masked'; got {kind!r}")


def canary_exposure(
    model: Any,
    tokenizer: Any,
    canary: Canary,
    *,
    kind: str = "causal",
    method: str = "auto",
    n_samples: int = 2000,
    exact_limit: int = 20000,
    rng: Any,
) -> ExposureEstimate:
    """Exposure of ``canary`` (which holds the secret) in ``model``: exact when ``|R| <= exact_limit``
    (or ``method="exact"``), else sampled + skew-normal extrapolation (``method="extrapolated"``).

    Args:
        model: the LM.
        tokenizer: its tokenizer.
        canary: the canary, with its secret.
        kind: ``"causal"`` or ``"masked"``.
        method: ``"auto"``, ``"exact"`` or ``"extrapolated"``.
        n_samples: candidates sampled for an extrapolation.
        exact_limit: the largest space enumerated by ``"auto"``.
        rng: sampling randomness (keyword-only).

    Returns:
        The exposure estimate.

    Raises:
        InvalidArgument: unknown ``method`` or ``kind``, or too few finite samples.
    """
    if method not in ("auto", "exact", "extrapolated"):
        raise InvalidArgument(f"method must be 'auto', 'exact' or 'extrapolated'; got {method!r}")
    c_score = float(score_candidates(model, tokenizer, canary, [canary.text], kind=kind)[0])
    if method == "exact" or (method == "auto" and canary.space_size <= exact_limit):
        others = [
            t
            for t in enumerate_space(canary, limit=max(exact_limit, canary.space_size))
            if t != canary.text
        ]
        return exact_exposure(
            c_score,
            score_candidates(model, tokenizer, canary, others, kind=kind),
            canary.space_size,
        )
    sample = sample_space(canary, n_samples, rng=rng, exclude_secret=True)
    return extrapolated_exposure(
        c_score, score_candidates(model, tokenizer, canary, sample, kind=kind), canary.space_size
    )


# ----------------------------------------------------------------------------- the attack
def _truth_canary(template: Canary, ground_truth: Any) -> tuple[str, Canary | None]:
    if isinstance(ground_truth, Canary):
        return ground_truth.text, ground_truth
    if isinstance(ground_truth, Mapping) and "text" in ground_truth:
        return str(ground_truth["text"]), None
    if isinstance(ground_truth, str):
        return ground_truth, None
    raise InvalidArgument(
        "ground truth of a canary trial must be a Canary, a canary text, or {'text': ...}; "
        f"got {type(ground_truth).__name__}"
    )


def _exposure_scorer(result: AttackResult, ground_truth: Any) -> dict[str, float]:
    raw = result.raw
    text, _ = _truth_canary(raw["template"], ground_truth)
    score_fn: Callable[[list[str]], np.ndarray] = raw["score_fn"]
    c = float(score_fn([text])[0])
    size = int(raw["space_size"])
    if raw["method"] == "exact":
        ref = np.asarray([s for t, s in zip(raw["texts"], raw["scores"]) if t != text], dtype=float)
        est = exact_exposure(c, ref, size)
    else:
        est = extrapolated_exposure(c, raw["scores"], size)
    guesses = list(result.reconstructions)
    out = {
        "exposure": est.exposure,
        "rank": est.rank,
        "log2_space": est.log2_space,
        "normalized_exposure": est.exposure / est.log2_space if est.log2_space > 0 else 0.0,
        "raw_exposure": est.raw_exposure,
        "canary_log_perplexity": c,
    }
    if raw["method"] == "exact":  # the attacker's best guess over the whole space is an extraction
        out["extracted"] = float(bool(guesses) and guesses[0] == text)
    return out


@ATTACKS.register("canary_exposure")
class CanaryExposure(Attack):
    """Secret-sharer exposure of a canary (Carlini et al. 2019) on a causal or masked LM.

    Papers: ``unintended-memorization-under-fl.txt`` (App. A.1) and ``dp-bert-and-dp-wordpiece.txt``
    (Sec. 5.2, HS/HSH/HHSHH secrets in BERT). The observation is a :class:`BlackBoxLM` whose
    ``meta`` holds ``canary_pattern`` and, for word slots, ``canary_vocabulary`` (the randomness
    space; public). ``run`` scores the whole space (``|R| <= exact_limit``) or ``n_samples`` draws
    of it; the scorer ranks the secret (ground truth: the :class:`~privnlp.data.Canary`).
    Headline ``exposure`` (bits, higher = more memorized, max ``log2 |R|``).

    Threat model: a black-box querier of the released model's log-probabilities who knows the canary's
    format and randomness space, not the secret.

    Args:
        n_samples: candidates sampled when the space is larger than ``exact_limit``, an integer in [10, 10**8].
        exact_limit: the largest space scored in full, an integer in [1, 10**7].
        top_k: how many best-scored candidates are returned as reconstructions, an integer in [1, 10**6].
        batch_size: texts per forward pass, an integer in [1, 10**6].

    Raises:
        InvalidArgument: an argument out of range; (``run``) not a :class:`BlackBoxLM` or no
            ``meta['canary_pattern']``.
    """

    paper = (
        "unintended-memorization-under-fl.txt (secret sharer, Carlini et al. 2019); "
        "dp-bert-and-dp-wordpiece.txt (HS/HSH/HHSHH secrets, exposure vs occurrences)"
    )
    observation_type = BlackBoxLM
    threat_model = BLACK_BOX_CANARY
    headline_metric = "exposure"

    def __init__(
        self, n_samples: int = 2000, exact_limit: int = 20000, top_k: int = 5, batch_size: int = 256
    ) -> None:
        check_range("n_samples", n_samples, 10, 10**8, integer=True)
        check_range("exact_limit", exact_limit, 1, 10**7, integer=True)
        check_range("top_k", top_k, 1, 10**6, integer=True)
        check_range("batch_size", batch_size, 1, 10**6, integer=True)
        self.n_samples = n_samples
        self.exact_limit = exact_limit
        self.top_k = top_k
        self.batch_size = batch_size

    @classmethod
    def example(cls, preset: str = "quick") -> CanaryExposure:
        return cls(n_samples=2000 if preset == "quick" else 20000)

    def run(self, observation: BlackBoxLM, *, rng: Any) -> AttackResult:
        if not isinstance(observation, BlackBoxLM):
            raise InvalidArgument(
                f"canary_exposure needs a BlackBoxLM observation; got {type(observation).__name__}"
            )
        pattern = observation.meta.get("canary_pattern")
        if not pattern:
            raise InvalidArgument(
                "observation.meta['canary_pattern'] is required (the canary format)"
            )
        vocab = observation.meta.get("canary_vocabulary") or observation.vocabulary
        template = canary_template(pattern, vocab)
        model, tok, kind = observation.model, observation.tokenizer, observation.kind

        def score_fn(texts: list[str]) -> np.ndarray:
            return score_candidates(
                model, tok, template, texts, kind=kind, batch_size=self.batch_size
            )

        if template.space_size <= self.exact_limit:
            texts = list(enumerate_space(template, limit=self.exact_limit))
            method = "exact"
        else:
            texts = sample_space(template, self.n_samples, rng=rng, exclude_secret=False)
            method = "extrapolated"
        scores = score_fn(texts)
        best = np.argsort(scores, kind="stable")[: self.top_k]
        return AttackResult(
            attack=self.name,
            reconstructions=tuple(texts[i] for i in best),
            raw={
                "method": method,
                "texts": tuple(texts),
                "scores": scores,
                "template": template,
                "space_size": template.space_size,
                "score_fn": score_fn,
                "kind": kind,
            },
            scorer=_exposure_scorer,
        )
