"""Synthetic private corpora, sentiment data, canaries and loaders for user files.

See :mod:`privnlp.data.corpus` (emails / clinical notes / chats with gold PII spans),
:mod:`privnlp.data.sentiment`, :mod:`privnlp.data.canaries` and :mod:`privnlp.data.loaders`.
The toy parallel corpus lives in :mod:`privnlp.data.parallel`. Importing this package does not
import torch (nor Faker: it is imported when a corpus is generated).
"""
from .corpus import (KINDS, LABELS, PrivateCorpus, Record, Span, generate_corpus, read_jsonl_corpus,
                     spans_to_bio, tokenize)

__all__ = ["KINDS", "LABELS", "PrivateCorpus", "Record", "Span", "generate_corpus", "read_jsonl_corpus",
           "spans_to_bio", "tokenize"]
