"""Memorization evaluators: secret-sharer exposure and extraction, and the federated correlation
attacks (eavesdropping / watermark).

Papers (``../shared/papers/``): ``unintended-memorization-under-fl.txt`` (federated secret sharer,
Random Sampling / Beam Search), ``dp-bert-and-dp-wordpiece.txt`` (HS / HSH / HHSHH secrets in masked
LMs), ``record-level-privacy-leakage-in-fl.txt`` (exposure rate, ECorr / WCorr, Algorithms 1-2).

Importing this package imports torch (it registers ``canary_exposure``, ``canary_extraction``,
``eavesdropping``, ``watermark``); ``import privnlp`` does not.
"""

from __future__ import annotations

from . import correlation as _correlation  # noqa: F401  (registers eavesdropping, watermark)
from . import exposure as _exposure  # noqa: F401  (registers canary_exposure)
from . import extraction as _extraction  # noqa: F401  (registers canary_extraction)
from ._lm import TextScores, causal_log_probs, exposure_rates, log_perplexity_bits, masked_pll
from .correlation import (
    TOP_KS,
    CorrelationResult,
    EavesdroppingAttack,
    WatermarkAttack,
    combined_rank,
    ecorr,
    exposure_trajectories,
    generate_candidates,
    rank_desc,
    selection_indicator,
    spearman,
    wcorr,
)
from .exposure import (
    MASKED_FORMATS,
    CanaryExposure,
    ExposureEstimate,
    canary_exposure,
    canary_template,
    exact_exposure,
    exposure_from_rank,
    extrapolated_exposure,
    make_masked_secret,
    rank_with_ties,
    score_candidates,
    skewnorm_log_cdf,
)
from .extraction import (
    CanaryExtraction,
    ExtractionResult,
    beam_extract,
    beam_search_test,
    count_memorized,
    federated_secret_sharer,
    random_sampling_test,
    render_partial,
)

__all__ = [
    "CanaryExposure",
    "CanaryExtraction",
    "EavesdroppingAttack",
    "WatermarkAttack",
    "CorrelationResult",
    "ExposureEstimate",
    "ExtractionResult",
    "TextScores",
    "MASKED_FORMATS",
    "TOP_KS",
    "beam_extract",
    "beam_search_test",
    "canary_exposure",
    "canary_template",
    "causal_log_probs",
    "combined_rank",
    "count_memorized",
    "ecorr",
    "exact_exposure",
    "exposure_from_rank",
    "exposure_rates",
    "exposure_trajectories",
    "extrapolated_exposure",
    "federated_secret_sharer",
    "generate_candidates",
    "log_perplexity_bits",
    "make_masked_secret",
    "masked_pll",
    "random_sampling_test",
    "rank_desc",
    "rank_with_ties",
    "render_partial",
    "score_candidates",
    "selection_indicator",
    "skewnorm_log_cdf",
    "spearman",
    "wcorr",
]
