"""Metrics for leakage and utility: ROUGE, BLEU/chrF, NERR, token P/R, set P/R/F1/EM,
edit distance, top-K accuracy, NER span metrics (strict/exact/type/partial, as in
``../shared/papers/wikipii-pii-extraction-federated.txt``), seqeval F1, and Hungarian batch
matching. Importing this package does not import torch (rouge-score, sacrebleu, seqeval and
scipy are imported on first use).
"""

from .matching import Matching, hungarian_match
from .ner import SpanMetrics, bio_to_spans, ner_span_metrics, seqeval_f1
from .sets import PRF, set_prf, top_k_accuracy
from .text import (
    TokenPR,
    bleu,
    chrf,
    edit_distance,
    nerr,
    rouge,
    simple_tokens,
    token_precision_recall,
)

__all__ = [
    "rouge",
    "bleu",
    "chrf",
    "nerr",
    "token_precision_recall",
    "TokenPR",
    "set_prf",
    "PRF",
    "edit_distance",
    "top_k_accuracy",
    "ner_span_metrics",
    "SpanMetrics",
    "bio_to_spans",
    "seqeval_f1",
    "hungarian_match",
    "Matching",
    "simple_tokens",
]
