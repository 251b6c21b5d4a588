"""FILM: recovering private text from the gradients of a federated language model.

Paper: Gupta, Huang, Zhong, Gao, Li, Chen, "Recovering Private Text in Federated Learning of
Language Models", NeurIPS 2022 — ``../shared/papers/film-recovering-private-text-in-fl.txt``.

Pipeline (Sec. 4):

1. **Bag of words** (Sec. 4.2): the rows of the word-embedding gradient that the batch touched.
   With an untied embedding those are exactly the nonzero rows. GPT-2 ties input and output
   embeddings, so the output softmax puts gradient on *every* row; we separate the input-side
   signal with a threshold on row norms (``bag="auto"``: the largest log-gap in the sorted row
   norms; ``bag="norm"`` with an explicit relative threshold). Under DP noise the paper's test is
   used: a row is kept when its largest absolute entry exceeds ``tau = sigma * sqrt(2 ln d)`` with
   ``sigma`` the per-coordinate std of the noise on the *observed* update
   (``GradientObservation.noise_std``, i.e. ``noise_multiplier * C / B`` for DP-SGD's mean).
   Under pruning, nonzero rows. The maximum length comes from the nonzero position-embedding rows.
   Deviation from the released code: it took the bag from the true sentences; ours uses the gradient.
2. **Beam search** (Sec. 4.3, App. A): prompts are bag tokens that start a word with a capital
   letter; every step extends the k beams by bag tokens only (log-probs of the model gathered
   over the bag ids, KV cache reordered per step), minus ``rho`` times the count of repeated
   n-grams (n = 2), also against n-grams of earlier repetitions.
3. **Prior-guided reordering** (Sec. 4.4): phrase-wise (cut at p positions, permute the phrases)
   then token-wise (swap / delete / insert a bag token), ``steps`` each, keeping the candidate
   with the best ``perplexity + beta * gradient term``. The gradient term is the cosine distance
   between the candidate's input-embedding gradient (= its position-embedding gradient, computed
   for all candidates in one batched backward pass) and the observed position-embedding gradient
   (``grad_term="match"``), or the norm of that gradient as in Eq. 4 (``grad_term="norm"``).
4. **Multiple sentences** (Sec. 4.5): ``repetitions`` beam searches, each penalising the n-grams
   of the previous outputs.

Threat model: an honest-but-curious eavesdropper between one client and the server sees the
client's gradient and the current model (weights, vocabulary), at any round.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument, check_positive, check_range
from privnlp.core.observations import GradientObservation
from privnlp.core.protocols import Attack, AttackResult
from privnlp.core.registry import ATTACKS
from privnlp.core.rng import as_numpy

from ._common import best_match_rouge, find_param, hungarian_rouge, nerr, rouge_pair, set_prf

__all__ = ["BagOfWords", "recover_bag", "beam_search", "reorder", "FILM"]


@dataclass(frozen=True)
class BagOfWords:
    """Token ids the batch contains (no frequencies), the max sequence length, and the test used.

    Attributes:
        token_ids: the recovered token ids, sorted (no frequencies).
        max_length: the batch's maximum sequence length, from the position-embedding gradient rows (``None``
            when unavailable).
        method: the test that selected the rows: ``"nonzero"``, ``"norm"``, ``"norm-gap"``, ``"dp"``, or
            ``"absent"`` (no word-embedding gradient).
        threshold: what a row's statistic had to reach (its norm; its largest absolute entry for ``"dp"``).
    """

    token_ids: tuple[int, ...]
    max_length: int | None
    method: str
    threshold: float


def _np(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().to(torch.float64).cpu().numpy()
    return np.asarray(t, dtype=np.float64)


def embedding_names(model: Any, gradients: Any) -> tuple[str, str | None, bool]:
    """(word-embedding param name, position-embedding param name or None, tied?)."""
    wte = find_param(
        gradients,
        (
            "transformer.wte.weight",
            "wte.weight",
            "embeddings.word_embeddings.weight",
            "embed_tokens.weight",
        ),
    )
    if wte is None:
        raise InvalidArgument(
            "the observation has no word-embedding gradient (e.g. frozen embeddings): "
            "FILM's bag of words is empty"
        )
    wpe = find_param(
        gradients, ("transformer.wpe.weight", "wpe.weight", "embeddings.position_embeddings.weight")
    )
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    return wte, wpe, tied


def _gap_threshold(norms: np.ndarray, max_keep: int) -> float:
    """Cut at the largest log-gap among the top ``max_keep`` row norms."""
    pos = np.sort(norms[norms > 0])[::-1]
    if pos.size <= 1:
        return 0.0
    top = pos[: max(2, min(max_keep + 1, pos.size))]
    gaps = np.log(top[:-1]) - np.log(top[1:])
    j = int(np.argmax(gaps))
    return float(math.sqrt(top[j] * top[j + 1]))


def recover_bag(
    gradients: Any,
    model: Any = None,
    *,
    method: str = "auto",
    noise_std: float | None = None,
    threshold: float | None = None,
    max_bag: int = 2048,
    zero_tol: float = 0.0,
) -> BagOfWords:
    """Step 1 of FILM: the bag of token ids and the max length from the embedding gradients.

    Args:
        method: ``"auto"`` (nonzero rows if untied, log-gap on row norms if tied, DP test if
            ``noise_std``), ``"nonzero"``, ``"norm"`` (rows with norm > ``threshold`` (default 0.03) x the 3rd-largest row norm),
            ``"dp"`` (max |entry| > ``noise_std * sqrt(2 ln d)``).
        noise_std: per-coordinate std of Gaussian noise on the observed update (DP).
        max_bag: upper bound on the bag size considered by the log-gap rule.
    """
    if method not in ("auto", "nonzero", "norm", "dp"):
        raise InvalidArgument(f"method must be one of auto/nonzero/norm/dp; got {method!r}")
    if gradients is None or len(gradients) == 0:
        return BagOfWords((), None, method, 0.0)
    try:
        wte, wpe, tied = embedding_names(model, gradients)
    except InvalidArgument:
        return BagOfWords((), None, "absent", 0.0)
    G = _np(gradients[wte])
    d = G.shape[1]
    if method == "auto":
        method = "dp" if noise_std else ("norm-gap" if tied else "nonzero")
    if method == "dp":
        if not noise_std:
            raise InvalidArgument(
                "noise_std must be > 0 for the DP threshold tau = sigma*sqrt(2 ln d)"
            )
        tau = float(noise_std) * math.sqrt(2 * math.log(d))
        ids = np.nonzero(np.abs(G).max(axis=1) > tau)[0]
        thr = tau
    elif method == "nonzero":
        ids = np.nonzero(np.abs(G).max(axis=1) > zero_tol)[0]
        thr = zero_tol
    else:
        norms = np.linalg.norm(G, axis=1)
        if method == "norm":
            check_range("threshold", 0.03 if threshold is None else threshold, 0, 1)
            ref = float(np.sort(norms)[-3]) if norms.size >= 3 else float(norms.max(initial=0.0))
            thr = (0.03 if threshold is None else threshold) * ref
        else:
            thr = _gap_threshold(norms, max_bag)
            kept = norms >= thr
            below = norms[~kept]
            # a pronounced gap (b = 1) is trusted; otherwise fall back to a relative threshold
            if not (
                below.size
                and kept.any()
                and norms[kept].min() > 4.0 * below.max()
                and kept.sum() > 3
            ):
                ref = (
                    float(np.sort(norms)[-3]) if norms.size >= 3 else float(norms.max(initial=0.0))
                )
                thr = (0.03 if threshold is None else threshold) * ref
        ids = np.nonzero((norms >= thr) & (norms > 0))[0]
    max_len = None
    if wpe is not None and wpe in gradients:
        P = _np(gradients[wpe])
        if method == "dp":
            rows = np.nonzero(
                np.abs(P).max(axis=1) > float(noise_std) * math.sqrt(2 * math.log(P.shape[1]))
            )[0]
        else:
            rows = np.nonzero(np.abs(P).max(axis=1) > zero_tol)[0]
        max_len = int(rows.max()) + 1 if rows.size else None
    return BagOfWords(tuple(int(i) for i in ids), max_len, method, float(thr))


# --------------------------------------------------------------------------------------------- beam search


def _prompt_ids(tokenizer: Any, bag: Sequence[int]) -> list[int]:
    """Bag tokens that start a capitalised word (no leading space marker); fallbacks: any
    word-initial token without a leading space, then the whole bag."""
    caps, nospace = [], []
    for t in bag:
        s = tokenizer.convert_ids_to_tokens(int(t))
        if not s or s in (tokenizer.eos_token, tokenizer.pad_token):
            continue
        if s[0] in ("Ġ", "▁", " ", "Ċ"):
            continue
        nospace.append(int(t))
        if s[0].isupper():
            caps.append(int(t))
    return (caps + [t for t in nospace if t not in caps]) or [int(t) for t in bag]


def _ngrams(seq: Sequence[int], n: int) -> dict[tuple[int, ...], int]:
    out: dict[tuple[int, ...], int] = {}
    for i in range(len(seq) - n + 1):
        k = tuple(seq[i : i + n])
        out[k] = out.get(k, 0) + 1
    return out


def _cache_keyword(model: Any) -> str:
    """The name of the KV-cache argument/output: ``cache`` in transformers 5.x (where ``past_key_values``
    is deprecated and warns on every call), ``past_key_values`` before."""

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - exotic callables
        return "past_key_values"
    return "cache" if "cache" in params and "past_key_values" not in params else "past_key_values"


def beam_search(
    model: Any,
    tokenizer: Any,
    bag: Sequence[int],
    *,
    max_length: int,
    beam_size: int = 32,
    ngram: int = 2,
    rho: float = 2.0,
    previous: Sequence[Sequence[int]] = (),
    rho_previous: float = 2.0,
    use_cache: bool = True,
    min_length: int = 1,
) -> list[int]:
    """Beam search over the bag (App. A, Algorithm 1). Returns the best token sequence.

    Scores: sum of the model's log-probabilities (full-vocabulary softmax, gathered at the bag ids)
    minus ``rho`` per repeated n-gram inside the beam and ``rho_previous`` per n-gram already
    produced by an earlier repetition. A beam that emits eos is finished (not before ``min_length``
    tokens: with b = 1 the position-embedding rows give the exact length); the winner maximises the
    length-normalised score.

    Args:
        model: the causal LM the client trained (the attacker has its weights).
        tokenizer: its tokenizer (needs ``eos_token_id``).
        bag: the recovered bag of words (token ids).
        max_length: the longest sequence in tokens, an integer in [1, 100000].
        beam_size: beam width, an integer in [1, 4096].
        ngram: the n of the repeated-n-gram penalty, an integer in [1, 16].
        rho: the penalty per repeated n-gram inside a beam.
        previous: sequences produced earlier; their n-grams are penalised by ``rho_previous``.
        rho_previous: the penalty per n-gram already produced.
        use_cache: reuse the model's key/value cache between steps.
        min_length: eos is not accepted before this many tokens.

    Returns:
        The best token sequence (empty for an empty bag).

    Raises:
        InvalidArgument: an argument out of range.
    """

    check_range("beam_size", beam_size, 1, 4096, integer=True)
    check_range("max_length", max_length, 1, 100000, integer=True)
    check_range("ngram", ngram, 1, 16, integer=True)
    bag = sorted({int(t) for t in bag})
    if not bag:
        return []
    eos = tokenizer.eos_token_id
    bag_t = torch.tensor(bag, dtype=torch.long)
    prev_counts: dict[tuple[int, ...], int] = {}
    for p in previous:
        for k, v in _ngrams(list(p), ngram).items():
            prev_counts[k] = prev_counts.get(k, 0) + v
    prompts = _prompt_ids(tokenizer, bag)
    seqs = [[p] for p in prompts]
    scores = torch.zeros(len(seqs), dtype=torch.float64)
    finished: list[tuple[float, list[int]]] = []
    model.eval()
    past = None
    cache_kw = _cache_keyword(model)
    pos_in_bag = {t: i for i, t in enumerate(bag)}
    with torch.no_grad():
        next_input = torch.tensor([[s[-1]] for s in seqs], dtype=torch.long)
        for step in range(1, max_length):
            if use_cache:
                out = model(input_ids=next_input, **{cache_kw: past}, use_cache=True)
                past = getattr(out, cache_kw)
                logits = out.logits[:, -1, :]
            else:
                logits = model(input_ids=torch.tensor(seqs, dtype=torch.long)).logits[:, -1, :]
            logp = torch.log_softmax(logits.double(), dim=-1).index_select(
                1, bag_t
            )  # (beams, |bag|)
            if eos is not None and eos in pos_in_bag and step + 1 < min_length:
                logp[:, pos_in_bag[eos]] = -math.inf
            if ngram > 1 and (rho > 0 or rho_previous > 0):
                pen = torch.zeros_like(logp)
                for b, s in enumerate(seqs):
                    if len(s) < ngram - 1:
                        continue
                    prefix = tuple(s[len(s) - (ngram - 1) :])
                    counts = _ngrams(s, ngram)
                    for key, c in counts.items():
                        if key[:-1] == prefix and key[-1] in pos_in_bag:
                            pen[b, pos_in_bag[key[-1]]] += rho * c
                    if prev_counts:
                        for key, c in prev_counts.items():
                            if key[:-1] == prefix and key[-1] in pos_in_bag:
                                pen[b, pos_in_bag[key[-1]]] += rho_previous * c
                logp = logp - pen
            cand = scores[:, None] + logp
            flat = cand.flatten()
            k = min(beam_size, flat.numel())
            top = torch.topk(flat, k)
            beam_idx = (top.indices // len(bag)).tolist()
            tok_idx = (top.indices % len(bag)).tolist()
            new_seqs, new_scores, keep = [], [], []
            for sc, bi, ti in zip(top.values.tolist(), beam_idx, tok_idx):
                tok = bag[ti]
                s = seqs[bi] + [tok]
                if eos is not None and tok == eos:
                    finished.append((sc / len(s), s))
                    continue
                new_seqs.append(s)
                new_scores.append(sc)
                keep.append(bi)
            if not new_seqs:
                seqs = []
                break
            seqs = new_seqs
            scores = torch.tensor(new_scores, dtype=torch.float64)
            if use_cache:
                idx = torch.tensor(keep, dtype=torch.long)
                if hasattr(past, "reorder_cache"):
                    past.reorder_cache(idx)
                else:  # legacy tuple cache
                    past = tuple(tuple(t.index_select(0, idx) for t in layer) for layer in past)
                next_input = torch.tensor([[s[-1]] for s in seqs], dtype=torch.long)
    for sc, s in zip(scores.tolist(), seqs):
        finished.append((sc / len(s), s))
    finished.sort(key=lambda x: -x[0])
    return finished[0][1] if finished else []


# --------------------------------------------------------------------------------------------- reordering


class _Scorer:
    """perplexity + beta * gradient term, batched over candidates of possibly different lengths."""

    def __init__(self, model: Any, pos_grad: Any, beta: float, grad_term: str, pad_id: int) -> None:
        self.model = model
        self.pos_grad = pos_grad  # (P, d) float tensor or None
        self.beta = beta
        self.grad_term = grad_term
        self.pad_id = pad_id

    def __call__(self, cands: Sequence[Sequence[int]]) -> np.ndarray:
        lens = [len(c) for c in cands]
        T = max(lens)
        ids = torch.full((len(cands), T), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(cands), T), dtype=torch.long)
        for i, c in enumerate(cands):
            ids[i, : len(c)] = torch.tensor(list(c), dtype=torch.long)
            mask[i, : len(c)] = 1
        emb = self.model.get_input_embeddings()
        need_grad = self.beta > 0 and self.pos_grad is not None
        with torch.enable_grad() if need_grad else torch.no_grad():
            x = emb(ids).detach()
            if need_grad:
                x.requires_grad_(True)
            logits = self.model(inputs_embeds=x, attention_mask=mask).logits
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            tgt = ids[:, 1:]
            nll = -logp.gather(-1, tgt[..., None])[..., 0] * mask[:, 1:]
            per_seq = nll.sum(1)
            denom = mask[:, 1:].sum(1).clamp(min=1)
            ppl = torch.exp(per_seq / denom).detach().double().numpy()
            if not need_grad:
                return ppl
            (gx,) = torch.autograd.grad(per_seq.sum(), x)
        out = ppl.copy()
        P = self.pos_grad
        for i, n in enumerate(lens):
            g = gx[i, :n].double()
            if self.grad_term == "norm":
                out[i] += self.beta * float(g.norm())
            else:
                m = min(n, P.shape[0])
                ref = torch.zeros_like(g)
                ref[:m] = P[:m]
                cos = float((g * ref).sum() / (g.norm() * ref.norm() + 1e-30))
                out[i] += self.beta * (1.0 - cos)
        return out


def _punct_cut(tokenizer: Any, seq: list[int]) -> list[int] | None:
    for i, t in enumerate(seq[:-1]):
        s = tokenizer.convert_ids_to_tokens(int(t)) or ""
        if s.strip("Ġ") in (".", "!", "?"):
            return seq[: i + 1] + ([seq[-1]] if seq[-1] == tokenizer.eos_token_id else [])
    return None


def reorder(
    seq: Sequence[int],
    scorer: Any,
    bag: Sequence[int],
    *,
    steps: int = 200,
    n_candidates: int = 8,
    rng: np.random.Generator,
    tokenizer: Any = None,
    max_phrases: int = 4,
    punct_cut: bool = False,
    patience: int | None = 50,
) -> list[int]:
    """Prior-guided reordering (Sec. 4.4): phrase-wise then token-wise hill climbing on ``scorer``
    (``steps`` per stage; a stage stops early after ``patience`` steps without improvement).

    Args:
        seq: the token sequence to reorder.
        scorer: ``list of sequences -> scores`` (lower = better, e.g. the model's loss).
        bag: the recovered bag of words.
        steps: hill-climbing steps per stage (<= 0 = no reordering).
        n_candidates: candidate moves scored per step.
        rng: the move randomness (keyword-only).
        tokenizer: the tokenizer (eos handling and the sentence-end cut).
        max_phrases: the most phrases a phrase-wise move splits the sequence into.
        punct_cut: try dropping what follows the first sentence end (footnote 7).
        patience: stop a stage after this many steps without improvement (``None`` = never).

    Returns:
        The reordered sequence (unchanged when shorter than 3 tokens).
    """
    seq = list(seq)
    if len(seq) < 3 or steps <= 0:
        return seq
    eos = getattr(tokenizer, "eos_token_id", None)
    body_end = len(seq) - 1 if (eos is not None and seq[-1] == eos) else len(seq)
    cur = seq
    cur_score = float(scorer([cur])[0])
    if (
        tokenizer is not None and punct_cut
    ):  # footnote 7: drop what follows the first sentence end if it scores better
        cut = _punct_cut(tokenizer, cur)
        if cut is not None and len(cut) >= 2:
            s = float(scorer([cut])[0])
            if s < cur_score:
                cur, cur_score = cut, s
    # phrase-wise
    stale = 0
    for _ in range(steps):
        if patience is not None and stale >= patience:
            break
        body_end = len(cur) - 1 if (eos is not None and cur[-1] == eos) else len(cur)
        if body_end < 3:
            break
        cands = []
        for _ in range(n_candidates):
            p = int(rng.integers(1, min(max_phrases, body_end - 1) + 1))
            cuts = sorted(rng.choice(np.arange(1, body_end), size=p, replace=False).tolist())
            parts = [cur[a:b] for a, b in zip([0] + cuts, cuts + [body_end])]
            perm = rng.permutation(len(parts))
            if (perm == np.arange(len(parts))).all():
                perm = np.roll(perm, 1)
            cands.append([t for j in perm for t in parts[j]] + cur[body_end:])
        sc = scorer(cands)
        j = int(np.argmin(sc))
        stale += 1
        if sc[j] < cur_score:
            cur, cur_score, stale = cands[j], float(sc[j]), 0
    # token-wise
    bag = list(bag)
    stale = 0
    for _ in range(steps):
        if patience is not None and stale >= patience:
            break
        body_end = len(cur) - 1 if (eos is not None and cur[-1] == eos) else len(cur)
        if body_end < 2:
            break
        cands = []
        for _ in range(n_candidates):
            op = int(rng.integers(0, 3))
            c = list(cur)
            if op == 0:
                i, k = rng.choice(body_end, size=2, replace=False)
                c[i], c[k] = c[k], c[i]
            elif op == 1 and body_end > 2:
                del c[int(rng.integers(0, body_end))]
            else:
                c.insert(
                    int(rng.integers(1, body_end + 1)), int(bag[int(rng.integers(0, len(bag)))])
                )
            cands.append(c)
        sc = scorer(cands)
        j = int(np.argmin(sc))
        stale += 1
        if sc[j] < cur_score:
            cur, cur_score, stale = cands[j], float(sc[j]), 0
    return cur


# --------------------------------------------------------------------------------------------- attack


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    eos = tokenizer.eos_token_id
    ids = [int(t) for t in ids if t != eos]
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


def _score(result: AttackResult, gt: Any) -> dict[str, float]:
    """Ground truth: ``{"texts": [...], "token_ids": [...] (union over the batch), "entities": [[...]]}``
    or a plain list of texts."""
    if isinstance(gt, dict):
        refs = list(gt.get("texts", ()))
        gold_ids = gt.get("token_ids")
        ents = gt.get("entities")
    else:
        refs, gold_ids, ents = list(gt), None, None
    hyps = [h for h in result.reconstructions if isinstance(h, str)]
    best = best_match_rouge(refs, hyps) if hyps else {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    out = dict(best)
    hung = hungarian_rouge(refs, hyps)
    out.update({f"{k}_hungarian": v for k, v in hung.items()})
    e = nerr(refs, hyps, ents)
    if e is not None:
        out["nerr"] = e
    if gold_ids is not None:
        prf = set_prf(result.raw.get("bag", ()), set(int(t) for t in gold_ids))
        out["bag_precision"], out["bag_recall"] = prf["precision"], prf["recall"]
    # Table 3: recall = share of references with ROUGE-L > 0.25 against some output, precision = share of outputs
    if refs and hyps:
        m = np.array([[rouge_pair(r, h)["rougeL"] for h in hyps] for r in refs])
        out["multi_recall"] = float((m.max(axis=1) > 0.25).mean())
        out["multi_precision"] = float((m.max(axis=0) > 0.25).mean())
    return out


@ATTACKS.register("film")
class FILM(Attack):
    """FILM (bag of words -> beam search -> prior-guided reordering; repetitions for several sentences).

    Implements Gupta et al. 2022, Sec. 4.2 (bag of words from the word-embedding gradient), Sec. 4.3 and
    App. A (beam search), Sec. 4.4 (prior-guided reordering, Eq. 4) and Sec. 4.5 (several sentences). The
    adversary is an eavesdropper that sees one client's gradient of a causal LM (GPT-2 style) and the
    current model. Headline metric: ``rougeL`` (best match over the batch, the paper's Fig. 3; higher =
    more leakage); the scorer also reports ROUGE-1/2, Hungarian-matched ROUGE-L, NERR and bag P/R.

    Args:
        beam_size: beams kept per step, in [1, 4096] (paper: 32).
        ngram: length of the repeated n-grams that are penalised, in [1, 16] (paper: 2).
        rho: penalty (log-probability units) per repeated n-gram inside a beam, >= 0.
        rho_previous: penalty per n-gram already produced by an earlier repetition, >= 0.
        max_length: cap on the recovered length in tokens (> 0); ``None``: from the nonzero
            position-embedding rows of the gradient, else 40.
        reorder_steps: steps of each reordering stage (phrase-wise, then token-wise), in [0, 10**6]
            (paper: 200; 0 skips reordering).
        n_candidates: candidates scored per reordering step, in [1, 4096].
        beta: weight of the gradient term against perplexity, >= 0 (paper: 1).
        grad_term: ``"match"`` (cosine distance to the observed position-embedding gradient) or ``"norm"``
            (the norm of the candidate's gradient, Eq. 4).
        repetitions: sentences to recover, in [1, 10**4] (beam searches penalising earlier outputs).
        bag_method: how the bag of words is read from the gradient, see :func:`recover_bag`.
        bag_threshold: relative row-norm threshold for ``bag_method="norm"``.

    Raises:
        InvalidArgument: an argument outside its range or an unknown ``grad_term``.
    """

    paper = (
        "Gupta et al., Recovering Private Text in Federated Learning of Language Models, NeurIPS 2022 "
        "(shared/papers/film-recovering-private-text-in-fl.txt)"
    )
    observation_type = GradientObservation
    threat_model = ThreatModel(
        adversary=Adversary.EAVESDROPPER,
        observes=("client gradient (all parameters)", "current model weights"),
        knows=("vocabulary", "embedding matrix"),
        goal="the client's private sentences",
    )
    headline_metric = "rougeL"

    def __init__(
        self,
        beam_size: int = 32,
        ngram: int = 2,
        rho: float = 2.0,
        rho_previous: float = 2.0,
        max_length: int | None = None,
        reorder_steps: int = 200,
        n_candidates: int = 8,
        beta: float = 1.0,
        grad_term: str = "match",
        repetitions: int = 1,
        bag_method: str = "auto",
        bag_threshold: float | None = None,
    ) -> None:
        check_range("beam_size", beam_size, 1, 4096, integer=True)
        check_range("ngram", ngram, 1, 16, integer=True)
        check_range("rho", rho, 0, float("inf"))
        check_range("reorder_steps", reorder_steps, 0, 10**6, integer=True)
        check_range("n_candidates", n_candidates, 1, 4096, integer=True)
        check_range("beta", beta, 0, float("inf"))
        check_range("repetitions", repetitions, 1, 10**4, integer=True)
        if grad_term not in ("match", "norm"):
            raise InvalidArgument(f"grad_term must be 'match' or 'norm'; got {grad_term!r}")
        if max_length is not None:
            check_positive("max_length", max_length)
        self.beam_size = beam_size
        self.ngram = ngram
        self.rho = rho
        self.rho_previous = rho_previous
        self.max_length = max_length
        self.reorder_steps = reorder_steps
        self.n_candidates = n_candidates
        self.beta = beta
        self.grad_term = grad_term
        self.repetitions = repetitions
        self.bag_method = bag_method
        self.bag_threshold = bag_threshold

    def applies_to(self, observation: Any) -> bool:
        """Causal LMs (GPT-2 style): the observation's model has an output embedding and no labels field."""
        if not isinstance(observation, GradientObservation) or observation.tokenizer is None:
            return False
        task = observation.meta.get("task")
        if task is not None:
            return task == "lm"
        return getattr(getattr(observation.model, "config", None), "is_decoder", False) or hasattr(
            observation.model, "lm_head"
        )

    @classmethod
    def example(cls, preset: str = "quick") -> FILM:
        if preset == "quick":
            return cls(beam_size=8, reorder_steps=20)
        return cls()

    def run(self, observation: GradientObservation, *, rng: Any) -> AttackResult:
        if not isinstance(observation, GradientObservation):
            raise InvalidArgument(
                f"observation must be a GradientObservation; got {type(observation).__name__}"
            )
        if observation.tokenizer is None:
            raise InvalidArgument(
                "FILM needs the victim's tokenizer in the observation (tokenizer=...)"
            )
        gen = as_numpy(rng)
        model, tok = observation.model, observation.tokenizer
        bag = recover_bag(
            observation.gradients,
            model,
            method=self.bag_method,
            noise_std=observation.noise_std,
            threshold=self.bag_threshold,
        )
        raw: dict[str, Any] = {
            "bag": list(bag.token_ids),
            "bag_method": bag.method,
            "bag_threshold": bag.threshold,
            "max_length": bag.max_length,
        }
        if not bag.token_ids:
            return AttackResult(
                attack=self.name or "film", reconstructions=(), raw=raw, scorer=_score
            )
        L = self.max_length or bag.max_length or 40
        n_pos = getattr(getattr(model, "config", None), "n_positions", None)
        if n_pos:
            L = min(int(L), int(n_pos))
        _, wpe, _ = embedding_names(model, observation.gradients)
        pos_grad = None
        if wpe is not None and self.beta > 0:
            pos_grad = torch.as_tensor(_np(observation.gradients[wpe]))
        pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        scorer = _Scorer(model, pos_grad, self.beta, self.grad_term, pad)
        outs: list[list[int]] = []
        for _ in range(self.repetitions):
            exact = (
                observation.batch_size == 1
                and self.max_length is None
                and bag.max_length is not None
            )
            seq = beam_search(
                model,
                tok,
                bag.token_ids,
                max_length=int(L),
                beam_size=self.beam_size,
                ngram=self.ngram,
                rho=self.rho,
                previous=outs,
                rho_previous=self.rho_previous,
                min_length=int(L) if exact else 1,
            )
            outs.append(seq)
        final = [
            reorder(
                s,
                scorer,
                bag.token_ids,
                steps=self.reorder_steps,
                n_candidates=self.n_candidates,
                rng=gen,
                tokenizer=tok,
            )
            for s in outs
        ]
        raw["beam_outputs"] = [_decode(tok, s) for s in outs]
        texts = tuple(_decode(tok, s) for s in final)
        return AttackResult(
            attack=self.name or "film", reconstructions=texts, raw=raw, scorer=_score
        )
