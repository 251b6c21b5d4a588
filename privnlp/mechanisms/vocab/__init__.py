"""DP vocabularies: DP WordPiece from a contribution-bounded, noised, thresholded word histogram.

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (Section 3.2). Importing this package
registers ``dp_wordpiece`` (and its leaky twin).
"""

from __future__ import annotations

from .calibration import (
    NoiseCalibration,
    analytic_gaussian_sigma,
    calibrate,
    gaussian_threshold,
    laplace_threshold,
    paper_calibration,
    single_contributor_release_probability,
)
from .histogram import (
    NoisyHistogram,
    WordSplitter,
    bound_contributions,
    contributor_histogram,
    release_histogram,
)
from .utility import tokenizer_utility
from .wordpiece import (
    DPWordPiece,
    LeakyOccurrenceWordPiece,
    VocabBuild,
    build_nonprivate_wordpiece,
    histogram_iterator,
    train_wordpiece_from_histogram,
)

__all__ = [
    "DPWordPiece",
    "LeakyOccurrenceWordPiece",
    "VocabBuild",
    "build_nonprivate_wordpiece",
    "histogram_iterator",
    "train_wordpiece_from_histogram",
    "NoisyHistogram",
    "WordSplitter",
    "bound_contributions",
    "contributor_histogram",
    "release_histogram",
    "NoiseCalibration",
    "analytic_gaussian_sigma",
    "calibrate",
    "gaussian_threshold",
    "laplace_threshold",
    "paper_calibration",
    "single_contributor_release_probability",
    "tokenizer_utility",
]
