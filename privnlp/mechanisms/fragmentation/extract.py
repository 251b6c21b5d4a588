"""Phrase-pair extraction consistent with a word alignment (Koehn et al. 2003; Koehn 2009, Fig. 5.5).

Paper: ``../shared/papers/phrase-pair-fragmentation-nmt.txt`` (Sec. 3.1 and 4: Moses phrase
extraction, maximum source phrase length 4 or 7; phrase *occurrences*, not types).

A phrase pair (source span ``[s0, s1)``, target span ``[t0, t1)``) is consistent with the
alignment A iff (1) it contains at least one alignment point, (2) no source word inside is
aligned to a target word outside and (3) no target word inside is aligned to a source word
outside. Unaligned words at the boundaries extend phrases (every target span is enumerated;
source spans are grown over unaligned neighbours as in Moses ``extract``). Written by hand:
Moses' ``extract`` is a C++ binary not on PyPI, and the loop is 40 lines.

Occurrences are returned as an ``int32`` array of rows ``(sentence, s0, s1, t0, t1)``
(end-exclusive), sorted by sentence then by position.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from tqdm import tqdm

from privnlp.core.errors import InvalidArgument, check_range

__all__ = ["extract_sentence", "extract_phrases", "check_lengths"]


def check_lengths(
    max_length: int, max_target_length: int | None, min_length: int
) -> tuple[int, int, int]:
    check_range("max_length", max_length, 1, integer=True)
    if max_target_length is not None:
        check_range("max_target_length", max_target_length, 1, integer=True)
    check_range("min_length", min_length, 1, integer=True)
    if int(min_length) > int(max_length):
        raise InvalidArgument(
            f"min_length must be in [1, max_length={max_length}]; got {min_length!r}"
        )
    mt = int(max_target_length) if max_target_length is not None else int(max_length)
    return int(max_length), mt, int(min_length)


def extract_sentence(
    src_len: int,
    tgt_len: int,
    alignment: Iterable[tuple[int, int]],
    *,
    max_length: int = 4,
    max_target_length: int | None = None,
    min_length: int = 1,
) -> list[tuple[int, int, int, int]]:
    """All phrase pairs ``(s0, s1, t0, t1)`` (end-exclusive) of one sentence pair consistent with ``alignment``.

    ``max_length``/``min_length`` bound the source side; ``max_target_length`` the target side
    (default: ``max_length``, like Moses' ``extract``).

    Args:
        src_len: the source sentence length in tokens.
        tgt_len: the target sentence length in tokens.
        alignment: the links ``(i, j)``, inside the sentence pair.
        max_length: the longest source phrase in tokens, an integer >= 1.
        max_target_length: the longest target phrase in tokens, an integer >= 1 (default: ``max_length``).
        min_length: the shortest source phrase in tokens, in [1, max_length].

    Returns:
        ``(s0, s1, t0, t1)`` spans.

    Raises:
        InvalidArgument: a length out of range, or a link outside the sentence pair.
    """
    max_s, max_t, min_s = check_lengths(max_length, max_target_length, min_length)
    return _extract(src_len, tgt_len, alignment, max_s, max_t, min_s)


def _extract(
    src_len: int,
    tgt_len: int,
    alignment: Iterable[tuple[int, int]],
    max_s: int,
    max_t: int,
    min_s: int,
) -> list[tuple[int, int, int, int]]:
    big = 1 << 30
    t_min_s = [big] * tgt_len  # per target word: min / max aligned source index
    t_max_s = [-1] * tgt_len
    s_min_t = [big] * src_len  # per source word: min / max aligned target index
    s_max_t = [-1] * src_len
    for i, j in alignment:
        if not (0 <= i < src_len and 0 <= j < tgt_len):
            raise InvalidArgument(
                f"alignment link {i}-{j} is outside the sentence pair "
                f"(source length {src_len}, target length {tgt_len})"
            )
        if i < t_min_s[j]:
            t_min_s[j] = i
        if i > t_max_s[j]:
            t_max_s[j] = i
        if j < s_min_t[i]:
            s_min_t[i] = j
        if j > s_max_t[i]:
            s_max_t[i] = j
    out: list[tuple[int, int, int, int]] = []
    for t0 in range(tgt_len):
        f_lo, f_hi = big, -1
        for t1 in range(t0, min(tgt_len, t0 + max_t)):
            if t_max_s[t1] >= 0:
                if t_min_s[t1] < f_lo:
                    f_lo = t_min_s[t1]
                if t_max_s[t1] > f_hi:
                    f_hi = t_max_s[t1]
            if f_hi < 0 or f_hi - f_lo + 1 > max_s:
                continue
            # consistency: source words in [f_lo, f_hi] align only inside [t0, t1]
            ok = True
            for i in range(f_lo, f_hi + 1):
                if s_max_t[i] >= 0 and (s_min_t[i] < t0 or s_max_t[i] > t1):
                    ok = False
                    break
            if not ok:
                continue
            # extend over unaligned source words on both sides
            fs = f_lo
            while True:
                fe = f_hi
                while True:
                    if fe - fs + 1 > max_s:
                        break
                    if fe - fs + 1 >= min_s:
                        out.append((fs, fe + 1, t0, t1 + 1))
                    fe += 1
                    if fe >= src_len or s_max_t[fe] >= 0:
                        break
                fs -= 1
                if fs < 0 or s_max_t[fs] >= 0 or f_hi - fs + 1 > max_s:
                    break
    return out


def extract_phrases(
    source: Sequence[Sequence[str]],
    target: Sequence[Sequence[str]],
    alignments: Sequence[Iterable[tuple[int, int]]],
    *,
    max_length: int = 4,
    max_target_length: int | None = None,
    min_length: int = 1,
    progress: bool = False,
) -> np.ndarray:
    """All phrase-pair occurrences of a corpus: ``int32`` rows ``(sentence, s0, s1, t0, t1)``.

    Args:
        source: tokenised source sentences.
        target: tokenised target sentences.
        alignments: the links of each sentence pair.
        max_length: the longest source phrase in tokens, an integer >= 1.
        max_target_length: the longest target phrase in tokens, an integer >= 1 (default: ``max_length``).
        min_length: the shortest source phrase in tokens, in [1, max_length].
        progress: show a progress bar.

    Returns:
        An ``(n, 5)`` ``int32`` array (``(0, 5)`` when there is none).

    Raises:
        InvalidArgument: the three sequences differ in length, a length is out of range, or a link lies
            outside its sentence pair.
    """
    max_s, max_t, min_s = check_lengths(max_length, max_target_length, min_length)
    if not (len(source) == len(target) == len(alignments)):
        raise InvalidArgument(
            f"source, target and alignments must have the same length; got "
            f"{len(source)}, {len(target)}, {len(alignments)}"
        )
    rows: list[tuple[int, int, int, int, int]] = []
    it: Iterable = range(len(source))
    if progress:
        it = tqdm(it, desc="extracting phrase pairs", unit="sent")
    for k in it:
        for p in _extract(len(source[k]), len(target[k]), alignments[k], max_s, max_t, min_s):
            rows.append((k, *p))
    if not rows:
        return np.zeros((0, 5), dtype=np.int32)
    return np.asarray(rows, dtype=np.int32)
