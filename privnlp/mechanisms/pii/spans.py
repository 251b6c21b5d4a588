"""Span utilities shared by the annotator, the tagger and the redactor (overlaps, BIO conversion).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` (BIO tagging of located PII).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from privnlp.data.corpus import Span, spans_to_bio, tokenize
from privnlp.metrics.ner import bio_to_spans

from .types import PIISpan

__all__ = [
    "Occupancy",
    "resolve_overlaps",
    "merge_for_redaction",
    "to_bio",
    "tags_to_spans",
    "as_corpus_spans",
]


class Occupancy:
    """Non-overlapping spans kept in start order; :meth:`try_add` keeps a span only when it overlaps none
    already kept (O(log n) per span with :mod:`bisect`, so a 20 MB record's spans stay linear-ish)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.spans: list[PIISpan] = []

    def free(self, s: PIISpan) -> bool:
        i = bisect.bisect_left(self.starts, s.start)
        if i < len(self.spans) and self.spans[i].start < s.end:
            return False
        return not (i > 0 and self.spans[i - 1].end > s.start)

    def try_add(self, s: PIISpan) -> bool:
        if s.end <= s.start or not self.free(s):
            return False
        i = bisect.bisect_left(self.starts, s.start)
        self.starts.insert(i, s.start)
        self.spans.insert(i, s)
        return True


def resolve_overlaps(spans: Sequence[PIISpan]) -> list[PIISpan]:
    """Keep a non-overlapping subset: longer spans first, then higher score, then earlier (deterministic)."""
    occ = Occupancy()
    for s in sorted(spans, key=lambda s: (-(s.end - s.start), -s.score, s.start, s.label)):
        occ.try_add(s)
    return list(occ.spans)


def merge_for_redaction(spans: Sequence[PIISpan]) -> list[PIISpan]:
    """Union of overlapping spans (redact everything any recognizer flagged); the merged span takes the
    label of its longest member (ties: higher score) and the highest score."""
    out: list[PIISpan] = []
    for s in sorted((s for s in spans if s.end > s.start), key=lambda s: (s.start, -s.end)):
        if out and s.start < out[-1].end:
            prev = out[-1]
            best = max((prev, s), key=lambda x: (x.end - x.start, x.score))
            out[-1] = PIISpan(
                prev.start,
                max(prev.end, s.end),
                best.label,
                max(prev.score, s.score),
                "+".join(dict.fromkeys(filter(None, (prev.source, s.source)))),
            )
        else:
            out.append(s)
    return out


def as_corpus_spans(spans: Sequence[PIISpan]) -> tuple[Span, ...]:
    return tuple(Span(s.start, s.end, s.label) for s in spans)


def to_bio(text: str, spans: Sequence[PIISpan]) -> tuple[list[str], list[str]]:
    """Tokens (``privnlp.data.tokenize``) and BIO tags of non-overlapping ``spans``."""
    return spans_to_bio(text, as_corpus_spans(resolve_overlaps(spans)))


def tags_to_spans(
    text: str, tags: Sequence[str], score: float = 1.0, source: str = "tagger"
) -> list[PIISpan]:
    """Character spans of BIO ``tags`` over ``tokenize(text)`` (a stray ``I-X`` starts an entity)."""

    toks = tokenize(text)
    if len(tags) > len(toks):
        tags = list(tags)[: len(toks)]
    out = []
    for a, b, lab in bio_to_spans(list(tags)):
        out.append(PIISpan(toks[a][1], toks[b - 1][2], lab, score, source))
    return out
