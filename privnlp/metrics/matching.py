"""Batch matching of reconstructions to references by Hungarian assignment.

A gradient-inversion attack on a batch recovers sentences in an unknown order
(``../shared/papers/lamp-extracting-text-from-gradients.txt``,
``../shared/papers/film-recovering-private-text-in-fl.txt``); they are scored after a
maximum-score one-to-one matching (scipy's ``linear_sum_assignment``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from privnlp.metrics.text import rouge

from ..core.errors import InvalidArgument

__all__ = ["Matching", "hungarian_match"]


@dataclass(frozen=True)
class Matching:
    """``pairs[i] = (ref_index, hyp_index)``; ``scores[i]`` its score; ``mean_score`` is the sum of
    matched scores divided by the number of references (unmatched references count 0).

    Attributes:
        pairs: matched ``(ref_index, hyp_index)`` pairs.
        scores: the score of each pair.
        mean_score: the sum of matched scores divided by the number of references.
    """

    pairs: tuple[tuple[int, int], ...]
    scores: tuple[float, ...]
    mean_score: float

    def reordered(self, hyps: Sequence[str]) -> list[str | None]:
        """Hypotheses reordered to line up with the references (``None`` when unmatched)."""
        out: list[str | None] = [None] * (max((r for r, _ in self.pairs), default=-1) + 1)
        for r, h in self.pairs:
            out[r] = hyps[h]
        return out


def _rouge_l(ref: str, hyp: str) -> float:
    return rouge([ref], [hyp])["rougeL"]


def hungarian_match(
    refs: Sequence[str], hyps: Sequence[str], score_fn: Callable[[str, str], float] | None = None
) -> Matching:
    """Match ``hyps`` to ``refs`` one-to-one maximising the total ``score_fn(ref, hyp)``
    (default ROUGE-L F). Works for unequal sizes (extra items stay unmatched).

    Args:
        refs: the references; not empty.
        hyps: the hypotheses (may be empty: nothing is matched).
        score_fn: ``(ref, hyp) -> float``, higher is better; must be finite.

    Returns:
        The optimal one-to-one matching (scipy's ``linear_sum_assignment``).

    Raises:
        InvalidArgument: ``refs`` is empty, or ``score_fn`` returned a non-finite score.
    """
    # deferred: scipy: only this metric needs it (privnlp.metrics stays light)
    from scipy.optimize import linear_sum_assignment

    refs, hyps = list(refs), list(hyps)
    if not refs:
        raise InvalidArgument("refs must not be empty")
    if not hyps:
        return Matching((), (), 0.0)
    fn = score_fn or _rouge_l
    m = np.array([[float(fn(r, h)) for h in hyps] for r in refs])
    if not np.all(np.isfinite(m)):
        raise InvalidArgument("score_fn returned a non-finite score")
    ri, ci = linear_sum_assignment(m, maximize=True)
    pairs = tuple((int(r), int(c)) for r, c in zip(ri, ci))
    scores = tuple(float(m[r, c]) for r, c in pairs)
    return Matching(pairs, scores, float(sum(scores) / len(refs)))
