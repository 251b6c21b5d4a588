"""Contributor word histograms with contribution bounding, and their DP release.

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` Section 3.2. The math (sensitivities,
thresholds, neighbouring relations) is in :mod:`privnlp.mechanisms.vocab.calibration`.

Words are what the BERT pre-tokenizer yields (``BertNormalizer`` + ``BertPreTokenizer``: lowercase,
accents stripped, split on whitespace and punctuation), so the histogram's keys are exactly the
"words" the WordPiece trainer would count.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tokenizers import normalizers, pre_tokenizers

from privnlp.core.errors import InvalidArgument, MissingDependency, check_range
from privnlp.core.rng import as_numpy, check_noise_seed_allowed, secure_numpy

from .calibration import NoiseCalibration

__all__ = [
    "WordSplitter",
    "bound_contributions",
    "contributor_histogram",
    "NoisyHistogram",
    "release_histogram",
    "group_by_contributor",
]


class WordSplitter:
    """BERT-style normalizer + pre-tokenizer (HF ``tokenizers``) used to cut texts into words.

    Args:
        lowercase: lowercase (and strip accents) before splitting, as an uncased BERT does.
    """

    def __init__(self, lowercase: bool = True) -> None:
        self.lowercase = lowercase
        self._norm = normalizers.BertNormalizer(
            lowercase=lowercase, strip_accents=None if not lowercase else True
        )
        self._pre = pre_tokenizers.BertPreTokenizer()

    def __call__(self, text: str) -> list[str]:
        return [w for w, _ in self._pre.pre_tokenize_str(self._norm.normalize_str(text))]


def group_by_contributor(
    texts: Sequence[str], contributor_ids: Sequence[Any] | None
) -> list[list[str]]:
    """Group texts by contributor (one group per text when ``contributor_ids`` is None), in
    first-appearance order so that seeded runs are reproducible.

    Args:
        texts: the texts.
        contributor_ids: one contributor id per text, or ``None`` (every text is its own contributor).

    Returns:
        One list of texts per contributor.

    Raises:
        InvalidArgument: ``contributor_ids`` of another length.
    """
    if contributor_ids is None:
        return [[t] for t in texts]
    if len(contributor_ids) != len(texts):
        raise InvalidArgument(
            f"contributor_ids must have one id per text ({len(texts)}); got {len(contributor_ids)}"
        )
    groups: dict[Any, list[str]] = {}
    for t, u in zip(texts, contributor_ids):
        groups.setdefault(u, []).append(t)
    return list(groups.values())


def bound_contributions(word_sets: Iterable[Iterable[str]], k: int, *, rng: Any) -> list[list[str]]:
    """Keep at most ``k`` distinct words per contributor, sampled uniformly without replacement
    (sorted first, so a seeded ``rng`` gives the same result whatever the set order).

    Args:
        word_sets: per contributor, the words it uses.
        k: the maximum number of distinct words kept per contributor, an integer >= 1.
        rng: the sampling randomness (keyword-only).

    Returns:
        Per contributor, at most ``k`` distinct words (sorted).

    Raises:
        InvalidArgument: ``k`` out of range.
    """
    check_range("max_words_per_contributor (k)", k, 1, math.inf, integer=True, hi_inclusive=False)
    g = as_numpy(rng)
    out = []
    for ws in word_sets:
        s = sorted(set(ws))
        if len(s) > k:
            idx = np.sort(g.choice(len(s), size=int(k), replace=False))
            s = [s[i] for i in idx]
        out.append(s)
    return out


def contributor_histogram(bounded: Iterable[Sequence[str]]) -> Counter:
    """Number of distinct contributors per word (each contributor counted once per word).

    Args:
        bounded: per contributor, its (bounded) words.

    Returns:
        Word -> number of distinct contributors.
    """
    c: Counter = Counter()
    for ws in bounded:
        c.update(set(ws))
    return c


@dataclass(frozen=True)
class NoisyHistogram:
    """The released (noisy, thresholded) word histogram: the *only* input of the WordPiece build.

    Attributes:
        counts: word -> noisy count (only words whose noisy count reached the threshold).
        calibration: the noise/threshold used (``None`` for a non-private histogram).
        n_contributors: number of contributors (documents/users) in the input.
        secure: whether the noise came from OpenDP's hardened samplers.
        meta: release details (e.g. the integer threshold OpenDP used).
    """

    counts: Mapping[str, float]
    calibration: NoiseCalibration | None
    n_contributors: int
    secure: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.counts)


def release_histogram(
    hist: Mapping[str, int],
    cal: NoiseCalibration,
    *,
    rng: Any = None,
    secure: bool = False,
    n_contributors: int = 0,
) -> NoisyHistogram:
    """Add noise to every positive count and keep those ``>= cal.threshold``.

    ``secure=False``: numpy floating-point Laplace / Gaussian drawn from ``rng`` (seedable; not
    hardened against floating-point attacks, Mironov 2012). ``secure=True``: OpenDP's
    ``make_laplace_threshold`` / ``make_gaussian_threshold`` on integer counts (discrete noise from
    a CSPRNG; ``rng`` unused); the threshold is rounded up (counts are integers).

    Args:
        hist: word -> contributor count (from :func:`contributor_histogram`).
        cal: the noise and threshold.
        rng: the noise source: ``None`` = OS entropy; a seed / Generator only for a reproducible simulation
            (refused when ``PRIVNLP_REFUSE_SEEDED_NOISE`` is set).
        secure: draw discrete noise with OpenDP (Laplace only).
        n_contributors: the number of contributors, recorded in the result.

    Returns:
        The released histogram.

    Raises:
        InvalidArgument: a seeded ``rng`` while seeded noise is refused, or ``secure=True`` with Gaussian noise.
        MissingDependency: ``secure=True`` without OpenDP installed.
    """
    words = sorted(w for w, c in hist.items() if c > 0)
    if secure:
        return _release_opendp(hist, words, cal, n_contributors)
    check_noise_seed_allowed(rng)
    g = (
        secure_numpy() if rng is None else as_numpy(rng)
    )  # rng=None: OS entropy (issue #15 noise rule)
    x = np.fromiter((hist[w] for w in words), dtype=np.float64, count=len(words))
    if cal.noise == "laplace":
        noisy = x + g.laplace(0.0, cal.scale, size=len(words))
    else:
        noisy = x + g.normal(0.0, cal.scale, size=len(words))
    keep = noisy >= cal.threshold
    counts = {w: float(v) for w, v, kp in zip(words, noisy, keep) if kp}
    return NoisyHistogram(counts, cal, n_contributors, secure=False)


def _release_opendp(
    hist: Mapping[str, int], words: list[str], cal: NoiseCalibration, n: int
) -> NoisyHistogram:
    try:
        import opendp.prelude as dp
    except ImportError as e:  # pragma: no cover
        raise MissingDependency(
            "opendp", hint="secure=True draws the noise with OpenDP; pip install opendp"
        ) from e
    dp.enable_features("contrib")
    dom = dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=int))
    met = dp.l01inf_distance(dp.absolute_distance(T=int))
    if cal.noise != "laplace":
        raise InvalidArgument(
            "secure=True supports noise='laplace' only (OpenDP's Gaussian threshold is "
            "accounted in zCDP, not with the analytic Gaussian calibration); got noise='gaussian'"
        )
    make = dp.m.make_laplace_threshold
    tau = int(math.ceil(cal.threshold))
    meas = make(dom, met, scale=float(cal.scale), threshold=tau)
    # OpenDP's own privacy map (symmetric l0/l1/linf distance) must confirm the claim.
    d_in = (cal.l0, int(cal.l1), 1)
    eps, delta = meas.map(d_in)
    while delta > cal.delta * (1 + 1e-9):
        tau += 1
        meas = make(dom, met, scale=float(cal.scale), threshold=tau)
        eps, delta = meas.map(d_in)
    if eps > cal.epsilon * (1 + 1e-9):  # pragma: no cover
        raise InvalidArgument(f"OpenDP's privacy map gives epsilon={eps} > {cal.epsilon}")
    out = meas({w: int(hist[w]) for w in words})
    counts = {w: float(v) for w, v in sorted(out.items())}
    return NoisyHistogram(counts, cal, n, secure=True, meta={"opendp_threshold": tau})
