"""Record-level correlation attacks on federated snapshots: Eavesdropping (ECorr) and Watermark (WCorr).

Paper: ``../shared/papers/record-level-privacy-leakage-in-fl.txt`` (Yuan et al.), Sec. IV:

* exposure rate of a text under a model = mean token log-probability (= -log perplexity, Eq. 5);
* ECorr(x) = Spearman({Exposure_t(x) - Exposure_{t-1}(x)}_t, {s_t}_t) with s_t = +1 if the victim
  was selected in round t, else -1 (Eq. 9); the eavesdropper knows the selection of the victim;
* WCorr(x) = Spearman of x's exposure changes with those of a watermark y the adversary injected
  into the victim's data (Eq. 11); the adversary does not see the selection;
* rank combination r(x) = rank(corr(x)) + rank(final exposure(x)) with rank 1 = the highest value;
  the prediction is argmin r(x) (Eqs. 10 and 12, Algorithms 1-2);
* candidates: the adversary knows the record's prefix ("my social security number is ") and
  generates candidates from the final global model by beam search plus constrained sampling over
  the record's alphabet (digits);
* metrics: top-K accuracy (the victim's record among the K best-ranked candidates) and the
  smallest character edit distance among the top K (Sec. V-B); the Carlini et al. baseline ranks
  candidates by final exposure only.

Explicit edge cases: a constant exposure-change vector (or a constant selection vector, e.g. a
victim selected in every round) has no Spearman correlation: it is NaN, and NaN correlations are
ranked *last* (they carry no evidence). Ties in ranks get the average rank; the final order breaks
ties by final exposure, then by candidate order (deterministic).

Threat model: a compromised client / eavesdropper that snapshots the global model after every
aggregation (no access to local models; the server is trusted); Eavesdropping additionally knows
when the victim is selected; Watermark can inject one record into the victim's data.
"""

from __future__ import annotations

import abc
import math
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats
from tqdm.auto import tqdm

from privnlp.attacks.memorization._lm import causal_log_probs, exposure_rates
from privnlp.attacks.memorization.exposure import canary_template
from privnlp.attacks.memorization.extraction import (
    _flat_alphabets,
    _split,
    beam_extract,
    render_partial,
)
from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument, check_range
from privnlp.core.observations import ModelSnapshots
from privnlp.core.protocols import Attack, AttackResult
from privnlp.core.registry import ATTACKS
from privnlp.core.rng import as_numpy
from privnlp.metrics import edit_distance

__all__ = [
    "spearman",
    "exposure_trajectories",
    "selection_indicator",
    "ecorr",
    "wcorr",
    "rank_desc",
    "combined_rank",
    "generate_candidates",
    "CorrelationResult",
    "EavesdroppingAttack",
    "WatermarkAttack",
    "TOP_KS",
]

TOP_KS = (1, 5, 10, 20, 50)

EAVESDROPPER_TM = ThreatModel(
    adversary=Adversary.EAVESDROPPER,
    observes=(
        "the global model after every aggregation round",
        "whether the victim client was selected each round",
    ),
    knows=("the record's prefix / format", "the tokenizer and architecture"),
    goal="extract the victim client's private record and link it to the client",
)
WATERMARK_TM = ThreatModel(
    adversary=Adversary.MALICIOUS_CLIENT,
    observes=("the global model after every aggregation round",),
    knows=(
        "the record's prefix / format",
        "a watermark record it injected once into the victim's data",
    ),
    goal="extract the victim client's private record and link it to the client",
)


# ----------------------------------------------------------------------------- statistics
def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation; NaN when either vector is constant (no correlation defined)
    or has fewer than 2 finite pairs.

    Args:
        a: the first vector.
        b: the second vector, same length (pairs with a non-finite entry are dropped).

    Returns:
        The correlation in [-1, 1], or NaN.

    Raises:
        InvalidArgument: the vectors have different shapes.
    """

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise InvalidArgument(
            f"spearman: vectors must have the same length; got {x.shape} and {y.shape}"
        )
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(stats.spearmanr(x, y).statistic)


def rank_desc(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Rank 1 = the highest value (average ranks for ties); NaN values all share the last ranks.

    Args:
        values: the values to rank.

    Returns:
        Float ranks in [1, n].
    """

    v = np.asarray(values, dtype=float)
    out = np.empty(v.size, dtype=float)
    fin = np.isfinite(v)
    out[fin] = stats.rankdata(-v[fin], method="average")
    n_fin = int(fin.sum())
    n_nan = v.size - n_fin
    out[~fin] = n_fin + (n_nan + 1) / 2.0  # average of the ranks n_fin+1 .. n
    return out


def combined_rank(
    corr: Sequence[float], final_exposure: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """``r(x) = rank(corr) + rank(final exposure)`` (Eqs. 10 / 12) and the candidate order
    (ascending ``r``, ties broken by higher final exposure, then by index).

    Args:
        corr: each candidate's correlation (ECorr or WCorr; NaN ranks last).
        final_exposure: each candidate's exposure rate under the final model.

    Returns:
        ``(r, order)``: the combined rank of each candidate and the candidate indices, best first.

    Raises:
        InvalidArgument: the two vectors have different lengths.
    """
    c, e = np.asarray(corr, dtype=float), np.asarray(final_exposure, dtype=float)
    if c.shape != e.shape:
        raise InvalidArgument("corr and final_exposure must have the same length")
    r = rank_desc(c) + rank_desc(e)
    e_key = np.where(np.isfinite(e), -e, np.inf)
    order = np.lexsort((np.arange(r.size), e_key, r))
    return r, order


def selection_indicator(snapshots: ModelSnapshots, victim: Any) -> np.ndarray:
    """s_t = +1 if ``victim`` was selected in round t, else -1 (t = 1..T).

    Args:
        snapshots: the snapshots with their selection log (one entry per round, or per snapshot with the
            initial model's first).
        victim: the victim client's id.

    Returns:
        A ``[T]`` array of +1 / -1.

    Raises:
        InvalidArgument: the selection log has neither ``T`` nor ``T + 1`` entries.
    """
    sel = list(snapshots.selection)
    t = snapshots.num_rounds
    if len(sel) == t + 1:
        sel = sel[1:]
    if len(sel) != t:
        raise InvalidArgument(
            f"selection must have one entry per round ({t}) or per snapshot ({t + 1}); got {len(sel)}"
        )
    return np.asarray([1.0 if victim in set(s) else -1.0 for s in sel])


def _diffs(traj: np.ndarray) -> np.ndarray:
    return np.diff(np.asarray(traj, dtype=float), axis=0)


def ecorr(trajectories: np.ndarray, s: Sequence[float]) -> np.ndarray:
    """ECorr of every candidate: ``trajectories`` is ``[T+1, n]`` exposure rates; ``s`` is ``[T]`` of +-1.

    Args:
        trajectories: ``[T+1, n]`` exposure rates of ``n`` candidates under the ``T+1`` snapshots.
        s: ``[T]`` selection indicator (see :func:`selection_indicator`).

    Returns:
        ``[n]`` Spearman correlations of each candidate's exposure changes with ``s`` (NaN when undefined).
    """
    d = _diffs(trajectories)
    return np.asarray([spearman(d[:, j], s) for j in range(d.shape[1])])


def wcorr(trajectories: np.ndarray, watermark: Sequence[float]) -> np.ndarray:
    """WCorr of every candidate with the watermark's exposure trajectory (``[T+1]``).

    Args:
        trajectories: ``[T+1, n]`` exposure rates of ``n`` candidates under the ``T+1`` snapshots.
        watermark: ``[T+1]`` exposure rates of the watermark.

    Returns:
        ``[n]`` Spearman correlations of exposure changes (NaN when undefined).
    """
    d = _diffs(trajectories)
    w = np.diff(np.asarray(watermark, dtype=float))
    return np.asarray([spearman(d[:, j], w) for j in range(d.shape[1])])


# ----------------------------------------------------------------------------- model queries
_TRAJ_CACHE: OrderedDict[tuple, dict[str, np.ndarray]] = OrderedDict()
_CAND_CACHE: OrderedDict[tuple, tuple[str, ...]] = OrderedDict()
_CACHE_SIZE = 16


def _files_key(paths: Sequence[Any]) -> tuple:
    """Identity of snapshot files: path, size and modification time (a rewritten file is a new key)."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((str(p), st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((str(p), -1, -1))
    return tuple(out)


def exposure_trajectories(
    snapshots: ModelSnapshots,
    texts: Sequence[str],
    *,
    batch_size: int = 256,
    progress: bool = False,
) -> np.ndarray:
    """Exposure rate of every text under every snapshot: array ``[T+1, len(texts)]``.

    Loads each snapshot once. Results are memoized per (snapshot files, text) for the process:
    both correlation attacks and all victims of one training run share the candidate pool and the
    watermarks' trajectories, so only texts not seen before are scored.

    Args:
        snapshots: the global models, one per round (plus the initial one).
        texts: the texts to score.
        batch_size: texts per forward pass, an integer in [1, 10**6].
        progress: show a progress bar over snapshots.

    Returns:
        ``[T+1, len(texts)]`` mean token log-probabilities.
    """

    key = _files_key(snapshots.paths)
    cached = _TRAJ_CACHE.get(key)
    if cached is None:
        cached = _TRAJ_CACHE[key] = {}
    _TRAJ_CACHE.move_to_end(key)
    while len(_TRAJ_CACHE) > _CACHE_SIZE:
        _TRAJ_CACHE.popitem(last=False)
    texts = list(texts)
    missing = list(dict.fromkeys(t for t in texts if t not in cached))
    if missing:
        models = snapshots.iter_models()
        if progress:
            models = tqdm(models, total=len(snapshots.paths), desc="snapshots", leave=False)
        cols = np.stack(
            [
                exposure_rates(m, snapshots.tokenizer, missing, batch_size=batch_size)
                for _, m in models
            ]
        )
        for j, t in enumerate(missing):
            cached[t] = cols[:, j].copy()
    if not texts:
        return np.zeros((len(snapshots.paths), 0))
    return np.stack([cached[t] for t in texts], axis=1)


def generate_candidates(
    model: Any,
    tokenizer: Any,
    pattern: str,
    *,
    beam_width: int = 64,
    n_samples: int = 64,
    temperature: float = 1.0,
    vocabulary: Sequence[str] | None = None,
    cache_key: Any = None,
    rng: Any,
) -> list[str]:
    """Candidate records from the known prefix: a beam search (width ``beam_width``) plus
    ``n_samples`` constrained ancestral samples over the record's alphabet, de-duplicated
    (beam results first, in order).

    The beam search is deterministic: with ``cache_key`` (an identity of ``model``'s weights, e.g.
    the final snapshot file) its result is memoized for the process, so every victim of one
    training run and both correlation attacks share one search (all records share the prefix).

    Args:
        model: the causal LM to search (the final global model).
        tokenizer: its tokenizer.
        pattern: the record's known format, a canary pattern such as ``"my social security number is {ssn}"``.
        beam_width: beam width; 0 = no beam search.
        n_samples: the number of constrained samples; 0 = no sampling.
        temperature: sampling temperature; > 0.
        vocabulary: the words of ``{words:N}`` placeholders.
        cache_key: identity of the model's weights for memoizing the beam search (``None`` = no cache).
        rng: the sampling randomness (keyword-only).

    Returns:
        The de-duplicated candidate texts.

    Raises:
        InvalidArgument: ``pattern`` has no known placeholder.
    """

    template = canary_template(pattern, vocabulary)
    out: list[str] = []
    if beam_width:
        bkey = (
            None
            if cache_key is None
            else (cache_key, pattern, tuple(vocabulary or ()), int(beam_width))
        )
        beam = _CAND_CACHE.get(bkey) if bkey is not None else None
        if beam is None:
            beam = beam_extract(model, tokenizer, template, beam_width=beam_width).candidates
            if bkey is not None:
                _CAND_CACHE[bkey] = beam
                while len(_CAND_CACHE) > _CACHE_SIZE:
                    _CAND_CACHE.popitem(last=False)
        else:
            _CAND_CACHE.move_to_end(bkey)
        out.extend(beam)
    if n_samples:
        g = as_numpy(rng)
        alph = _flat_alphabets(template)
        seqs: list[list[str]] = [[] for _ in range(int(n_samples))]
        for a in alph:
            texts = [render_partial(template, s + [x]) for s in seqs for x in a]
            lp = causal_log_probs(model, tokenizer, texts).total.reshape(len(seqs), len(a)) / float(
                temperature
            )
            lp = np.where(np.isfinite(lp), lp, -np.inf)  # a diverged model (NaN) gets no say
            top = lp.max(1, keepdims=True)
            p = np.exp(lp - np.where(np.isfinite(top), top, 0.0))
            tot = p.sum(1, keepdims=True)
            p = np.where(
                tot > 0, p / np.where(tot > 0, tot, 1.0), 1.0 / len(a)
            )  # all -inf -> uniform
            for s, row in zip(seqs, p):
                s.append(a[int(g.choice(len(a), p=row))])
        out.extend(template.render(_split(template, s)) for s in seqs)
    return list(dict.fromkeys(out))


# ----------------------------------------------------------------------------- attacks
@dataclass(frozen=True)
class CorrelationResult:
    """Ranked candidates of a correlation attack with the quantities behind the ranking.

    Attributes:
        candidates: the candidate records, in generation order.
        corr: ``[n]`` ECorr / WCorr of each candidate (NaN when undefined).
        final_exposure: ``[n]`` exposure rate under the final model.
        rank_score: ``[n]`` combined rank ``rank(corr) + rank(final exposure)`` (lower = better).
        order: candidate indices by the attack's ranking, best first.
        baseline_order: candidate indices by final exposure only (the Carlini et al. baseline).
    """

    candidates: tuple[str, ...]
    corr: np.ndarray
    final_exposure: np.ndarray
    rank_score: np.ndarray
    order: np.ndarray
    baseline_order: np.ndarray


def _truth_text(ground_truth: Any) -> str:
    if isinstance(ground_truth, str):
        return ground_truth
    if isinstance(ground_truth, Mapping) and "record" in ground_truth:
        return str(ground_truth["record"])
    if hasattr(ground_truth, "text"):
        return str(ground_truth.text)
    raise InvalidArgument(
        "ground truth of a correlation trial must be the victim's record text (str), "
        f"{{'record': ...}} or an object with .text; got {type(ground_truth).__name__}"
    )


def _topk_metrics(ranked: Sequence[str], truth: str, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    dists = [edit_distance(truth, c, level="char") for c in ranked]
    worst = float(max(len(truth) - len(prefix), 1))
    for k in TOP_KS:
        out[f"top{k}_accuracy"] = float(truth in ranked[:k])
        out[f"top{k}_edit_distance"] = float(min(dists[:k], default=worst))
    return out


def _correlation_scorer(result: AttackResult, ground_truth: Any) -> dict[str, float]:
    truth = _truth_text(ground_truth)
    raw = result.raw
    ours = _topk_metrics(list(result.reconstructions), truth, raw.get("prefix", ""))
    cands = raw["candidates"]
    base = _topk_metrics([cands[i] for i in raw["baseline_order"]], truth, raw.get("prefix", ""))
    out = dict(ours)
    out.update({f"baseline_{k}": v for k, v in base.items()})
    out["candidate_recall"] = float(truth in cands)
    out["nan_correlations"] = float(raw["n_nan"])
    out["advantage_top1"] = ours["top1_accuracy"] - base["top1_accuracy"]
    return out


class _CorrelationAttack(Attack):
    observation_type = ModelSnapshots
    headline_metric = "top1_accuracy"
    paper = (
        "record-level-privacy-leakage-in-fl.txt (Yuan et al., record-level privacy leakage in FL)"
    )

    def __init__(self, beam_width: int = 64, n_samples: int = 64, batch_size: int = 256) -> None:
        check_range("beam_width", beam_width, 0, 10**6, integer=True)
        check_range("n_samples", n_samples, 0, 10**6, integer=True)
        if beam_width == 0 and n_samples == 0:
            raise InvalidArgument("beam_width and n_samples cannot both be 0 (no candidates)")
        check_range("batch_size", batch_size, 1, 10**6, integer=True)
        self.beam_width = beam_width
        self.n_samples = n_samples
        self.batch_size = batch_size

    @classmethod
    def example(cls, preset: str = "quick") -> _CorrelationAttack:
        # quick: one shared beam search (width 32) per training run, no per-victim sampling -- on
        # fl.snapshots quick the true record's recall in the pool was the same as with 64 + 64
        # samples, at a fraction of the cost (see docs/readme/90-memorization.md)
        return (
            cls(beam_width=32, n_samples=0)
            if preset == "quick"
            else cls(beam_width=128, n_samples=256)
        )

    def _candidates(self, obs: ModelSnapshots, rng: Any) -> tuple[list[str], str]:
        meta = obs.meta
        given = meta.get("candidates")
        pattern = meta.get("record_pattern")
        if given:
            return list(dict.fromkeys(given)), ""
        if not pattern:
            raise InvalidArgument(
                "observation.meta needs 'record_pattern' (e.g. 'my social security number is "
                "{ssn}') or an explicit 'candidates' list"
            )

        final = obs.load(obs.num_rounds)
        cands = generate_candidates(
            final,
            obs.tokenizer,
            pattern,
            beam_width=self.beam_width,
            n_samples=self.n_samples,
            vocabulary=meta.get("record_vocabulary"),
            cache_key=_files_key(obs.paths[-1:]),
            rng=rng,
        )
        return cands, canary_template(pattern, meta.get("record_vocabulary")).prefix

    @abc.abstractmethod
    def _signal(self, obs: ModelSnapshots, traj: np.ndarray) -> np.ndarray:
        """The per-round signal the candidates' exposure changes are correlated with."""

    def correlate(self, obs: ModelSnapshots, *, rng: Any) -> tuple[CorrelationResult, str]:
        if not isinstance(obs, ModelSnapshots):
            raise InvalidArgument(
                f"{self.name} needs a ModelSnapshots observation; got {type(obs).__name__}"
            )
        if obs.num_rounds < 3:
            raise InvalidArgument(
                f"{self.name} needs at least 3 rounds of snapshots; got {obs.num_rounds}"
            )
        cands, prefix = self._candidates(obs, rng)
        traj = exposure_trajectories(obs, cands, batch_size=self.batch_size)
        corr = self._signal(obs, traj)
        final = traj[-1]
        r, order = combined_rank(corr, final)
        e_key = np.where(np.isfinite(final), -final, np.inf)
        base = np.lexsort((np.arange(final.size), e_key))
        return CorrelationResult(tuple(cands), corr, final, r, order, base), prefix

    def run(self, observation: ModelSnapshots, *, rng: Any) -> AttackResult:
        res, prefix = self.correlate(observation, rng=rng)
        ranked = tuple(res.candidates[i] for i in res.order)
        return AttackResult(
            attack=self.name,
            reconstructions=ranked,
            raw={
                "candidates": res.candidates,
                "corr": res.corr,
                "final_exposure": res.final_exposure,
                "rank_score": res.rank_score,
                "baseline_order": res.baseline_order,
                "n_nan": int(np.isnan(res.corr).sum()),
                "prefix": prefix,
            },
            scorer=_correlation_scorer,
        )


@ATTACKS.register("eavesdropping")
class EavesdroppingAttack(_CorrelationAttack):
    """Eavesdropping attack (Algorithm 1 of ``record-level-privacy-leakage-in-fl.txt``).

    Observation: :class:`ModelSnapshots` (global model after every round + the selection log) with
    ``meta['victim']`` (the client whose selections the adversary eavesdrops) and
    ``meta['record_pattern']`` (the record's known format, e.g. ``"my social security number is {ssn}"``)
    or an explicit ``meta['candidates']``. Ranking: rank(ECorr) + rank(final exposure).
    Scores: top-K accuracy / smallest edit distance for K in 1, 5, 10, 20, 50, and the same for
    the Carlini baseline (``baseline_*``, final exposure only). Headline ``top1_accuracy``.

    Threat model: an eavesdropper that snapshots the global model after every aggregation and knows when
    the victim was selected (paper Sec. IV-B, Eqs. 9-10).

    Args:
        beam_width: beam width of the candidate search, an integer in [0, 10**6].
        n_samples: constrained samples added to the candidates, an integer in [0, 10**6] (not both 0).
        batch_size: texts per forward pass when scoring, an integer in [1, 10**6].

    Raises:
        InvalidArgument: an argument out of range; (``run``) an observation that is not
            :class:`ModelSnapshots`, has fewer than 3 rounds, or lacks ``meta['victim']`` /
            ``meta['record_pattern']``.
    """

    threat_model = EAVESDROPPER_TM

    def _signal(self, obs: ModelSnapshots, traj: np.ndarray) -> np.ndarray:
        if "victim" not in obs.meta:
            raise InvalidArgument(
                "eavesdropping needs observation.meta['victim'] (the eavesdropped client id)"
            )
        return ecorr(traj, selection_indicator(obs, obs.meta["victim"]))


@ATTACKS.register("watermark")
class WatermarkAttack(_CorrelationAttack):
    """Watermark attack (Algorithm 2 of ``record-level-privacy-leakage-in-fl.txt``).

    Observation: :class:`ModelSnapshots` with ``meta['watermark']`` (the record the adversary
    injected into the victim's data) and ``meta['record_pattern']`` (or ``meta['candidates']``);
    the selection log is *not* used. Ranking: rank(WCorr) + rank(final exposure). Scores as for
    :class:`EavesdroppingAttack`. Headline ``top1_accuracy``.

    Threat model: a malicious client that injected a watermark record into the victim's data once and
    snapshots the global model after every aggregation (paper Sec. IV-C, Eqs. 11-12).

    Args:
        beam_width: beam width of the candidate search, an integer in [0, 10**6].
        n_samples: constrained samples added to the candidates, an integer in [0, 10**6] (not both 0).
        batch_size: texts per forward pass when scoring, an integer in [1, 10**6].

    Raises:
        InvalidArgument: an argument out of range; (``run``) an observation that is not
            :class:`ModelSnapshots`, has fewer than 3 rounds, or lacks ``meta['watermark']`` /
            ``meta['record_pattern']``.
    """

    threat_model = WATERMARK_TM

    def _signal(self, obs: ModelSnapshots, traj: np.ndarray) -> np.ndarray:
        wm = obs.meta.get("watermark")
        if not wm:
            raise InvalidArgument(
                "watermark needs observation.meta['watermark'] (the injected watermark text)"
            )
        w = exposure_trajectories(obs, [str(wm)], batch_size=self.batch_size)[:, 0]
        return wcorr(traj, w)
