"""Utility of a fragment release: coverage of held-out n-grams by the released fragments.

Paper: ``../shared/papers/phrase-pair-fragmentation-nmt.txt`` (Sec. 3.2: domain adaptation is
largely about learning new words and short phrases, so what matters is whether the in-domain
test n-grams occur in the released fragments). The end-to-end BLEU check lives in
:mod:`privnlp.mechanisms.fragmentation.nmt`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from privnlp.mechanisms.fragmentation.mechanism import strip_tags

__all__ = ["ngram_coverage"]


def _ngrams(tokens: Sequence[str], n: int) -> Iterable[tuple[str, ...]]:
    return (tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def ngram_coverage(
    fragments: Iterable[Sequence[str] | str],
    test_sentences: Iterable[Sequence[str] | str],
    orders: Sequence[int] = (1, 2, 3, 4),
    *,
    prefix: str = "ngram_coverage",
) -> dict[str, float]:
    """Fraction of held-out n-gram occurrences (per order) found inside one released fragment.

    Fragments/sentences are token sequences or space-separated strings; ``<P>``/``</P>`` tags are ignored.
    Returns ``{f"{prefix}_{n}": ..., f"{prefix}_mean": ...}``.

    Args:
        fragments: the released fragments.
        test_sentences: held-out sentences.
        orders: the n-gram orders.
        prefix: the key prefix.

    Returns:
        Coverage per order in [0, 1] (NaN when a test sentence set has no n-gram of that order) and their mean.
    """

    frags = [strip_tags(f.split() if isinstance(f, str) else f) for f in fragments]
    tests = [list(s.split() if isinstance(s, str) else s) for s in test_sentences]
    out: dict[str, float] = {}
    for n in orders:
        have = set()
        for f in frags:
            have.update(_ngrams(f, n))
        tot = hit = 0
        for s in tests:
            for g in _ngrams(s, n):
                tot += 1
                hit += g in have
        out[f"{prefix}_{n}"] = hit / tot if tot else float("nan")
    vals = [v for v in out.values() if v == v]
    out[f"{prefix}_mean"] = sum(vals) / len(vals) if vals else float("nan")
    return out
