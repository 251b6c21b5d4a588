"""Phrase-pair fragmentation of confidential parallel data (``phrase_fragmentation``).

Paper: ``../shared/papers/phrase-pair-fragmentation-nmt.txt``. Importing this package
registers the mechanism and its leaky twin.
"""

from __future__ import annotations

from .align import SYMMETRIZATIONS, AlignmentResult, aer, align, symmetrize
from .corpus import ParallelText, from_corpus, read_parallel
from .extract import extract_phrases, extract_sentence
from .mechanism import FragmentRelease, LeakyPhraseFragmentation, PhraseFragmentation, strip_tags
from .utility import ngram_coverage

__all__ = [
    "PhraseFragmentation",
    "LeakyPhraseFragmentation",
    "FragmentRelease",
    "ParallelText",
    "read_parallel",
    "from_corpus",
    "align",
    "symmetrize",
    "aer",
    "AlignmentResult",
    "SYMMETRIZATIONS",
    "extract_phrases",
    "extract_sentence",
    "strip_tags",
    "ngram_coverage",
]
