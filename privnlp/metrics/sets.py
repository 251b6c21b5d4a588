"""Set precision / recall / F1 / exact match and top-K accuracy.

Used for label recovery from gradients (``../shared/papers/rlg-revealing-labels-from-gradients.txt``),
bag-of-words recovery (``../shared/papers/film-recovering-private-text-in-fl.txt``) and
vocabulary membership.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import InvalidArgument, check_range

__all__ = ["PRF", "set_prf", "top_k_accuracy"]


@dataclass(frozen=True)
class PRF:
    """Precision, recall, F1 and exact match (1.0 when prediction == gold).

    Attributes:
        precision: true positives / predicted, in [0, 1].
        recall: true positives / gold, in [0, 1].
        f1: harmonic mean of precision and recall (0 when both are 0).
        exact_match: 1.0 when the prediction equals the gold exactly (or the fraction of such documents).
    """

    precision: float
    recall: float
    f1: float
    exact_match: float

    def to_dict(self) -> dict[str, float]:
        return {
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "exact_match": self.exact_match,
        }


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def set_prf(pred: Iterable[Any], gold: Iterable[Any], *, multiset: bool = False) -> PRF:
    """P/R/F1/EM of a predicted set against a gold set.

    With ``multiset=True`` counts matter (e.g. labels of a batch: ``[1, 1, 0]``). Empty pred
    and empty gold give 1.0 everywhere (a perfect, if trivial, prediction).

    Args:
        pred: predicted items (hashable).
        gold: gold items (hashable).
        multiset: compare with multiplicities (``collections.Counter``) instead of sets.

    Returns:
        ``PRF(precision, recall, f1, exact_match)``, each in [0, 1].
    """
    if multiset:
        p, g = Counter(pred), Counter(gold)
        tp = sum((p & g).values())
        np_, ng = sum(p.values()), sum(g.values())
        em = float(p == g)
    else:
        p, g = set(pred), set(gold)
        tp, np_, ng = len(p & g), len(p), len(g)
        em = float(p == g)
    if np_ == 0 and ng == 0:
        return PRF(1.0, 1.0, 1.0, 1.0)
    prec = tp / np_ if np_ else 0.0
    rec = tp / ng if ng else 0.0
    return PRF(prec, rec, _f1(prec, rec), em)


def top_k_accuracy(scores: Any, targets: Sequence[int], k: int = 1) -> float:
    """Fraction of rows whose target index is among the ``k`` highest scores.

    ``scores``: ``(n, C)`` array-like (a torch tensor works too), or a list of ranked
    candidate lists (then the first ``k`` entries of each list are used).

    Args:
        scores: an ``(n, C)`` score array, or ``n`` ranked candidate lists.
        targets: the correct class index (or candidate) of each row.
        k: how many top entries count, an integer in [1, 10**9] (capped at C).

    Returns:
        The fraction in [0, 1] (0 for no rows).

    Raises:
        InvalidArgument: ``k`` out of range, ``scores`` not 2-D, or ``scores`` and ``targets`` of different lengths.
    """
    check_range("k", k, 1, 10**9, integer=True)
    targets = list(targets)
    if (
        isinstance(scores, (list, tuple))
        and scores
        and isinstance(scores[0], (list, tuple))
        and not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in scores[0])
    ):
        ranked = scores
        if len(ranked) != len(targets):
            raise InvalidArgument(
                f"scores and targets must have the same length; got {len(ranked)} and {len(targets)}"
            )
        return (
            float(np.mean([t in list(r)[:k] for r, t in zip(ranked, targets)])) if targets else 0.0
        )
    if hasattr(scores, "detach"):
        scores = scores.detach().cpu().numpy()
    s = np.asarray(scores, dtype=float)
    if s.ndim != 2:
        raise InvalidArgument(f"scores must be a 2-D (n, num_classes) array; got shape {s.shape}")
    if s.shape[0] != len(targets):
        raise InvalidArgument(
            f"scores and targets must have the same length; got {s.shape[0]} and {len(targets)}"
        )
    if s.shape[0] == 0:
        return 0.0
    k = min(int(k), s.shape[1])
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return float(np.mean([t in row for row, t in zip(top, targets)]))
