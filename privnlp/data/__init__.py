"""Synthetic private corpora, sentiment data, canaries and loaders for user files.

See :mod:`privnlp.data.corpus` (emails / clinical notes / chats with gold PII spans, built for the
PII-extraction setting of ``../shared/papers/wikipii-pii-extraction-federated.txt``),
:mod:`privnlp.data.sentiment`, :mod:`privnlp.data.canaries` (secret-sharer canaries,
``../shared/papers/unintended-memorization-under-fl.txt``) and :mod:`privnlp.data.loaders`.
The toy parallel corpus lives in :mod:`privnlp.data.parallel`. Importing this package does not
import torch (nor Faker: it is imported when a corpus is generated).
"""

from .canaries import (
    DEFAULT_WORDS,
    Canary,
    CanaryInsertion,
    SecretSlot,
    enumerate_space,
    insert_canaries,
    make_canary,
    sample_space,
)
from .corpus import (
    KINDS,
    LABELS,
    PrivateCorpus,
    Record,
    Span,
    generate_corpus,
    read_jsonl_corpus,
    spans_to_bio,
    tokenize,
)
from .loaders import load_parallel, load_texts
from .sentiment import LEXICON, LabeledDataset, generate_sentiment

__all__ = [
    "KINDS",
    "LABELS",
    "PrivateCorpus",
    "Record",
    "Span",
    "generate_corpus",
    "read_jsonl_corpus",
    "spans_to_bio",
    "tokenize",
    "LEXICON",
    "LabeledDataset",
    "generate_sentiment",
    "Canary",
    "CanaryInsertion",
    "SecretSlot",
    "make_canary",
    "enumerate_space",
    "sample_space",
    "insert_canaries",
    "DEFAULT_WORDS",
    "load_texts",
    "load_parallel",
]
