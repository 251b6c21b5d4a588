"""NER span metrics (strict / exact / type / partial) and seqeval F1.

The four schemes follow ``../shared/papers/wikipii-pii-extraction-federated.txt`` (after MUC-5
and SemEval'13 task 9), including its Table 3:

* strict:  full credit when boundary and type match;
* exact:   full credit when the boundary matches (type ignored);
* type:    full credit for strict matches, half credit when the type matches and the boundary
  overlaps;
* partial: full credit for strict matches, half credit when the boundary overlaps (any type,
  an exact boundary with a wrong type included).

Gold and predicted entities are paired one-to-one per document by a maximum-credit assignment
(scipy's Hungarian solver); precision = credit / #pred, recall = credit / #gold. Hand-written
because seqeval only does strict CoNLL scoring and nervaluate's "type" scheme gives no half
credit (the paper's does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import InvalidArgument
from .sets import PRF

__all__ = ["SpanMetrics", "ner_span_metrics", "seqeval_f1", "bio_to_spans"]

SCHEMES = ("strict", "exact", "type", "partial")


@dataclass(frozen=True)
class SpanMetrics:
    """Entity-span precision / recall / F1 under the four matching schemes of the SemEval-2013 NER evaluation.

    Attributes:
        strict: exact boundaries and the same label.
        exact: exact boundaries, any label.
        type: the same label with overlapping boundaries (half credit unless exact).
        partial: overlapping boundaries, any label (half credit unless exact boundaries and label).
    """

    strict: PRF
    exact: PRF
    type: PRF
    partial: PRF

    def to_dict(self) -> dict[str, float]:
        out = {}
        for s in SCHEMES:
            for k, v in getattr(self, s).to_dict().items():
                out[f"{s}_{k}"] = v
        return out


def bio_to_spans(tags: Sequence[str]) -> list[tuple[int, int, str]]:
    """``(start_token, end_token_exclusive, label)`` spans from BIO (or IOB2) tags; a stray
    ``I-X`` starts a new entity (as in conlleval).

    Args:
        tags: one tag per token: ``"O"``, ``"B-X"`` or ``"I-X"``.

    Returns:
        ``(start_token, end_token_exclusive, label)`` triples, in order.

    Raises:
        InvalidArgument: a tag is not ``O`` / ``B-X`` / ``I-X``.
    """
    spans = []
    cur = None
    for i, t in enumerate(list(tags) + ["O"]):
        if (
            t == "O"
            or t.startswith("B-")
            or (t.startswith("I-") and (cur is None or cur[2] != t[2:]))
        ):
            if cur is not None:
                spans.append((cur[0], i, cur[2]))
                cur = None
            if t != "O":
                if not (t.startswith("B-") or t.startswith("I-")):
                    raise InvalidArgument(f"tag {t!r} at position {i} is not BIO (O, B-X, I-X)")
                cur = [i, i + 1, t[2:]]
        elif not t.startswith("I-"):
            raise InvalidArgument(f"tag {t!r} at position {i} is not BIO (O, B-X, I-X)")
    return spans


def _as_span(x: Any) -> tuple[int, int, str]:
    if hasattr(x, "start") and hasattr(x, "end") and hasattr(x, "label"):
        return int(x.start), int(x.end), str(x.label)
    s, e, lab = x
    return int(s), int(e), str(lab)


def _is_doc_of_spans(x: Any) -> bool:
    return hasattr(x, "start") or (
        isinstance(x, (tuple, list))
        and len(x) == 3
        and isinstance(x[0], (int, np.integer))
        and isinstance(x[2], str)
    )


def _docs(x: Any, name: str) -> list[list[tuple[int, int, str]]]:
    x = list(x)
    if not x:
        return [[]]
    if isinstance(x[0], str):  # one tag sequence
        return [bio_to_spans(x)]
    if _is_doc_of_spans(x[0]):
        return [[_as_span(s) for s in x]]
    docs = []
    for d in x:
        d = list(d)
        if d and isinstance(d[0], str):
            docs.append(bio_to_spans(d))
        else:
            docs.append([_as_span(s) for s in d])
    return docs


def _credit(g: tuple[int, int, str], p: tuple[int, int, str], scheme: str) -> float:
    same_b = g[0] == p[0] and g[1] == p[1]
    overlap = g[0] < p[1] and p[0] < g[1]
    same_t = g[2] == p[2]
    if scheme == "strict":
        return float(same_b and same_t)
    if scheme == "exact":
        return float(same_b)
    if scheme == "type":
        return 1.0 if (same_b and same_t) else (0.5 if same_t and overlap else 0.0)
    return 1.0 if (same_b and same_t) else (0.5 if overlap else 0.0)


def _doc_credit(gold, pred, scheme: str) -> float:
    if not gold or not pred:
        return 0.0
    # deferred: scipy: only this metric needs it (privnlp.metrics stays light)
    from scipy.optimize import linear_sum_assignment

    m = np.array([[_credit(g, p, scheme) for p in pred] for g in gold])
    r, c = linear_sum_assignment(m, maximize=True)
    return float(m[r, c].sum())


def ner_span_metrics(gold: Any, pred: Any) -> SpanMetrics:
    """Strict / exact / type / partial P-R-F1 of predicted entity spans.

    ``gold`` / ``pred``: one document (a list of spans ``(start, end, label)`` / :class:`Span`,
    or a BIO tag list) or a list of documents. ``exact_match`` is the fraction of documents
    whose prediction gets full credit for every gold and predicted entity.

    Args:
        gold: the gold entities (one document or a list of documents, as above).
        pred: the predicted entities, in the same shape.

    Returns:
        P/R/F1/exact match under each scheme; all 1.0 when there is no gold and no predicted entity.

    Raises:
        InvalidArgument: ``gold`` and ``pred`` hold different numbers of documents, or a tag is not BIO.
    """
    gd, pd = _docs(gold, "gold"), _docs(pred, "pred")
    if len(gd) != len(pd):
        raise InvalidArgument(
            f"gold and pred must hold the same number of documents; got {len(gd)} and {len(pd)}"
        )
    ng = sum(len(d) for d in gd)
    npred = sum(len(d) for d in pd)
    res = {}
    for scheme in SCHEMES:
        credits = [_doc_credit(g, p, scheme) for g, p in zip(gd, pd)]
        tot = sum(credits)
        em = float(np.mean([c == len(g) == len(p) for c, g, p in zip(credits, gd, pd)]))
        if ng == 0 and npred == 0:
            res[scheme] = PRF(1.0, 1.0, 1.0, 1.0)
            continue
        prec = tot / npred if npred else 0.0
        rec = tot / ng if ng else 0.0
        res[scheme] = PRF(prec, rec, 2 * prec * rec / (prec + rec) if prec + rec else 0.0, em)
    return SpanMetrics(**res)


def seqeval_f1(
    gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]], *, strict: bool = False
) -> float:
    """Entity-level micro F1 of BIO tag sequences (``seqeval``; ``strict=True`` uses IOB2 mode).

    Args:
        gold_tags: one BIO tag sequence per sentence.
        pred_tags: predicted tags, same shape.
        strict: use seqeval's strict IOB2 mode (entities must start with ``B-``).

    Returns:
        The micro F1 in [0, 1] (0 when undefined).

    Raises:
        InvalidArgument: ``gold_tags`` is a single tag sequence, or the shapes differ.
    """
    from seqeval.metrics import f1_score  # deferred: seqeval (slow import): this metric only

    gold_tags, pred_tags = [list(x) for x in gold_tags], [list(x) for x in pred_tags]
    if gold_tags and isinstance(gold_tags[0], str):
        raise InvalidArgument("gold_tags must be a list of tag sequences (one per sentence)")
    if len(gold_tags) != len(pred_tags) or any(
        len(a) != len(b) for a, b in zip(gold_tags, pred_tags)
    ):
        raise InvalidArgument(
            "gold_tags and pred_tags must have the same shape (sentences x tokens)"
        )
    if strict:
        from seqeval.scheme import IOB2

        return float(f1_score(gold_tags, pred_tags, mode="strict", scheme=IOB2, zero_division=0))
    return float(f1_score(gold_tags, pred_tags, zero_division=0))
