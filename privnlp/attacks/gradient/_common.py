"""Shared helpers of the gradient-leakage attacks (metrics glue, gradient access).

Metrics come from :mod:`privnlp.metrics` when it is installed in the tree; a minimal fallback on
``rouge-score`` / ``scipy`` keeps the attacks usable while that package is being written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from rouge_score import rouge_scorer
from scipy.optimize import linear_sum_assignment

from privnlp.core.errors import InvalidArgument
from privnlp.metrics import hungarian_match

__all__ = [
    "rouge_scores",
    "best_match_rouge",
    "hungarian_rouge",
    "set_prf",
    "nerr",
    "grad_tensor",
    "token_prf",
]


def _rouge_scorer():
    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)


_SCORER = None


def rouge_pair(ref: str, hyp: str) -> dict[str, float]:
    """ROUGE-1/2/L F-scores of one (reference, hypothesis) pair."""
    global _SCORER
    # same library and settings as privnlp.metrics.rouge, with the scorer cached (called per pair)
    if _SCORER is None:
        _SCORER = _rouge_scorer()
    s = _SCORER.score(ref, hyp)
    return {k: float(s[k].fmeasure) for k in ("rouge1", "rouge2", "rougeL")}


def rouge_scores(refs: Sequence[str], hyps: Sequence[str]) -> dict[str, float]:
    """Mean ROUGE-1/2/L F over aligned pairs."""
    if len(refs) != len(hyps):
        raise InvalidArgument(
            f"refs and hyps must have the same length; got {len(refs)} and {len(hyps)}"
        )
    if not refs:
        return {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    rows = [rouge_pair(r, h) for r, h in zip(refs, hyps)]
    return {k: float(np.mean([r[k] for r in rows])) for k in ("rouge1", "rouge2", "rougeL")}


def best_match_rouge(refs: Sequence[str], hyps: Sequence[str]) -> dict[str, float]:
    """FILM's single-sentence score: the best (ref, hyp) pair over the batch, per metric."""
    out = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for r in refs:
        for h in hyps:
            s = rouge_pair(r, h)
            for k in out:
                out[k] = max(out[k], s[k])
    return out


def _hungarian(refs: Sequence[str], hyps: Sequence[str], key: str) -> list[tuple[int, int]]:
    try:
        res = hungarian_match(list(refs), list(hyps), lambda r, h: rouge_pair(r, h)[key])
        pairs = getattr(res, "pairs", res)
        return [(int(i), int(j)) for i, j in pairs]
    except (ImportError, TypeError, ValueError):
        pass

    m = np.array([[rouge_pair(r, h)[key] for h in hyps] for r in refs], dtype=float)
    ri, ci = linear_sum_assignment(-m)
    return list(zip(ri.tolist(), ci.tolist()))


def hungarian_rouge(
    refs: Sequence[str], hyps: Sequence[str], key: str = "rougeL"
) -> dict[str, float]:
    """Mean ROUGE over a one-to-one (Hungarian) matching of references to hypotheses, averaged
    over the references (unmatched references count 0)."""
    if not refs or not hyps:
        return {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    pairs = _hungarian(refs, hyps, key)
    tot = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for i, j in pairs:
        s = rouge_pair(refs[i], hyps[j])
        for k in tot:
            tot[k] += s[k]
    return {k: v / len(refs) for k, v in tot.items()}


def set_prf(pred: Any, gold: Any) -> dict[str, float]:
    """Set precision / recall / F1 / exact match (empty prediction: precision 1 if gold empty)."""
    p, g = set(pred), set(gold)
    tp = len(p & g)
    prec = tp / len(p) if p else (1.0 if not g else 0.0)
    rec = tp / len(g) if g else 1.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
    return {"precision": prec, "recall": rec, "f1": f1, "exact_match": float(p == g)}


def token_prf(pred_tokens: Sequence[str], gold_tokens: Sequence[str]) -> dict[str, float]:
    out = set_prf(pred_tokens, gold_tokens)
    return {"token_precision": out["precision"], "token_recall": out["recall"]}


def nerr(
    refs: Sequence[str], hyps: Sequence[str], entities: Sequence[Sequence[str]] | None
) -> float | None:
    """Named-entity recovery ratio: fraction of the references' entity strings found verbatim in
    some hypothesis. ``entities[i]`` are the entity strings of ``refs[i]``."""
    if not entities:
        return None
    # same definition as privnlp.metrics.nerr (substring recovery), but against *all* outputs:
    # FILM's outputs are not aligned with the batch's records
    ents = [e for es in entities for e in es if e]
    if not ents:
        return None
    text = "\n".join(hyps).lower()
    return float(np.mean([e.lower() in text for e in ents]))


def grad_tensor(gradients: Mapping[str, Any], name: str):
    if name not in gradients:
        raise InvalidArgument(
            f"the observation has no gradient for parameter {name!r}; "
            f"available: {', '.join(list(gradients)[:12])}..."
        )
    g = gradients[name]
    return g if isinstance(g, torch.Tensor) else torch.as_tensor(np.asarray(g))


def find_param(gradients: Mapping[str, Any], candidates: Sequence[str]) -> str | None:
    for c in candidates:
        for name in gradients:
            if name == c or name.endswith("." + c) or name.endswith(c):
                return name
    return None


def mean_metric(
    rows: Sequence[Mapping[str, float]], keys: Sequence[str] | None = None
) -> dict[str, float]:
    if not rows:
        return {}
    keys = keys or list(rows[0])
    return {k: float(np.mean([r[k] for r in rows])) for k in keys}


ScoreFn = Callable[[Any, Any], Mapping[str, float]]
