"""Reconstruction attack on released phrase fragments (``fragment_reconstruction``).

Evaluates phrase-pair fragmentation (``../shared/papers/phrase-pair-fragmentation-nmt.txt``):
the paper's threat is "the full reconstruction of the original text from a list of given
n-grams of phrases" and it names Gallé & Tealdi (2015, "Reconstructing textual documents from
n-grams") as the starting point for measuring it. This attack follows that idea with greedy
*unambiguous overlap assembly* (unitigs of the overlap graph, as in genome assembly):

1. strip ``<P>``/``</P>`` tags, de-duplicate fragments, drop fragments contained in others;
2. link fragment ``a -> b`` when the longest suffix of ``a`` (>= ``min_overlap`` tokens) that is a
   prefix of another fragment is a prefix of ``b`` only, and that prefix of ``b`` ends no other
   fragment (no branching either way);
3. merge maximal chains, repeat on the merged contigs until nothing changes (or ``max_rounds``);
4. check whether the release has an order (consecutive fragments related far more often than by
   chance) and if so read contigs off it (:func:`release_order_contigs`): a release that forgot to
   shuffle hands back its sentences; a shuffled one adds nothing.

Threat model: honest-but-curious recipient of the release (it sees the fragments and the
settings, knows the algorithm). Metrics (higher = more leakage), per sentence of the original
source side: ``full_reconstruction_rate`` (headline; the sentence occurs contiguously in a
reconstructed contig), ``longest_span_mean`` (longest common substring / sentence length),
``rougeL_mean`` (ROUGE-L F1 vs the best-matching contig), and for planted entity pairs
``sensitive_link_rate`` (both entities, at their original distance, inside one released
fragment) and ``sensitive_link_rate_reconstructed`` (inside one reconstructed contig).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument, check_range
from privnlp.core.observations import FragmentSet
from privnlp.core.protocols import Attack, AttackResult
from privnlp.core.registry import ATTACKS

__all__ = [
    "FragmentReconstruction",
    "FragmentGroundTruth",
    "assemble",
    "release_order_contigs",
    "score_reconstruction",
]

_TAGS = ("<P>", "</P>")


@dataclass(frozen=True)
class FragmentGroundTruth:
    """The original (tokenised) source sentences and the planted sensitive pairs.

    ``planted``: ``(first_word, second_word, distance)`` per planted pair (``distance`` = token
    offset of the second entity from the first in the original sentence).
    """

    sentences: tuple[tuple[str, ...], ...]
    planted: tuple[tuple[str, str, int], ...] = ()

    @classmethod
    def from_corpus(cls, corpus: Any) -> FragmentGroundTruth:
        """From a :class:`privnlp.data.parallel.ParallelCorpus` (source side)."""
        return cls(
            tuple(tuple(s.split()) for s in corpus.source),
            tuple(
                (p.first_word, p.second_word, p.distance) for p in getattr(corpus, "planted", ())
            ),
        )


def _tokens(fragment: str) -> tuple[str, ...]:
    toks = fragment.split()
    if toks and toks[0] == _TAGS[0]:
        toks = toks[1:]
    if toks and toks[-1] == _TAGS[1]:
        toks = toks[:-1]
    return tuple(toks)


def _drop_contained(frags: Iterable[tuple[str, ...]]) -> list[tuple[str, ...]]:
    frags = sorted(set(f for f in frags if f), key=lambda f: (-len(f), f))
    inner: set[tuple[str, ...]] = set()
    keep = []
    for f in frags:
        if f in inner:
            continue
        keep.append(f)
        n = len(f)
        for i in range(n):
            for j in range(i + 1, n + 1):
                if j - i < n:
                    inner.add(f[i:j])
    return keep


def _merge_round(
    frags: list[tuple[str, ...]], min_overlap: int
) -> tuple[list[tuple[str, ...]], int]:
    pre: dict[tuple[str, ...], list[int]] = defaultdict(list)
    suf: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for idx, f in enumerate(frags):
        for k in range(min_overlap, len(f)):
            pre[f[:k]].append(idx)
            suf[f[-k:]].append(idx)
    succ: dict[int, tuple[int, int]] = {}
    indeg: dict[int, int] = defaultdict(int)
    for a, f in enumerate(frags):
        for k in range(len(f) - 1, min_overlap - 1, -1):
            cands = [b for b in pre.get(f[-k:], ()) if b != a]
            if not cands:
                continue
            if len(cands) == 1 and [x for x in suf[f[-k:]] if x != cands[0]] == [a]:
                succ[a] = (cands[0], k)
                indeg[cands[0]] += 1
            break  # only the longest overlap counts; ambiguity stops the extension
    succ = {a: (b, k) for a, (b, k) in succ.items() if indeg[b] == 1}
    has_pred = {b for b, _ in succ.values()}
    used: set[int] = set()
    out: list[tuple[str, ...]] = []
    merges = 0
    starts = [a for a in range(len(frags)) if a not in has_pred] + list(range(len(frags)))
    for a in starts:
        if a in used:
            continue
        contig = list(frags[a])
        used.add(a)
        cur = a
        while cur in succ:
            b, k = succ[cur]
            if b in used:  # cycle
                break
            contig.extend(frags[b][k:])
            used.add(b)
            merges += 1
            cur = b
        out.append(tuple(contig))
    return out, merges


_SENT_END = frozenset({".", "!", "?"})


def _contains(big: Sequence[str], small: Sequence[str]) -> bool:
    n = len(small)
    return any(tuple(big[i : i + n]) == tuple(small) for i in range(len(big) - n + 1))


def release_order_contigs(
    fragments: Sequence[str | Sequence[str]], *, ordered_threshold: float = 0.3
) -> list[tuple[str, ...]]:
    """Contigs read off the *release order*, if the release has one.

    The attacker knows the algorithm, not whether the implementation shuffled: it checks. In a
    shuffled release consecutive fragments are unrelated; in a release in extraction order most
    consecutive fragments contain, are contained in, or overlap their predecessor. If more than
    ``ordered_threshold`` of the consecutive pairs do, the release is read in order: a fragment
    contained in the current contig is skipped, one containing it replaces it, an overlapping one
    extends it, any other is appended, and a fragment ending a sentence (``. ! ?``) closes the
    contig. Otherwise there is no order to exploit and nothing is returned."""
    toks = [t for t in ((_tokens(f) if isinstance(f, str) else tuple(f)) for f in fragments) if t]
    if len(toks) < 2:
        return []

    def related(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
        return (
            _contains(a, b)
            or _contains(b, a)
            or any(a[-k:] == b[:k] for k in range(1, min(len(a), len(b))))
        )

    if sum(related(a, b) for a, b in zip(toks, toks[1:])) <= ordered_threshold * (len(toks) - 1):
        return []
    out: list[tuple[str, ...]] = []
    cur: list[str] = []
    for t in toks:
        if cur and _contains(cur, t):
            pass
        elif cur and _contains(t, cur):
            cur = list(t)
        else:
            k = next(
                (k for k in range(min(len(cur), len(t) - 1), 0, -1) if tuple(cur[-k:]) == t[:k]), 0
            )
            cur.extend(t[k:])
        if cur and cur[-1] in _SENT_END and t[-1] in _SENT_END:
            if len(cur) > 1:  # a lone "." after a closed sentence is not a contig
                out.append(tuple(cur))
            cur = []
    if cur:
        out.append(tuple(cur))
    return out


def assemble(
    fragments: Iterable[str | Sequence[str]], *, min_overlap: int = 2, max_rounds: int = 10
) -> list[tuple[str, ...]]:
    """Reassemble token sequences from fragments by unambiguous overlap merging.

    Args:
        fragments: released fragments, as strings (tokenized on whitespace / punctuation) or token sequences.
        min_overlap: the least number of tokens two fragments must share to be merged.
        max_rounds: the most merge rounds.

    Returns:
        The contigs (token tuples), fragments contained in others dropped.
    """
    frags = [(_tokens(f) if isinstance(f, str) else tuple(f)) for f in fragments]
    frags = _drop_contained(frags)
    for _ in range(max_rounds):
        frags, merges = _merge_round(frags, min_overlap)
        frags = _drop_contained(frags)
        if merges == 0:
            break
    return frags


def _lcs_len(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _pair_linked(
    seqs: Sequence[Sequence[str]], by_word: Mapping[str, list[int]], w1: str, w2: str, dist: int
) -> bool:
    for idx in by_word.get(w1, ()):
        s = seqs[idx]
        for i, w in enumerate(s):
            if w == w1 and i + dist < len(s) and s[i + dist] == w2:
                return True
    return False


def score_reconstruction(result: AttackResult, ground_truth: Any) -> dict[str, float]:
    """Score contigs (``result.reconstructions``) against a :class:`FragmentGroundTruth`.

    Args:
        result: the attack's result (contigs as strings or token tuples; ``raw["fragments"]`` for link rates).
        ground_truth: a :class:`FragmentGroundTruth`, or a parallel corpus to build one from.

    Returns:
        ``full_reconstruction_rate``, ``longest_span_mean``, ``rougeL_mean``, ``n_contigs`` and, when sensitive
        word pairs were planted, ``sensitive_link_rate`` (in the fragments) and
        ``sensitive_link_rate_reconstructed`` (in the contigs).
    """
    if not isinstance(ground_truth, FragmentGroundTruth):
        ground_truth = FragmentGroundTruth.from_corpus(ground_truth)
    contigs = [tuple(c.split()) if isinstance(c, str) else tuple(c) for c in result.reconstructions]
    sents = ground_truth.sentences
    max_len = max((len(s) for s in sents), default=0)
    # every contig substring up to the longest sentence -> contig id
    sub: dict[tuple[str, ...], int] = {}
    for ci, c in enumerate(contigs):
        n = len(c)
        for i in range(n):
            for j in range(i + 1, min(n, i + max_len) + 1):
                sub.setdefault(c[i:j], ci)
    full = span_sum = rouge_sum = 0.0
    for s in sents:
        best, best_c = 0, -1
        n = len(s)
        for i in range(n):
            if n - i <= best:
                break
            j = i + best + 1
            while j <= n and s[i:j] in sub:
                best, best_c = j - i, sub[s[i:j]]
                j += 1
        full += best == n
        span_sum += best / n if n else 0.0
        if best_c >= 0:
            lcs = _lcs_len(s, contigs[best_c])
            p, r = lcs / len(contigs[best_c]), lcs / n
            rouge_sum += 2 * p * r / (p + r) if p + r else 0.0
    m = max(len(sents), 1)
    out = {
        "full_reconstruction_rate": full / m,
        "longest_span_mean": span_sum / m,
        "rougeL_mean": rouge_sum / m,
        "n_contigs": float(len(contigs)),
    }
    if ground_truth.planted:
        frags = [tuple(f) for f in result.raw.get("fragments", ())]
        for key, seqs in (
            ("sensitive_link_rate", frags),
            ("sensitive_link_rate_reconstructed", contigs),
        ):
            words = {w for w1, _, _ in ground_truth.planted for w in (w1,)}
            by_word: dict[str, list[int]] = defaultdict(list)
            for idx, s in enumerate(seqs):
                for w in set(s) & words:
                    by_word[w].append(idx)
            hits = sum(_pair_linked(seqs, by_word, w1, w2, d) for w1, w2, d in ground_truth.planted)
            out[key] = hits / len(ground_truth.planted)
    return out


@ATTACKS.register("fragment_reconstruction")
class FragmentReconstruction(Attack):
    """Overlap-assembly reconstruction of source sentences from released phrase fragments.

    Args:
        min_overlap: minimum number of overlapping tokens to merge two fragments (>= 1).
        max_rounds: maximum number of merge rounds.
    """

    paper = (
        "phrase-pair-fragmentation-nmt.txt (threat model, Sec. 2; future work: Gallé & Tealdi 2015, "
        "Reconstructing textual documents from n-grams, KDD)"
    )
    observation_type = FragmentSet
    threat_model = ThreatModel(
        adversary=Adversary.HONEST_BUT_CURIOUS_SERVER,
        observes=("released source/target phrase fragments", "release settings"),
        knows=("the fragmentation algorithm",),
        goal="reassemble the original source sentences; link planted sensitive entity pairs",
    )
    headline_metric = "full_reconstruction_rate"

    def __init__(self, min_overlap: int = 2, max_rounds: int = 10) -> None:
        check_range("min_overlap", min_overlap, 1, integer=True)
        check_range("max_rounds", max_rounds, 1, integer=True)
        self.min_overlap = min_overlap
        self.max_rounds = max_rounds

    def run(self, observation: FragmentSet, *, rng: Any = None) -> AttackResult:
        """Deterministic (``rng`` is accepted for the protocol and unused)."""
        if not isinstance(observation, FragmentSet):
            raise InvalidArgument(
                f"observation must be a FragmentSet; got {type(observation).__name__}"
            )
        frags = sorted({_tokens(f) for f in observation.source} - {()})
        contigs = assemble(
            frags, min_overlap=int(self.min_overlap), max_rounds=int(self.max_rounds)
        )
        ordered = release_order_contigs(observation.source)
        seen = set(contigs)
        contigs += [c for c in dict.fromkeys(ordered) if c not in seen]
        return AttackResult(
            attack=self.name,
            reconstructions=tuple(" ".join(c) for c in contigs),
            raw={
                "fragments": frags,
                "n_fragment_types": len(frags),
                "n_contigs": len(contigs),
                "n_release_order_contigs": len(ordered),
            },
            scorer=score_reconstruction,
        )
