"""Text-reconstruction metrics: ROUGE (rouge-score), BLEU / chrF (sacrebleu), NERR, token
precision/recall and edit distance.

ROUGE-1/2/L F and NERR are the headline metrics of the gradient-inversion papers
(``../shared/papers/film-recovering-private-text-in-fl.txt``,
``../shared/papers/lamp-extracting-text-from-gradients.txt``). NERR (named-entity recovery
rate) is computed from gold spans, so no spaCy model is needed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.errors import InvalidArgument

__all__ = [
    "rouge",
    "bleu",
    "chrf",
    "nerr",
    "token_precision_recall",
    "TokenPR",
    "edit_distance",
    "simple_tokens",
]

_TOK = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def simple_tokens(text: str, *, lowercase: bool = True) -> list[str]:
    """Words and punctuation marks (the same regex as the corpus tokenizer).

    Args:
        text: the text to split.
        lowercase: lowercase first.

    Returns:
        The tokens (``\\w+|[^\\w\\s]``).
    """
    return _TOK.findall(text.lower() if lowercase else text)


def _pairs(refs, hyps, name: str = "hyps") -> tuple[list[str], list[str]]:
    if isinstance(refs, str):
        refs = [refs]
    if isinstance(hyps, str):
        hyps = [hyps]
    refs, hyps = list(refs), list(hyps)
    if len(refs) != len(hyps):
        raise InvalidArgument(
            f"refs and {name} must have the same length; got {len(refs)} and {len(hyps)}"
        )
    if not refs:
        raise InvalidArgument("refs must not be empty")
    return refs, hyps


def rouge(
    refs: Sequence[str] | str, hyps: Sequence[str] | str, *, use_stemmer: bool = False
) -> dict[str, float]:
    """Mean ROUGE-1/2/L F-measure over aligned pairs (``rouge-score``; its tokenizer lowercases
    and keeps ``[a-z0-9]+`` tokens).

    Args:
        refs: reference text(s); a single string is one pair.
        hyps: hypothesis text(s), aligned with ``refs`` (same length).
        use_stemmer: Porter-stem tokens before matching.

    Returns:
        ``{"rouge1", "rouge2", "rougeL"}``: mean F-measures in [0, 1].

    Raises:
        InvalidArgument: ``refs`` and ``hyps`` of different lengths, or empty.
    """
    from rouge_score import rouge_scorer  # deferred: rouge_score pulls nltk: this metric only

    refs, hyps = _pairs(refs, hyps)
    sc = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=use_stemmer)
    tot = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for r, h in zip(refs, hyps):
        s = sc.score(r, h)
        for k in tot:
            tot[k] += s[k].fmeasure
    return {k: v / len(refs) for k, v in tot.items()}


def bleu(refs: Sequence[str] | str, hyps: Sequence[str] | str) -> float:
    """Corpus BLEU (sacrebleu, 0-100) of ``hyps`` against one reference each.

    Args:
        refs: one reference per hypothesis (a single string is one pair).
        hyps: hypotheses aligned with ``refs``.

    Raises:
        InvalidArgument: ``refs`` and ``hyps`` of different lengths, or empty.

    Returns:
        BLEU in [0, 100].
    """
    import sacrebleu  # deferred: sacrebleu: BLEU / chrF only

    refs, hyps = _pairs(refs, hyps)
    return float(sacrebleu.corpus_bleu(hyps, [refs]).score)


def chrf(refs: Sequence[str] | str, hyps: Sequence[str] | str) -> float:
    """Corpus chrF (sacrebleu, 0-100) of ``hyps`` against one reference each (arguments as :func:`bleu`).

    Raises:
        InvalidArgument: ``refs`` and ``hyps`` of different lengths, or empty.

    Args:
        refs: one reference per hypothesis (a single string is one pair).
        hyps: hypotheses aligned with ``refs``.

    Returns:
        chrF in [0, 100].
    """
    import sacrebleu  # deferred: sacrebleu: BLEU / chrF only

    refs, hyps = _pairs(refs, hyps)
    return float(sacrebleu.corpus_chrf(hyps, [refs]).score)


def _entity_strings(entities) -> list[str]:
    """Accept entity strings, ``(text, label)`` pairs, or a Record (uses its gold spans)."""
    if hasattr(entities, "spans") and hasattr(entities, "text"):
        return [entities.text[s.start : s.end] for s in entities.spans]
    out = []
    for e in entities:
        out.append(e if isinstance(e, str) else e[0])
    return out


def nerr(entities, reconstructions, *, case_sensitive: bool = False) -> float:
    """Named-entity recovery rate: the fraction of gold entity strings that appear (as a
    substring) in the reconstruction.

    ``entities``: per example, a :class:`~privnlp.data.Record` (its gold spans are used), or a
    list of entity strings / ``(text, label)`` pairs; ``reconstructions``: one string per
    example. A single example may be passed unwrapped (record / entity list and a string).
    Counts are pooled over examples (micro average); with no gold entity the rate is 0.

    Args:
        entities: per example, a :class:`~privnlp.data.Record` or a list of entity strings / ``(text, label)`` pairs.
        reconstructions: one reconstructed string per example.
        case_sensitive: compare case-sensitively.

    Returns:
        The recovery rate in [0, 1].

    Raises:
        InvalidArgument: ``entities`` and ``reconstructions`` of different lengths.
    """
    if isinstance(reconstructions, str):
        entities, reconstructions = [entities], [reconstructions]
    entities, reconstructions = list(entities), list(reconstructions)
    if len(entities) != len(reconstructions):
        raise InvalidArgument(
            f"entities and reconstructions must have the same length; got "
            f"{len(entities)} and {len(reconstructions)}"
        )
    hit = tot = 0
    for ents, rec in zip(entities, reconstructions):
        strs = _entity_strings(ents)
        rec_ = rec if case_sensitive else rec.lower()
        for s in strs:
            tot += 1
            hit += (s if case_sensitive else s.lower()) in rec_
    return hit / tot if tot else 0.0


@dataclass(frozen=True)
class TokenPR:
    """Token-multiset precision and recall (and their F1).

    Attributes:
        precision: overlap / number of hypothesis tokens, in [0, 1].
        recall: overlap / number of reference tokens, in [0, 1].
        f1: their harmonic mean.
    """

    precision: float
    recall: float
    f1: float


def token_precision_recall(
    ref: str | Sequence[str], hyp: str | Sequence[str], *, lowercase: bool = True
) -> TokenPR:
    """Clipped token overlap: precision = |ref ∩ hyp| / |hyp|, recall = |ref ∩ hyp| / |ref|
    (multisets; strings are tokenized with :func:`simple_tokens`).

    Args:
        ref: the reference, a string or a token sequence.
        hyp: the hypothesis, a string or a token sequence.
        lowercase: lowercase strings before tokenizing (token sequences are used as they are).

    Returns:
        Precision, recall and F1 (0 for an empty side).
    """
    r = simple_tokens(ref, lowercase=lowercase) if isinstance(ref, str) else list(ref)
    h = simple_tokens(hyp, lowercase=lowercase) if isinstance(hyp, str) else list(hyp)
    ov = sum((Counter(r) & Counter(h)).values())
    p = ov / len(h) if h else 0.0
    rc = ov / len(r) if r else 0.0
    return TokenPR(p, rc, 2 * p * rc / (p + rc) if p + rc else 0.0)


def edit_distance(
    a: str | Sequence, b: str | Sequence, *, level: str = "token", normalized: bool = False
) -> float:
    """Levenshtein distance at ``level="token"`` (words via :func:`simple_tokens`, case kept) or
    ``"char"``; sequences are used as they are. ``normalized`` divides by ``max(len)``.

    Hand-written (tiny DP) so no extra dependency is needed.

    Args:
        a: the first string or sequence.
        b: the second string or sequence.
        level: ``"token"`` or ``"char"`` (how strings are split).
        normalized: divide by the longer length (0 when both are empty).

    Returns:
        The number of insertions, deletions and substitutions (or that number normalized to [0, 1]).

    Raises:
        InvalidArgument: ``level`` is not ``"token"`` or ``"char"``.
    """
    if level not in ("token", "char"):
        raise InvalidArgument(f"level must be 'token' or 'char'; got {level!r}")

    def seq(x) -> Sequence:
        if isinstance(x, str):
            return list(x) if level == "char" else simple_tokens(x, lowercase=False)
        return list(x)

    s, t = seq(a), seq(b)
    prev = list(range(len(t) + 1))
    for i, x in enumerate(s, 1):
        cur = [i] + [0] * len(t)
        for j, y in enumerate(t, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    d = prev[-1]
    if normalized:
        m = max(len(s), len(t))
        return d / m if m else 0.0
    return float(d)
