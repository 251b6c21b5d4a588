"""Batched log-probability queries on causal and masked LMs (the black-box interface of the
secret sharer, ``../shared/papers/unintended-memorization-under-fl.txt`` App. A.1: the adversary
sees output probabilities only).

* :func:`causal_log_probs` — total and per-token natural-log probability of each text under a causal
  LM (texts sorted by length and batched; the first token is conditioned on nothing and is not
  scored, exactly as in training where texts carry no bos token).
* :func:`prefix_log_probs` — probability that a causal LM's text *starts with* a string, summed over every
  tokenization of it (a partial secret "4" of a BPE that merged the whole secret "4821" into one token is
  scored by the tokens that start with it, not by the rare token "4"): what a symbol-by-symbol search needs.
* :func:`masked_pll` — pseudo-log-likelihood of the tokens of a marked span (masked LMs, the
  HS / HSH / HHSHH secrets of ``../shared/papers/dp-bert-and-dp-wordpiece.txt``).

All functions run under ``torch.inference_mode`` and leave the model in its previous mode.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privnlp.core.errors import InvalidArgument, check_range
from privnlp.models.training import lm_batch_from_ids

__all__ = [
    "TextScores",
    "causal_log_probs",
    "prefix_log_probs",
    "log_perplexity_bits",
    "exposure_rates",
    "masked_pll",
]

LN2 = float(np.log(2.0))


@dataclass(frozen=True)
class TextScores:
    """``total[i]`` = sum of natural-log token probabilities of text ``i``; ``n_tokens[i]`` = scored tokens.

    Attributes:
        total: per text, the sum of natural-log token probabilities (<= 0).
        n_tokens: per text, the number of scored tokens.
    """

    total: np.ndarray
    n_tokens: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        """Mean log-probability per scored token (the record paper's exposure rate, Eq. 5)."""
        return self.total / np.maximum(self.n_tokens, 1)


@contextlib.contextmanager
def _eval(model: Any) -> Iterator[None]:
    was = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was)


def _pad_id(tokenizer: Any) -> int:
    if getattr(tokenizer, "pad_token_id", None) is not None:
        return int(tokenizer.pad_token_id)
    return int(getattr(tokenizer, "eos_token_id", 0) or 0)


def _padded(rows: Sequence[Sequence[int]], pad: int, min_len: int = 1) -> tuple:
    """Right-padded ``(input_ids, attention_mask, position_ids)`` of token rows."""

    b = lm_batch_from_ids(rows, pad, min_length=min_len)
    return b.input_ids, b.attention_mask, b.position_ids


def causal_log_probs(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    batch_size: int = 256,
    max_length: int | None = None,
) -> TextScores:
    """Log-probability of every text under a causal LM (Eq. 2 of the record paper), batched.

    ``texts`` are tokenized without special tokens; token ``t >= 1`` is scored given tokens ``< t``.

    Args:
        model: a causal LM (Hugging Face style: ``model(input_ids, attention_mask, position_ids).logits``).
        tokenizer: its tokenizer.
        texts: the texts (a sequence, not a single string).
        batch_size: texts per forward pass, an integer in [1, 10**6].
        max_length: truncation length in tokens (default: the model's ``n_positions``, else 1024).

    Returns:
        Per-text totals and token counts (in the order of ``texts``).

    Raises:
        InvalidArgument: ``texts`` is a single string, or ``batch_size`` out of range.
    """
    if isinstance(texts, str):
        raise InvalidArgument("texts must be a sequence of strings, not a single string")
    check_range("batch_size", batch_size, 1, 10**6, integer=True)
    texts = list(texts)
    n = len(texts)
    total = np.zeros(n, dtype=np.float64)
    count = np.zeros(n, dtype=np.int64)
    if n == 0:
        return TextScores(total, count)
    limit = max_length or getattr(getattr(model, "config", None), "n_positions", None) or 1024
    ids = tokenizer(texts, add_special_tokens=False, truncation=True, max_length=int(limit))[
        "input_ids"
    ]
    order = np.argsort([len(r) for r in ids], kind="stable")
    pad = _pad_id(tokenizer)
    with _eval(model):
        for s in range(0, n, batch_size):
            idx = order[s : s + batch_size]
            rows = [ids[i] for i in idx]
            x, mask, pos = _padded(rows, pad, min_len=2)
            logits = model(input_ids=x, attention_mask=mask, position_ids=pos).logits.float()
            lp = torch.log_softmax(logits[:, :-1, :], dim=-1)
            tok = lp.gather(-1, x[:, 1:].unsqueeze(-1)).squeeze(-1)
            valid = mask[:, 1:].bool()
            tok = tok.masked_fill(~valid, 0.0)
            total[idx] = tok.sum(1).double().numpy()
            count[idx] = valid.sum(1).numpy()
    return TextScores(total, count)


_TOKEN_STRINGS: dict[int, tuple[Any, list[str]]] = {}


def token_strings(tokenizer: Any) -> list[str] | None:
    """The surface string of every vocabulary id (``decode([i])``), or ``None`` when single-token decodes do not
    concatenate back to the text (a tokenizer that inserts spaces between tokens, e.g. word-level or WordPiece)."""
    key = id(tokenizer)
    if key in _TOKEN_STRINGS and _TOKEN_STRINGS[key][0] is tokenizer:
        return _TOKEN_STRINGS[key][1]
    strs = [tokenizer.decode([i]) for i in range(len(tokenizer))]
    probe = "my pin code is 4821, call 555-0199 at 10:30 now."
    ids = tokenizer(probe, add_special_tokens=False)["input_ids"]
    ok = "".join(strs[i] for i in ids) == probe
    _TOKEN_STRINGS[key] = (tokenizer, strs if ok else None)
    return strs if ok else None


def _next_log_probs(
    model: Any, contexts: Sequence[tuple[int, ...]], pad: int, batch_size: int
) -> dict:
    """``{context: log-softmax of the next token}`` for non-empty token contexts, batched."""
    out: dict[tuple[int, ...], torch.Tensor] = {}
    ctx = sorted(set(contexts), key=len)
    for s in range(0, len(ctx), batch_size):
        rows = ctx[s : s + batch_size]
        x, mask, pos = _padded(rows, pad)
        logits = model(input_ids=x, attention_mask=mask, position_ids=pos).logits.float()
        last = torch.tensor([len(r) - 1 for r in rows])
        lp = torch.log_softmax(logits[torch.arange(len(rows)), last], dim=-1)
        for j, r in enumerate(rows):
            out[r] = lp[j]
    return out


def prefix_log_probs(
    model: Any, tokenizer: Any, context: str, continuations: Sequence[str], *, batch_size: int = 256
) -> np.ndarray:
    """``log P(the text after `context` starts with c)`` for each ``c``, summed over tokenizations (nats).

    ``P(c) = sum_{v: s(v) starts with c} p(v) + sum_{v: s(v) a proper prefix of c} p(v) P(c[len s(v):] | v)``,
    ``s(v)`` the token's surface string: a partial secret is scored by every token path that can produce it
    (BPE merges of the secret included), not by its own canonical tokenization, which a merged secret makes
    rare. Exact for tokenizers whose single-token decodes concatenate back to the text (byte-level BPE);
    otherwise (:func:`token_strings` is ``None``) the canonical tokenization of ``context + c`` is scored.

    Args:
        model: a causal LM.
        tokenizer: its tokenizer.
        context: the known text before the continuation (tokenized canonically; must be non-empty).
        continuations: the strings whose prefix probability is wanted.
        batch_size: contexts per forward pass, an integer in [1, 10**6].

    Returns:
        One natural-log probability per continuation (the context's own probability not included).

    Raises:
        InvalidArgument: an empty ``context`` or ``batch_size`` out of range.
    """
    check_range("batch_size", batch_size, 1, 10**6, integer=True)
    if not context:
        raise InvalidArgument("context must be a non-empty string (the first token is not scored)")
    conts = list(continuations)
    strs = token_strings(tokenizer)
    if strs is None:
        base = float(causal_log_probs(model, tokenizer, [context]).total[0])
        return (
            causal_log_probs(
                model, tokenizer, [context + c for c in conts], batch_size=batch_size
            ).total
            - base
        )
    anchor = tuple(tokenizer(context, add_special_tokens=False)["input_ids"])
    by_first: dict[str, list[int]] = {}
    for i, st in enumerate(strs):
        if st:
            by_first.setdefault(st[0], []).append(i)
    pad = _pad_id(tokenizer)
    memo: dict[tuple[tuple[int, ...], str], float] = {}
    # expand the search tree level by level: each node (token context, remaining string) needs the context's
    # next-token distribution; all contexts of a level go through the model in one batched call
    level = {(anchor, c) for c in conts if c}
    tree: dict[
        tuple[tuple[int, ...], str], tuple[list[int], list[tuple[int, tuple[tuple[int, ...], str]]]]
    ] = {}
    with _eval(model):
        while level:
            lps = _next_log_probs(model, [ctx for ctx, _ in level], pad, batch_size)
            nxt = set()
            for ctx, rem in level:
                ends, steps = [], []
                for v in by_first.get(rem[0], ()):
                    st = strs[v]
                    if st.startswith(rem):
                        ends.append(v)
                    elif rem.startswith(st):
                        child = (ctx + (v,), rem[len(st) :])
                        steps.append((v, child))
                        if child not in tree:
                            nxt.add(child)
                tree[(ctx, rem)] = (ends, steps)
                memo[(ctx, rem)] = lps[ctx]  # type: ignore[assignment]
            level = {n for n in nxt if n not in tree}

    vals: dict[tuple[tuple[int, ...], str], float] = {}

    def value(node: tuple[tuple[int, ...], str]) -> float:
        if node in vals:
            return vals[node]
        ends, steps = tree[node]
        lp = memo[node]
        terms = [float(torch.logsumexp(lp[ends], 0))] if ends else []
        terms += [float(lp[v]) + value(child) for v, child in steps]
        vals[node] = float(np.logaddexp.reduce(terms)) if terms else float("-inf")
        return vals[node]

    return np.array([value((anchor, c)) if c else 0.0 for c in conts], dtype=np.float64)


def log_perplexity_bits(
    model: Any, tokenizer: Any, texts: Sequence[str], *, batch_size: int = 256
) -> np.ndarray:
    """Carlini et al.'s log-perplexity ``-log2 Pr(text)`` (bits; lower = more likely).

    Args:
        model: a causal LM.
        tokenizer: its tokenizer.
        texts: the texts.
        batch_size: texts per forward pass, an integer in [1, 10**6].

    Returns:
        One log-perplexity per text, in bits.
    """
    return -causal_log_probs(model, tokenizer, texts, batch_size=batch_size).total / LN2


def exposure_rates(
    model: Any, tokenizer: Any, texts: Sequence[str], *, batch_size: int = 256
) -> np.ndarray:
    """Exposure rate of each text: mean token log-probability (record paper, Definition 2).

    Args:
        model: a causal LM.
        tokenizer: its tokenizer.
        texts: the texts.
        batch_size: texts per forward pass, an integer in [1, 10**6].

    Returns:
        One mean natural-log probability per scored token, per text.
    """
    return causal_log_probs(model, tokenizer, texts, batch_size=batch_size).mean


def masked_pll(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    spans: Sequence[tuple[int, int]],
    *,
    batch_size: int = 256,
) -> np.ndarray:
    """Pseudo-log-likelihood (natural log) of the characters ``text[start:end]`` under a masked LM.

    Each token overlapping the span is masked on its own and its log-probability read at the
    masked position; the span's score is the sum over its tokens (Salazar et al.'s PLL). Used to
    rank a secret word S among candidates in HS / HSH / HHSHH sentences.

    Args:
        model: a masked LM (``model(input_ids, attention_mask).logits``).
        tokenizer: its tokenizer, with a mask token and offset mappings (a fast tokenizer).
        texts: the texts.
        spans: one ``(start, end)`` character span per text.
        batch_size: masked queries per forward pass.

    Returns:
        One pseudo-log-likelihood per text.

    Raises:
        InvalidArgument: ``spans`` of another length, a tokenizer without ``[MASK]``, or a span covering no token.
    """
    if len(texts) != len(spans):
        raise InvalidArgument(
            f"spans must have one (start, end) per text ({len(texts)}); got {len(spans)}"
        )
    mask_id = getattr(tokenizer, "mask_token_id", None)
    if mask_id is None:
        raise InvalidArgument("masked_pll needs a tokenizer with a [MASK] token")
    enc = tokenizer(list(texts), return_offsets_mapping=True, truncation=True)
    queries: list[tuple[int, int, int]] = []  # (text index, position, true token)
    for i, (offs, (a, b)) in enumerate(zip(enc["offset_mapping"], spans)):
        hit = [p for p, (s, e) in enumerate(offs) if e > s and s < b and e > a]
        if not hit:
            raise InvalidArgument(f"spans[{i}]={a, b} covers no token of texts[{i}]")
        queries.extend((i, p, enc["input_ids"][i][p]) for p in hit)
    out = np.zeros(len(texts), dtype=np.float64)
    pad = _pad_id(tokenizer)
    with _eval(model):
        for s in range(0, len(queries), batch_size):
            chunk = queries[s : s + batch_size]
            rows = [list(enc["input_ids"][i]) for i, _, _ in chunk]
            t = max(len(r) for r in rows)
            x = torch.full((len(rows), t), pad, dtype=torch.long)
            m = torch.zeros((len(rows), t), dtype=torch.long)
            for j, ((_, p, _), r) in enumerate(zip(chunk, rows)):
                r[p] = int(mask_id)
                x[j, : len(r)] = torch.as_tensor(r)
                m[j, : len(r)] = 1
            logits = model(input_ids=x, attention_mask=m).logits.float()
            lp = torch.log_softmax(logits, dim=-1)
            for j, (i, p, true) in enumerate(chunk):
                out[i] += float(lp[j, p, true])
    return out
