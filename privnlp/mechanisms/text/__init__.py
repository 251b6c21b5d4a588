"""Metric-DP text sanitization: Vickrey (Algorithms 1 and 3), multivariate Laplace and regularized
Mahalanobis word perturbation, embeddings loading, and Algorithm 2 parameter selection.

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt``.
Importing this package registers ``vickrey``, ``vickrey_k``, ``laplace_metric``, ``mahalanobis``
and the leaky twin of ``vickrey``.
"""

from __future__ import annotations

from . import twins as _twins  # noqa: F401  (leaky twins of laplace_metric, mahalanobis, vickrey_k)
from .embeddings import (
    DEFAULT_STOPWORDS,
    Embeddings,
    bundled_embeddings,
    bundled_texts,
    load_embeddings,
)
from .mechanisms import (
    OOV_POLICIES,
    LaplaceMetric,
    LeakyVickreyExcludesInput,
    LeakyVickreyWrongRadius,
    Mahalanobis,
    Vickrey,
    VickreyK,
    WordMetricDP,
)
from .neighbors import ExactIndex, HnswIndex, NeighborResult, topk_recall
from .textio import SanitizedText, word_spans

__all__ = [
    "Embeddings",
    "load_embeddings",
    "bundled_embeddings",
    "bundled_texts",
    "DEFAULT_STOPWORDS",
    "WordMetricDP",
    "LaplaceMetric",
    "Mahalanobis",
    "Vickrey",
    "VickreyK",
    "LeakyVickreyExcludesInput",
    "LeakyVickreyWrongRadius",
    "OOV_POLICIES",
    "ExactIndex",
    "HnswIndex",
    "NeighborResult",
    "topk_recall",
    "SanitizedText",
    "word_spans",
]
