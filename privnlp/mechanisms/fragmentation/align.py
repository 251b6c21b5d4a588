"""Word alignment for phrase-pair fragmentation: eflomal (default) or a numpy fallback,
both directions, plus the symmetrisation heuristics.

Paper: ``../shared/papers/phrase-pair-fragmentation-nmt.txt`` (Sec. 4: fast_align in both
directions, *union* symmetrisation). We default to eflomal (Östling & Tiedemann 2016, a
better-kept successor of fast_align); without it (``pip install 'privnlp[align]'``) the
fallback is ``"fast_align_py"``: a numpy implementation of Dyer et al. (2013)'s reparameterised
IBM Model 2 (IBM1 lexical EM + a fixed diagonal prior). Written by hand because nltk's
IBMModel1/2 loop over Python dicts per sentence (minutes on 10k pairs, no diagonal prior);
the vectorised EM below aligns 10k pairs in seconds.

Symmetrisation follows Koehn et al. (2003) / Moses ``symal``: ``union``, ``intersection``,
``grow-diag``, ``grow-diag-final``, ``grow-diag-final-and``.

Alignments are per sentence a ``frozenset`` of ``(source_index, target_index)`` links.
Note: eflomal's sampler takes no seed, so its output varies slightly between runs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from privnlp.core.errors import InvalidArgument, MissingDependency

__all__ = [
    "Alignment",
    "AlignmentResult",
    "SYMMETRIZATIONS",
    "ALIGNERS",
    "symmetrize",
    "align",
    "align_eflomal",
    "align_fast_align_py",
    "aer",
    "eflomal_available",
    "parse_pharaoh",
]

Alignment = frozenset  # of (i, j) pairs
SYMMETRIZATIONS = ("union", "intersection", "grow-diag", "grow-diag-final", "grow-diag-final-and")
ALIGNERS = ("eflomal", "fast_align_py", "auto")


@dataclass(frozen=True)
class AlignmentResult:
    """Directional and symmetrised alignments (``(src_i, tgt_j)`` links per sentence).

    Attributes:
        forward: per sentence, the source -> target links ``(src_i, tgt_j)`` (each target word picks a source word).
        reverse: per sentence, the target -> source direction's links, as ``(src_i, tgt_j)``.
        symmetric: per sentence, the symmetrised links.
        aligner: the aligner used (``"eflomal"`` or ``"fast_align_py"``).
        symmetrization: the symmetrisation heuristic.
    """

    forward: tuple[
        frozenset, ...
    ]  # source -> target direction (each target word picks a source word)
    reverse: tuple[frozenset, ...]  # target -> source direction
    symmetric: tuple[frozenset, ...]
    aligner: str
    symmetrization: str


def eflomal_available() -> bool:
    try:
        import eflomal  # noqa: F401

        return True
    except ImportError:
        return False


def parse_pharaoh(line: str) -> frozenset:
    """``"0-1 2-2"`` -> ``frozenset({(0, 1), (2, 2)})``."""
    out = set()
    for tok in line.split():
        i, _, j = tok.partition("-")
        out.add((int(i), int(j)))
    return frozenset(out)


# ---------------------------------------------------------------------------------------
# Symmetrisation

_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def symmetrize(
    forward: Iterable[tuple[int, int]],
    reverse: Iterable[tuple[int, int]],
    src_len: int,
    tgt_len: int,
    method: str = "union",
) -> frozenset:
    """Combine two directional alignments of one sentence pair (Koehn et al. 2003).

    Args:
        forward: the source -> target links ``(i, j)``.
        reverse: the target -> source links, as ``(i, j)``.
        src_len: the source sentence length in tokens.
        tgt_len: the target sentence length in tokens.
        method: one of :data:`SYMMETRIZATIONS`.

    Returns:
        The symmetrised links.

    Raises:
        InvalidArgument: unknown ``method``.
    """
    if method not in SYMMETRIZATIONS:
        raise InvalidArgument(
            f"symmetrization must be one of {', '.join(SYMMETRIZATIONS)}; got {method!r}"
        )
    f2e, e2f = set(forward), set(reverse)
    union = f2e | e2f
    if method == "union":
        return frozenset(union)
    inter = f2e & e2f
    if method == "intersection":
        return frozenset(inter)
    a = set(inter)
    src_al = {i for i, _ in a}
    tgt_al = {j for _, j in a}
    added = True
    while added:  # grow-diag
        added = False
        for i in range(src_len):
            for j in range(tgt_len):
                if (i, j) not in a:
                    continue
                for di, dj in _NEIGHBOURS:
                    ni, nj = i + di, j + dj
                    if (
                        (ni, nj) in union
                        and (ni, nj) not in a
                        and (ni not in src_al or nj not in tgt_al)
                    ):
                        a.add((ni, nj))
                        src_al.add(ni)
                        tgt_al.add(nj)
                        added = True
    if method == "grow-diag":
        return frozenset(a)
    both = method == "grow-diag-final-and"
    for direction in (f2e, e2f):  # final(-and)
        for i in range(src_len):
            for j in range(tgt_len):
                if (i, j) in direction and (i, j) not in a:
                    ok = (
                        (i not in src_al and j not in tgt_al)
                        if both
                        else (i not in src_al or j not in tgt_al)
                    )
                    if ok:
                        a.add((i, j))
                        src_al.add(i)
                        tgt_al.add(j)
    return frozenset(a)


# ---------------------------------------------------------------------------------------
# Aligners


def align_eflomal(
    source: Sequence[Sequence[str]],
    target: Sequence[Sequence[str]],
    *,
    n_samplers: int = 2,
    rel_iterations: float = 1.0,
) -> tuple[list[frozenset], list[frozenset]]:
    """Forward and reverse alignments from eflomal (not seedable: its sampler seeds itself)."""
    try:
        import eflomal
    except ImportError:
        raise MissingDependency("eflomal", "align", "or use aligner='fast_align_py'") from None
    with tempfile.TemporaryDirectory(prefix="privnlp-eflomal-") as d:
        fwd, rev = os.path.join(d, "fwd"), os.path.join(d, "rev")
        aligner = eflomal.Aligner(n_samplers=n_samplers, rel_iterations=rel_iterations)
        aligner.align(
            [" ".join(s) for s in source],
            [" ".join(t) for t in target],
            links_filename_fwd=fwd,
            links_filename_rev=rev,
            quiet=True,
        )
        with open(fwd, encoding="utf-8") as f:
            fl = [parse_pharaoh(x) for x in f.read().split("\n")[: len(source)]]
        with open(rev, encoding="utf-8") as f:
            rl = [parse_pharaoh(x) for x in f.read().split("\n")[: len(source)]]
    if len(fl) != len(source) or len(rl) != len(source):  # pragma: no cover - eflomal contract
        raise RuntimeError(
            f"eflomal returned {len(fl)}/{len(rl)} alignments for {len(source)} sentences"
        )
    return fl, rl


def _ibm2_diag(
    src: Sequence[Sequence[str]],
    tgt: Sequence[Sequence[str]],
    iterations: int,
    tension: float,
    p_null: float,
) -> list[frozenset]:
    """Each target word picks one source word (or NULL); returns (src_i, tgt_j) links."""
    vs: dict[str, int] = {}
    vt: dict[str, int] = {}
    s_ids = [
        np.fromiter(
            (vs.setdefault(w.lower(), len(vs) + 1) for w in s), dtype=np.int64, count=len(s)
        )
        for s in src
    ]
    t_ids = [
        np.fromiter((vt.setdefault(w.lower(), len(vt)) for w in t), dtype=np.int64, count=len(t))
        for t in tgt
    ]
    # flatten every (sentence, target position j, source position i incl. NULL=0)
    f_l, e_l, grp_l, prior_l, i_l = [], [], [], [], []
    g0 = 0
    for s, t in zip(s_ids, t_ids):
        m, n = len(s), len(t)
        fs = np.concatenate([[0], s])  # NULL has id 0
        f_l.append(np.tile(fs, n))
        e_l.append(np.repeat(t, m + 1))
        grp_l.append(np.repeat(np.arange(g0, g0 + n), m + 1))
        g0 += n
        ii = np.arange(m)
        jj = np.arange(n)
        h = -np.abs((ii[None, :] + 0.5) / m - (jj[:, None] + 0.5) / n) * tension
        w = np.exp(h)
        w = (1.0 - p_null) * w / w.sum(axis=1, keepdims=True)
        prior = np.concatenate([np.full((n, 1), p_null), w], axis=1).reshape(-1)
        prior_l.append(prior)
        i_l.append(np.tile(np.arange(-1, m), n))
    f = np.concatenate(f_l)
    e = np.concatenate(e_l)
    grp = np.concatenate(grp_l)
    prior = np.concatenate(prior_l)
    src_pos = np.concatenate(i_l)
    n_e = len(vt)
    pair = f * n_e + e
    uniq, pair_idx = np.unique(pair, return_inverse=True)
    uniq_f = uniq // n_e
    t_prob = np.ones(len(uniq))
    for _ in range(iterations):
        p = t_prob[pair_idx] * prior
        z = np.bincount(grp, weights=p, minlength=g0)
        post = p / z[grp]
        counts = np.bincount(pair_idx, weights=post, minlength=len(uniq))
        tot_f = np.bincount(uniq_f, weights=counts)
        t_prob = counts / np.maximum(tot_f[uniq_f], 1e-300)
    p = t_prob[pair_idx] * prior
    # Viterbi: argmax per group (groups are contiguous)
    starts = np.flatnonzero(np.r_[True, grp[1:] != grp[:-1]])
    best = np.maximum.reduceat(p, starts)
    is_best = p >= best[grp]
    first_best = np.full(g0, -1, dtype=np.int64)
    idx = np.flatnonzero(is_best)
    first_best[grp[idx[::-1]]] = idx[::-1]  # earliest index wins
    choice = src_pos[first_best]
    out = []
    g = 0
    for t in t_ids:
        n = len(t)
        ch = choice[g : g + n]
        out.append(frozenset((int(i), j) for j, i in enumerate(ch) if i >= 0))
        g += n
    return out


def align_fast_align_py(
    source: Sequence[Sequence[str]],
    target: Sequence[Sequence[str]],
    *,
    iterations: int = 5,
    tension: float = 4.0,
    p_null: float = 0.08,
) -> tuple[list[frozenset], list[frozenset]]:
    """Deterministic numpy fallback: fast_align-style IBM2 (fixed diagonal tension), both directions."""
    fwd = _ibm2_diag(source, target, iterations, tension, p_null)
    rev_t = _ibm2_diag(target, source, iterations, tension, p_null)
    rev = [frozenset((i, j) for j, i in a) for a in rev_t]
    return fwd, rev


def align(
    source: Sequence[Sequence[str]],
    target: Sequence[Sequence[str]],
    *,
    aligner: str = "eflomal",
    symmetrization: str = "union",
) -> AlignmentResult:
    """Align both directions and symmetrise. ``aligner="auto"`` = eflomal if installed else the fallback.

    Args:
        source: tokenised source sentences.
        target: tokenised target sentences, aligned with ``source``.
        aligner: ``"eflomal"``, ``"fast_align_py"`` (deterministic numpy IBM2) or ``"auto"``.
        symmetrization: one of :data:`SYMMETRIZATIONS`.

    Returns:
        Both directions and the symmetrised links.

    Raises:
        InvalidArgument: unknown ``aligner`` or ``symmetrization``.
        MissingDependency: ``aligner="eflomal"`` without eflomal installed.
    """
    if aligner not in ALIGNERS:
        raise InvalidArgument(f"aligner must be one of {', '.join(ALIGNERS)}; got {aligner!r}")
    if symmetrization not in SYMMETRIZATIONS:
        raise InvalidArgument(
            f"symmetrization must be one of {', '.join(SYMMETRIZATIONS)}; got {symmetrization!r}"
        )
    if aligner == "auto":
        aligner = "eflomal" if eflomal_available() else "fast_align_py"
    if aligner == "eflomal":
        fwd, rev = align_eflomal(source, target)
    else:
        fwd, rev = align_fast_align_py(source, target)
    sym = tuple(
        symmetrize(f, r, len(s), len(t), symmetrization)
        for f, r, s, t in zip(fwd, rev, source, target)
    )
    return AlignmentResult(tuple(fwd), tuple(rev), sym, aligner, symmetrization)


def aer(
    predicted: Sequence[Iterable[tuple[int, int]]],
    sure: Sequence[Iterable[tuple[int, int]]],
    possible: Sequence[Iterable[tuple[int, int]]] | None = None,
) -> float:
    """Alignment error rate (Och & Ney 2003): 1 - (|A∩S| + |A∩P|) / (|A| + |S|); P ⊇ S (default P = S).

    Args:
        predicted: predicted links per sentence.
        sure: sure gold links per sentence.
        possible: possible gold links per sentence (``None`` = ``sure``).

    Returns:
        AER in [0, 1] (0 when there are no links at all).
    """
    a_s = a_p = n_a = n_s = 0
    possible = possible if possible is not None else sure
    for a, s, p in zip(predicted, sure, possible):
        a, s = set(a), set(s)
        p = set(p) | s
        a_s += len(a & s)
        a_p += len(a & p)
        n_a += len(a)
        n_s += len(s)
    if n_a + n_s == 0:
        return 0.0
    return 1.0 - (a_s + a_p) / (n_a + n_s)
