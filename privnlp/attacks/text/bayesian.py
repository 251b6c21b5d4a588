"""Informative Bayesian adversary against metric-DP word perturbation, and the empirical
privacy / utility framework of Section 3.1.

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` (Section 3.1, equations 2-4).

* ``f_M(w'|w) = P[M(w) = w']`` is estimated by Monte Carlo (vectorised; for mechanisms that
  expose ``selection_probs`` the candidate choice is Rao-Blackwellised: the channel adds the
  selection probabilities of the candidates of each noisy vector instead of one sampled word).
* posterior ``g_A(w_hat | w') ∝ pi(w_hat) f_M(w' | w_hat)`` (eq. 3);
* expected inference error ``E_M = sum pi(w) f(w'|w) g(w_hat|w') d_E(w_hat, w)`` (eq. 4), with
  ``d_E = 1(w_hat != w)`` or the Euclidean distance between embeddings;
* expected utility loss ``L_M = sum pi(w) f(w'|w) d_L(w, w')`` (eq. 2) for a user ``d_L``;
* ``N_w = P[M(w) = w]`` and ``S_w`` (effective support size) per word.

Threat model: the data recipient of the sanitized text knows the mechanism, its parameters, the
public embeddings and a prior over words; it guesses each original word from the released one.
The attack's headline metric is ``inference_accuracy = 1 - E_M`` (``d_E`` = indicator): higher
means more leakage. :func:`metric_dp_audit` is the empirical metric-DP check used by the tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument, check_range
from privnlp.core.observations import PerturbedText
from privnlp.core.protocols import Attack, AttackResult
from privnlp.core.registry import ATTACKS
from privnlp.core.rng import as_numpy
from privnlp.mechanisms.text.mechanisms import Vickrey
from privnlp.mechanisms.text.textio import WORD_RE

__all__ = [
    "Channel",
    "estimate_channel",
    "estimate_channels_vickrey",
    "expected_inference_error",
    "expected_utility_loss",
    "map_inference_error",
    "heldout_inference_accuracy",
    "privacy_stats",
    "sentiment_flip_loss",
    "BayesianInversion",
    "AuditResult",
    "metric_dp_audit",
    "EmpiricalPoint",
    "empirical_point",
]


@dataclass(frozen=True)
class Channel:
    """Estimated ``f_M(w'|w)`` for the input words ``support`` (vocabulary row ids).

    ``probs[i, c]`` = P[M(support[i]) = outputs[c]]; rows sum to 1. ``outputs`` are the vocabulary
    ids that occurred (all others have estimated probability 0).

    Attributes:
        support: the input vocabulary ids, sorted as given.
        outputs: the output vocabulary ids that occurred, sorted.
        probs: ``[len(support), len(outputs)]`` estimated probabilities; each row sums to 1.
        n_samples: Monte Carlo draws per input word.
    """

    support: np.ndarray
    outputs: np.ndarray
    probs: np.ndarray
    n_samples: int

    def column_of(self, ids: np.ndarray) -> np.ndarray:
        """Column index of each output id (``-1`` if never produced in the Monte Carlo run)."""
        pos = np.searchsorted(self.outputs, ids)
        pos = np.clip(pos, 0, len(self.outputs) - 1)
        return np.where(self.outputs[pos] == ids, pos, -1)


def _accumulate(
    support_rows: np.ndarray,
    cand: np.ndarray,
    probs: np.ndarray,
    n_support: int,
    n_samples: int,
    support: np.ndarray,
) -> Channel:
    flat_c = cand.reshape(-1)
    outputs, inv = np.unique(flat_c, return_inverse=True)
    rows = np.repeat(support_rows, cand.shape[1])
    M = np.zeros((n_support, len(outputs)))
    np.add.at(M, (rows, inv.reshape(-1)), probs.reshape(-1))
    M /= n_samples
    return Channel(support=support, outputs=outputs, probs=M, n_samples=n_samples)


def estimate_channel(
    mechanism: Any,
    support: Sequence[int] | np.ndarray,
    n_samples: int = 500,
    *,
    rng: Any,
    chunk: int = 200_000,
) -> Channel:
    """Monte Carlo estimate of ``f_M(.|w)`` for every ``w`` in ``support`` (vocabulary row ids).

    Args:
        mechanism: a metric-DP word mechanism (``resolve_embeddings``, ``perturb_ids`` or
            ``sample_noise`` + ``selection_probs``).
        support: the input vocabulary ids; at least one.
        n_samples: draws per input word, an integer in [1, 10**9].
        rng: the Monte Carlo randomness (keyword-only).
        chunk: draws per vectorised batch (memory bound).

    Returns:
        The estimated channel.

    Raises:
        InvalidArgument: ``n_samples`` out of range or empty ``support``.
    """
    return estimate_channels(mechanism, [mechanism], support, n_samples, rng=rng, chunk=chunk)[0]


def estimate_channels(
    sampler: Any,
    mechanisms: Sequence[Any],
    support: Sequence[int] | np.ndarray,
    n_samples: int = 500,
    *,
    rng: Any,
    chunk: int = 200_000,
) -> list[Channel]:
    """Channels of several mechanisms that share the noise and candidates of ``sampler`` (e.g. a
    Vickrey family at one epsilon, many t): the noisy vectors are drawn once, each mechanism only
    re-weights the candidates with its ``selection_probs``."""
    g = as_numpy(rng)
    check_range("n_samples", n_samples, 1, 10**9, integer=True)
    emb = sampler.resolve_embeddings()
    support = np.asarray(support, dtype=np.int64)
    if support.size == 0:
        raise InvalidArgument("support must contain at least one vocabulary id")
    n = int(n_samples)
    rows_all = np.repeat(np.arange(support.size), n)
    ids_all = support[rows_all]
    cands, probs = [], [[] for _ in mechanisms]
    generic = not all(hasattr(m, "selection_probs") for m in mechanisms)
    for s in range(0, ids_all.size, chunk):
        ids = ids_all[s : s + chunk]
        if generic:
            out = np.stack([m.perturb_ids(ids, rng=g) for m in mechanisms], axis=0)
            cands.append(out)
            continue
        noisy = emb.vectors[ids] + sampler.sample_noise(ids.size, rng=g)
        nb = sampler._neighbors(noisy, ids)
        cands.append(nb.ids)
        for j, m in enumerate(mechanisms):
            p = m.selection_probs(nb)
            if p.shape[1] < nb.ids.shape[1]:
                p = np.pad(p, ((0, 0), (0, nb.ids.shape[1] - p.shape[1])))
            probs[j].append(p)
    if generic:
        allc = np.concatenate(cands, axis=1)
        return [
            _accumulate(
                rows_all, allc[j][:, None], np.ones((allc.shape[1], 1)), support.size, n, support
            )
            for j in range(len(mechanisms))
        ]
    cand = np.concatenate(cands, axis=0)
    return [
        _accumulate(rows_all, cand, np.concatenate(probs[j], axis=0), support.size, n, support)
        for j in range(len(mechanisms))
    ]


def estimate_channels_vickrey(
    embeddings: Any,
    epsilon: float,
    ts: Sequence[float],
    support: Sequence[int],
    n_samples: int = 500,
    *,
    rng: Any,
) -> list[Channel]:
    """Channels of Vickrey(epsilon, t) for every t in ``ts`` from one shared set of noisy vectors."""

    mechs = [Vickrey(epsilon, t=float(t), embeddings=embeddings) for t in ts]
    return estimate_channels(mechs[0], mechs, support, n_samples, rng=rng)


def _prior_vec(channel: Channel, prior: np.ndarray | None) -> np.ndarray:
    n = channel.support.size
    if prior is None:
        return np.full(n, 1.0 / n)
    p = np.asarray(prior, dtype=np.float64)
    if p.shape != (n,) or np.any(p < 0) or p.sum() <= 0:
        raise InvalidArgument(
            f"prior must be a non-negative vector of length {n} (one weight per support word)"
        )
    return p / p.sum()


def expected_inference_error(
    channel: Channel, prior: np.ndarray | None = None, *, distances: np.ndarray | None = None
) -> float:
    """``E_M`` (eq. 4) of the informative adversary that samples its guess from the posterior.
    ``distances``: ``d_E`` between support words (``None`` = indicator ``1(w_hat != w)``).

    Args:
        channel: the estimated channel.
        prior: the adversary's prior over ``channel.support`` (non-negative, normalized here; ``None`` = uniform).
        distances: ``[n, n]`` distances between support words (``None`` = indicator).

    Returns:
        ``E_M``; with the indicator distance, in [0, 1] (1 - the attack's inference accuracy).

    Raises:
        InvalidArgument: ``prior`` is not a non-negative vector of length ``len(support)`` with a positive sum.
    """
    pi = _prior_vec(channel, prior)
    J = pi[:, None] * channel.probs  # joint P[w, w']
    m = J.sum(axis=0)
    nz = m > 0
    J, m = J[:, nz], m[nz]
    if distances is None:
        return float(1.0 - np.sum(np.sum(J * J, axis=0) / m))
    D = np.asarray(distances, dtype=np.float64)
    return float(np.sum(np.sum((D @ J) * J, axis=0) / m))


def heldout_inference_accuracy(
    fit: Channel, test: Channel, prior: np.ndarray | None = None
) -> tuple[float, float]:
    """``(posterior-sampling accuracy, MAP accuracy)`` of the adversary whose posterior comes from
    channel ``fit``, evaluated on an independent channel estimate ``test`` (same support).

    The plug-in ``1 - E_M`` on a single Monte Carlo channel is biased upwards when the outputs are
    sparse (large vocabularies, small epsilon: most outputs are seen once, so the estimated posterior
    looks certain); the held-out value is the accuracy of a real adversary (an output never seen in
    ``fit`` is answered from the prior), so it never overstates what the attack achieves."""
    if not np.array_equal(fit.support, test.support):
        raise InvalidArgument("fit and test channels must have the same support")
    pi = _prior_vec(fit, prior)
    JA = pi[:, None] * fit.probs
    mA = JA.sum(axis=0)
    col = fit.column_of(test.outputs)
    seen = col >= 0
    c = np.maximum(col, 0)
    G = np.where(seen[None, :], JA[:, c] / np.where(mA[c] > 0, mA[c], 1.0)[None, :], pi[:, None])
    acc = float(np.sum(pi[:, None] * test.probs * G))
    guess = np.where(seen, JA[:, c].argmax(axis=0), int(np.argmax(pi)))
    acc_map = float(np.sum(pi[guess] * test.probs[guess, np.arange(test.outputs.size)]))
    return acc, acc_map


def map_inference_error(channel: Channel, prior: np.ndarray | None = None) -> float:
    """Error of the MAP adversary (guesses ``argmax_w g(w | w')``): ``1 - sum_w' max_w J[w, w']``."""
    pi = _prior_vec(channel, prior)
    J = pi[:, None] * channel.probs
    return float(1.0 - J.max(axis=0).sum())


def expected_utility_loss(
    channel: Channel,
    loss: np.ndarray | Callable[[np.ndarray, np.ndarray], np.ndarray],
    prior: np.ndarray | None = None,
) -> float:
    """``L_M`` (eq. 2). ``loss``: a callable ``d_L(in_ids[:, None], out_ids[None, :])`` returning a
    matrix, or a full ``(V, V)`` matrix indexed by vocabulary ids.

    Args:
        channel: the estimated channel.
        loss: ``d_L`` as a callable on id arrays (broadcast) or a ``(V, V)`` matrix.
        prior: the prior over ``channel.support`` (``None`` = uniform).

    Returns:
        ``L_M``, in the units of ``loss``.

    Raises:
        InvalidArgument: a bad ``prior``.
    """
    pi = _prior_vec(channel, prior)
    if callable(loss):
        L = np.asarray(loss(channel.support[:, None], channel.outputs[None, :]), dtype=np.float64)
    else:
        L = np.asarray(loss, dtype=np.float64)[np.ix_(channel.support, channel.outputs)]
    return float(np.sum(pi[:, None] * channel.probs * L))


def sentiment_flip_loss(
    words: Sequence[str], lexicon: Mapping[str, Sequence[str]]
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``d_L(w, w') = 1(sentiment(w) != sentiment(w'))`` over vocabulary ids (the paper's Product
    Reviews utility); words outside the lexicon are neutral (0).

    Args:
        words: the vocabulary, indexed by id.
        lexicon: ``{"positive": words, "negative": words}``.

    Returns:
        ``d_L(a, b)`` on id arrays: 1.0 where the polarities differ, else 0.0.
    """
    pos, neg = set(lexicon.get("positive", ())), set(lexicon.get("negative", ()))
    pol = np.array([1 if w in pos else (-1 if w in neg else 0) for w in words], dtype=np.int8)

    def d_L(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (pol[a] != pol[b]).astype(np.float64)

    return d_L


def privacy_stats(channel: Channel) -> dict[str, np.ndarray]:
    """Per support word: ``N_w = P[M(w) = w]`` and ``S_w`` = distinct outputs seen plus the
    perplexity ``exp(H(f(.|w)))`` (effective support size)."""
    col = channel.column_of(channel.support)
    N = np.where(col >= 0, channel.probs[np.arange(channel.support.size), np.maximum(col, 0)], 0.0)
    P = channel.probs
    with np.errstate(divide="ignore", invalid="ignore"):
        H = -np.sum(np.where(P > 0, P * np.log(P), 0.0), axis=1)
    return {
        "N_w": N,
        "S_w_distinct": (P > 0).sum(axis=1).astype(np.float64),
        "S_w_effective": np.exp(H),
    }


@dataclass(frozen=True)
class EmpiricalPoint:
    """One point of the privacy-utility plane (Figure 2)."""

    mechanism: str
    epsilon: float
    t: float | None
    inference_error: float
    utility_loss: float
    map_error: float
    mean_N_w: float
    mean_S_w: float


def empirical_point(
    mechanism: Any, channel: Channel, prior: np.ndarray | None, loss: Any
) -> EmpiricalPoint:
    st = privacy_stats(channel)
    pi = _prior_vec(channel, prior)
    return EmpiricalPoint(
        mechanism=getattr(mechanism, "name", type(mechanism).__name__),
        epsilon=float(mechanism.epsilon),
        t=getattr(mechanism, "t", None),
        inference_error=expected_inference_error(channel, prior),
        utility_loss=expected_utility_loss(channel, loss, prior)
        if loss is not None
        else float("nan"),
        map_error=map_inference_error(channel, prior),
        mean_N_w=float(pi @ st["N_w"]),
        mean_S_w=float(pi @ st["S_w_effective"]),
    )


# -- the attack -------------------------------------------------------------------------------

THREAT = ThreatModel(
    adversary=Adversary.DATA_RECIPIENT,
    observes=("perturbed words / texts",),
    knows=(
        "the mechanism and its parameters",
        "the public vocabulary and embeddings",
        "a prior over words",
    ),
    goal="recover each original word (posterior of Section 3.1)",
)


@ATTACKS.register("bayesian_inversion")
class BayesianInversion(Attack):
    """Informative Bayesian adversary (Section 3.1): estimates ``f_M`` by Monte Carlo, guesses each
    released word's original with the posterior (MAP), and reports ``E_M`` (eq. 4).

    ``inference_accuracy`` (= 1 - E_M, indicator d_E) and ``map_accuracy`` are *held-out*: the
    posterior comes from one Monte Carlo channel and is scored on a second, independent one
    (:func:`heldout_inference_accuracy`), because the plug-in value is biased upwards on large real
    vocabularies (GloVe) where most outputs are sampled once; the plug-in error stays in
    ``raw["inference_error_plugin"]``. On a real vocabulary pass a prior over a support (the
    ``text.licenses`` scenario uses a Zipf prior over GloVe's frequency rank).

    Args:
        n_samples: Monte Carlo samples per support word.
        max_support: refuse to build a channel over more input words than this (pass a prior).
        prior: ``"empirical"`` (the observation's ``meta["prior"]`` word -> weight, else uniform)
            or ``"uniform"`` over the support.
        distance: ``"indicator"`` or ``"euclidean"`` d_E for the reported ``E_M``.
    """

    paper: ClassVar[str] = (
        "vickrey-mechanism-metric-dp.txt — Xu et al., On a Utilitarian Approach to Privacy "
        "Preserving Text Generation, Section 3.1"
    )
    observation_type = PerturbedText
    threat_model = THREAT
    headline_metric = "inference_accuracy"

    def __init__(
        self,
        n_samples: int = 300,
        max_support: int = 3000,
        prior: str = "empirical",
        distance: str = "indicator",
    ) -> None:
        check_range("n_samples", n_samples, 1, 10**7, integer=True)
        check_range("max_support", max_support, 1, 10**7, integer=True)
        if prior not in ("empirical", "uniform"):
            raise InvalidArgument(f"prior must be 'empirical' or 'uniform'; got {prior!r}")
        if distance not in ("indicator", "euclidean"):
            raise InvalidArgument(f"distance must be 'indicator' or 'euclidean'; got {distance!r}")
        self.n_samples = n_samples
        self.max_support = max_support
        self.prior = prior
        self.distance = distance

    def run(self, observation: PerturbedText, *, rng: Any) -> AttackResult:
        if not isinstance(observation, PerturbedText):
            raise InvalidArgument(
                f"observation must be PerturbedText; got {type(observation).__name__}"
            )

        released = [w.lower() for t in observation.texts for w in WORD_RE.findall(t)]
        mech = observation.mechanism
        if mech is None:  # undefended: the released word is the original
            return AttackResult(
                self.name,
                tuple(released),
                {"inference_error": 0.0, "map_error": 0.0, "mean_N_w": 1.0, "mean_S_w": 1.0},
                _score,
            )
        emb = mech.resolve_embeddings()
        prior_map = observation.meta.get("prior") if self.prior == "empirical" else None
        if prior_map:
            words = [w for w in prior_map if w in emb]
            support = emb.ids(words)
            prior = np.array([float(prior_map[w]) for w in words])
        else:
            support = np.arange(len(emb))
            prior = None
        if support.size > self.max_support:
            raise InvalidArgument(
                f"the support has {support.size} words > max_support={self.max_support}; "
                "pass a prior (observation.meta['prior']) or raise max_support"
            )
        g = as_numpy(rng)
        ch = estimate_channel(mech, support, self.n_samples, rng=g)
        ch_test = estimate_channel(
            mech, support, self.n_samples, rng=g
        )  # independent: held-out accuracy
        acc_ho, map_ho = heldout_inference_accuracy(ch, ch_test, prior)
        pi = _prior_vec(ch, prior)
        J = pi[:, None] * ch.probs
        best_in = support[J.argmax(axis=0)]  # MAP original for every seen output
        prior_best = emb.words[int(support[int(np.argmax(pi))])]
        guesses = []
        for w in released:
            j = emb.id_of(w)
            c = ch.column_of(np.array([j]))[0] if j >= 0 else -1
            guesses.append(emb.words[int(best_in[c])] if c >= 0 else prior_best)
        D = emb.pairwise_distances(support) if self.distance == "euclidean" else None
        st = privacy_stats(ch)
        raw = {
            "inference_error": expected_inference_error(ch, prior, distances=D)
            if D is not None
            else 1.0 - acc_ho,
            "inference_error_indicator": 1.0 - acc_ho,
            "inference_error_plugin": expected_inference_error(ch, prior),
            "map_error": 1.0 - map_ho,
            "mean_N_w": float(pi @ st["N_w"]),
            "mean_S_w": float(pi @ st["S_w_effective"]),
            "support_size": int(support.size),
        }
        return AttackResult(self.name, tuple(guesses), raw, _score)


def _score(result: AttackResult, ground_truth: Any) -> dict[str, float]:
    if isinstance(ground_truth, str):
        ground_truth = [ground_truth]
    truth = [w.lower() for t in ground_truth for w in WORD_RE.findall(t)]
    guesses = list(result.reconstructions)
    n = min(len(truth), len(guesses))
    acc = float(np.mean([guesses[i] == truth[i] for i in range(n)])) if n else 0.0
    e_ind = float(
        result.raw.get("inference_error_indicator", result.raw.get("inference_error", 0.0))
    )
    return {
        "inference_accuracy": 1.0 - e_ind,
        "expected_inference_error": float(result.raw.get("inference_error", 0.0)),
        "observed_map_accuracy": acc,
        "map_accuracy": 1.0 - float(result.raw.get("map_error", 0.0)),
        "mean_N_w": float(result.raw.get("mean_N_w", 1.0)),
        "mean_S_w": float(result.raw.get("mean_S_w", 1.0)),
    }


# -- empirical metric-DP audit --------------------------------------------------------------


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`metric_dp_audit`: ``max_excess`` = max over pairs/outputs of the
    lower-confidence log-ratio minus ``eps * d(w, w')`` (> 0 means a violation was detected)."""

    passed: bool
    max_excess: float
    worst: tuple[Any, ...]
    details: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)


def _cp_bounds(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    from scipy.stats import beta  # deferred: scipy: privnlp sanitize imports this module

    lo = np.where(k > 0, beta.ppf(alpha, k, n - k + 1), 0.0)
    hi = np.where(k < n, beta.ppf(1 - alpha, k + 1, n - k), 1.0)
    return lo, hi


def metric_dp_audit(
    mechanism: Any,
    pairs: Sequence[tuple[int, int]],
    n_samples: int = 100_000,
    *,
    rng: Any,
    alpha: float = 1e-4,
    distance: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> AuditResult:
    """Empirical metric-DP audit on vocabulary id pairs: estimate the output distributions of both
    inputs and check ``log P[M(w)=o] - log P[M(w')=o] <= eps * d(w, w')`` with one-sided
    Clopper-Pearson bounds (level ``alpha`` per test, Bonferroni over outputs and directions).

    Args:
        mechanism: a metric-DP word mechanism (``epsilon``, ``resolve_embeddings``, ``perturb_ids``).
        pairs: ``(w, w')`` vocabulary id pairs to test.
        n_samples: draws per input word.
        rng: randomness (keyword-only).
        alpha: the overall false-alarm level, split over outputs, directions and pairs (Bonferroni).
        distance: ``d(x, y)`` on embedding vectors (default: the mechanism's ``metric``, else Euclidean).

    Returns:
        ``passed`` (no violation detected), the largest excess and the worst ``(w, w', output)``.
    """
    g = as_numpy(rng)
    emb = mechanism.resolve_embeddings()
    eps = float(mechanism.epsilon)
    if distance is None:
        distance = getattr(mechanism, "metric", None)
    if distance is None:

        def distance(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            return np.linalg.norm(np.atleast_2d(x).astype(np.float64) - np.atleast_2d(y), axis=1)

    V = len(emb)
    a = alpha / (2 * V * max(1, len(pairs)))
    worst, max_ex, details = (), -math.inf, []
    for i, j in pairs:
        ci = np.bincount(mechanism.perturb_ids(np.full(n_samples, i), rng=g), minlength=V)
        cj = np.bincount(mechanism.perturb_ids(np.full(n_samples, j), rng=g), minlength=V)
        d = float(distance(emb.vectors[i], emb.vectors[j])[0])
        lo_i, hi_i = _cp_bounds(ci, n_samples, a)
        lo_j, hi_j = _cp_bounds(cj, n_samples, a)
        with np.errstate(divide="ignore"):
            r1 = np.log(lo_i) - np.log(hi_j)
            r2 = np.log(lo_j) - np.log(hi_i)
        ex = np.maximum(r1, r2) - eps * d
        o = int(np.argmax(ex))
        details.append({"pair": (i, j), "distance": d, "max_excess": float(ex[o]), "output": o})
        if ex[o] > max_ex:
            max_ex, worst = float(ex[o]), (i, j, o)
    return AuditResult(
        passed=bool(max_ex <= 0), max_excess=max_ex, worst=worst, details=tuple(details)
    )
