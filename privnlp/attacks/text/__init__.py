"""Attacks on released text artefacts: Bayesian inversion of perturbed text (Vickrey paper),
vocabulary membership (DP WordPiece), fragment reconstruction (phrase-pair fragmentation).

Every module in this package is imported here so its attacks register.
"""

from __future__ import annotations

import importlib
import pkgutil

from .bayesian import (
    BayesianInversion,
    Channel,
    estimate_channel,
    expected_inference_error,
    expected_utility_loss,
    metric_dp_audit,
    sentiment_flip_loss,
)
from .fragment_reconstruction import FragmentReconstruction, assemble, score_reconstruction
from .vocab_membership import VocabMembership, score_vocab_membership

for _m in pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = [
    "BayesianInversion",
    "FragmentReconstruction",
    "VocabMembership",
    "Channel",
    "estimate_channel",
    "expected_inference_error",
    "expected_utility_loss",
    "sentiment_flip_loss",
    "metric_dp_audit",
    "assemble",
    "score_reconstruction",
    "score_vocab_membership",
]
