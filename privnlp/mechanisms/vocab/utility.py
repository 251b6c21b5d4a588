"""Utility of a (DP) WordPiece tokenizer on held-out text: fertility, unknown rate, overlap.

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (Section 3.2 DP vocabulary).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["tokenizer_utility"]


def tokenizer_utility(
    tokenizer: Any, texts: Sequence[str], reference: Any | None = None
) -> dict[str, float]:
    """``fertility`` (WordPieces per word), ``unk_rate`` (fraction of words mapped to ``[UNK]``),
    and, with a ``reference`` tokenizer (the non-private one), ``vocab_overlap`` = |V ∩ V_ref| / |V_ref|.
    Works on ``tokenizers.Tokenizer`` objects.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` with an ``[UNK]`` token.
        texts: held-out texts.
        reference: the reference ``tokenizers.Tokenizer`` for ``vocab_overlap`` (optional).

    Returns:
        ``fertility``, ``unk_rate`` and, with ``reference``, ``vocab_overlap`` (in [0, 1]).
    """
    pieces = words = unk = 0
    unk_id = tokenizer.token_to_id("[UNK]")
    for enc in tokenizer.encode_batch(list(texts), add_special_tokens=False):
        wid = enc.word_ids
        pieces += sum(enc.attention_mask)  # [PAD] of a batch (tokenizer.json pads) not counted
        seen = {}
        for i, w in zip(enc.ids, wid):
            if w is None:
                continue
            seen.setdefault(w, False)
            if i == unk_id:
                seen[w] = True
        words += len(seen)
        unk += sum(seen.values())
    out = {"fertility": pieces / max(words, 1), "unk_rate": unk / max(words, 1)}
    if reference is not None:
        v, r = set(tokenizer.get_vocab()), set(reference.get_vocab())
        out["vocab_overlap"] = len(v & r) / max(len(r), 1)
    return out
