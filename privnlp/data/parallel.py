"""A deterministic toy parallel corpus with known (gold) word alignments.

Used to evaluate phrase-pair fragmentation (``../shared/papers/phrase-pair-fragmentation-nmt.txt``):
the source side is English-like; the target side is a made-up language obtained by

* lexical translation (a fixed dictionary of invented words, the same for every seed);
* local reordering: adjective-noun swap inside noun phrases and verb-final clauses
  (``S V O PP`` -> ``S PP O V``);
* one-to-many links (a past-tense verb becomes ``auxiliary + stem``) and unaligned words
  (the source article ``a`` has no translation),

so the gold alignment of every sentence pair is known. Medical sentences plant a sensitive
entity pair (a drug name and a side effect 4-8 source words apart), in the spirit of the
paper's Abraxane/tiredness example; ``ParallelCorpus.planted`` lists them.

Self-contained (no dependency on :mod:`privnlp.data`'s private corpus) so it is deterministic
per seed and cheap: ``generate_parallel(1000, seed=0)`` takes a few milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privnlp.core.errors import check_probability, check_range

__all__ = ["ParallelCorpus", "PlantedPair", "generate_parallel", "TOY_LEXICON"]


@dataclass(frozen=True)
class PlantedPair:
    """A sensitive entity pair planted in sentence ``sentence``.

    ``first``/``second`` are source token positions (``second - first`` in [4, 8]).
    """

    sentence: int
    first: int
    second: int
    first_word: str
    second_word: str

    @property
    def distance(self) -> int:
        return self.second - self.first


@dataclass(frozen=True)
class ParallelCorpus:
    """Sentence-aligned, tokenised (space-separated) parallel text with gold word alignments.

    Attributes:
        source, target: one sentence per entry, tokens separated by single spaces.
        alignments: per sentence, the gold links ``(source_index, target_index)``.
        doc_ids: the document each sentence belongs to.
        planted: the planted sensitive entity pairs.
        domains: ``"medical"`` or ``"general"`` per sentence.
    """

    source: tuple[str, ...]
    target: tuple[str, ...]
    alignments: tuple[tuple[tuple[int, int], ...], ...]
    doc_ids: tuple[str, ...]
    planted: tuple[PlantedPair, ...] = ()
    domains: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.source)

    def subset(self, indices: Sequence[int]) -> ParallelCorpus:
        """The sentences at ``indices`` (planted pairs re-indexed)."""
        idx = [int(i) for i in indices]
        pos = {old: new for new, old in enumerate(idx)}
        planted = tuple(
            PlantedPair(pos[p.sentence], p.first, p.second, p.first_word, p.second_word)
            for p in self.planted
            if p.sentence in pos
        )
        return ParallelCorpus(
            source=tuple(self.source[i] for i in idx),
            target=tuple(self.target[i] for i in idx),
            alignments=tuple(self.alignments[i] for i in idx),
            doc_ids=tuple(self.doc_ids[i] for i in idx),
            planted=planted,
            domains=tuple(self.domains[i] for i in idx) if self.domains else (),
        )


# ---------------------------------------------------------------------------------------
# Lexicon (fixed for every seed)

_DET = ["the", "this", "every", "that"]  # "a" is handled separately (unaligned)
_ADJ = [
    "red",
    "small",
    "old",
    "new",
    "large",
    "quiet",
    "bright",
    "cold",
    "warm",
    "heavy",
    "green",
    "young",
    "strange",
    "clean",
    "broken",
    "empty",
    "local",
    "yellow",
    "simple",
    "early",
]
_NOUN = [
    "doctor",
    "nurse",
    "patient",
    "report",
    "table",
    "window",
    "car",
    "book",
    "letter",
    "garden",
    "house",
    "teacher",
    "student",
    "door",
    "river",
    "city",
    "market",
    "child",
    "friend",
    "office",
    "phone",
    "bottle",
    "chair",
    "street",
    "bridge",
    "dog",
    "cat",
    "farmer",
    "engineer",
    "lawyer",
    "manager",
    "kitchen",
    "school",
    "train",
    "station",
    "hospital",
    "clinic",
    "box",
    "bag",
    "key",
]
_VERB = [
    "saw",
    "wrote",
    "opened",
    "moved",
    "found",
    "read",
    "checked",
    "cleaned",
    "carried",
    "painted",
    "visited",
    "closed",
    "sold",
    "bought",
    "called",
    "helped",
    "watched",
    "fixed",
    "lost",
    "signed",
]
_PREP = ["in", "near", "with", "behind", "after", "under"]
_ADV = ["yesterday", "today", "quickly", "again", "slowly", "twice"]
_DRUG = [
    "abraxane",
    "velomab",
    "cortinex",
    "zelitra",
    "moxapril",
    "duravex",
    "fenotrin",
    "lumacet",
    "oraxil",
    "piroquin",
    "stelvane",
    "tamiflex",
]
_EFFECT = [
    "tiredness",
    "nausea",
    "headache",
    "dizziness",
    "rash",
    "insomnia",
    "fever",
    "cough",
    "anxiety",
    "swelling",
    "vomiting",
    "cramps",
]
_SEVERITY = ["severe", "mild", "sudden", "persistent"]
_FILLERS = [
    ["and", "then"],
    ["and", "later", "on"],
    ["for", "two", "weeks", "and"],
    ["twice", "a", "day", "and", "then"],
    ["in", "the", "morning", "and", "later"],
]
_MED_SUBJ = ["patient", "woman", "man", "child", "nurse"]

_SYLL = [
    "ka",
    "lo",
    "mi",
    "ra",
    "tu",
    "sen",
    "vo",
    "pe",
    "zu",
    "na",
    "gri",
    "dal",
    "fo",
    "xi",
    "bre",
    "mu",
    "ti",
    "sha",
    "ko",
    "le",
    "vin",
    "ru",
    "da",
    "po",
    "nel",
    "qua",
    "so",
    "ber",
    "fi",
    "mo",
]


def _build_lexicon() -> dict[str, str]:
    rng = np.random.default_rng(20240607)
    words = sorted(
        set(
            _DET
            + _ADJ
            + _NOUN
            + _VERB
            + _PREP
            + _ADV
            + _DRUG
            + _EFFECT
            + _SEVERITY
            + [w for f in _FILLERS for w in f]
            + _MED_SUBJ
            + ["took", "reported", "and"]
        )
    )
    words = [w for w in words if w != "a"]
    lex: dict[str, str] = {}
    used: set[str] = set()
    for w in words:
        while True:
            n = int(rng.integers(2, 4))
            cand = "".join(_SYLL[int(i)] for i in rng.integers(0, len(_SYLL), n))
            if cand not in used:
                used.add(cand)
                lex[w] = cand
                break
    return lex


#: source word -> target word (drug names are kept as-is, like real drug names).
TOY_LEXICON: dict[str, str] = _build_lexicon()
for _d in _DRUG:
    TOY_LEXICON[_d] = _d
TOY_LEXICON["."] = "."
_PAST_AUX = "hat"  # past-tense verbs translate to "hat <stem>" (a one-to-many link)


# ---------------------------------------------------------------------------------------
# Generation: a sentence is a list of units (source tokens, target tokens, internal links);
# source order and target order are different permutations of the same units.


class _Unit:
    __slots__ = ("src", "tgt", "links")

    def __init__(self, src: list[str], tgt: list[str], links: list[tuple[int, int]]):
        self.src, self.tgt, self.links = src, tgt, links


def _word(w: str) -> _Unit:
    if w == "a":
        return _Unit(["a"], [], [])  # unaligned source word
    return _Unit([w], [TOY_LEXICON[w]], [(0, 0)])


def _verb(w: str) -> _Unit:
    return _Unit([w], [_PAST_AUX, TOY_LEXICON[w]], [(0, 0), (0, 1)])


def _np(
    rng: np.random.Generator, noun: str | None = None, adj_p: float = 0.5
) -> tuple[list[_Unit], list[_Unit]]:
    det = "a" if rng.random() < 0.2 else _DET[int(rng.integers(len(_DET)))]
    noun = noun or _NOUN[int(rng.integers(len(_NOUN)))]
    src = [_word(det)]
    if rng.random() < adj_p:
        adj = _word(_ADJ[int(rng.integers(len(_ADJ)))])
        n = _word(noun)
        return src + [adj, n], src + [n, adj]  # adjective-noun swap
    n = _word(noun)
    return src + [n], src + [n]


def _general(rng: np.random.Generator) -> tuple[list[_Unit], list[_Unit]]:
    s_src, s_tgt = _np(rng)
    v = _verb(_VERB[int(rng.integers(len(_VERB)))])
    o_src, o_tgt = _np(rng)
    pp_src: list[_Unit] = []
    pp_tgt: list[_Unit] = []
    if rng.random() < 0.6:
        p = _word(_PREP[int(rng.integers(len(_PREP)))])
        n_src, n_tgt = _np(rng, adj_p=0.4)
        pp_src, pp_tgt = [p] + n_src, [p] + n_tgt
    adv = [_word(_ADV[int(rng.integers(len(_ADV)))])] if rng.random() < 0.3 else []
    dot = _word(".")
    # verb-final: S V O PP ADV .  ->  S ADV PP O V .
    return s_src + [v] + o_src + pp_src + adv + [dot], s_tgt + adv + pp_tgt + o_tgt + [v] + [dot]


def _medical(
    rng: np.random.Generator,
) -> tuple[list[_Unit], list[_Unit], tuple[int, int, str, str]]:
    subj = _MED_SUBJ[int(rng.integers(len(_MED_SUBJ)))]
    s_src, s_tgt = _np(rng, noun=subj, adj_p=0.4)
    took = _verb("took")
    drug_w = _DRUG[int(rng.integers(len(_DRUG)))]
    drug = _word(drug_w)
    filler = [_word(w) for w in _FILLERS[int(rng.integers(len(_FILLERS)))]]
    rep = _verb("reported")
    eff_w = _EFFECT[int(rng.integers(len(_EFFECT)))]
    eff = _word(eff_w)
    sev = [_word(_SEVERITY[int(rng.integers(len(_SEVERITY)))])] if rng.random() < 0.5 else []
    dot = _word(".")
    src = s_src + [took, drug] + filler + [rep] + sev + [eff, dot]
    tgt = s_tgt + [drug, took] + filler + [eff] + sev + [rep, dot]
    first = sum(len(u.src) for u in s_src) + 1
    second = first + len(filler) + 1 + len(sev) + 1
    return src, tgt, (first, second, drug_w, eff_w)


def _realise(
    src_units: list[_Unit], tgt_units: list[_Unit]
) -> tuple[str, str, tuple[tuple[int, int], ...]]:
    s_off: dict[int, int] = {}
    pos = 0
    for u in src_units:
        s_off[id(u)] = pos
        pos += len(u.src)
    t_off: dict[int, int] = {}
    pos = 0
    for u in tgt_units:
        t_off[id(u)] = pos
        pos += len(u.tgt)
    links = sorted((s_off[id(u)] + i, t_off[id(u)] + j) for u in src_units for i, j in u.links)
    src = " ".join(w for u in src_units for w in u.src)
    tgt = " ".join(w for u in tgt_units for w in u.tgt)
    return src, tgt, tuple(links)


def generate_parallel(
    n: int = 1000, *, seed: int = 0, medical_rate: float = 0.3, doc_size: tuple[int, int] = (4, 8)
) -> ParallelCorpus:
    """Generate ``n`` sentence pairs of the toy language (deterministic per ``seed``).

    ``medical_rate`` of the sentences plant a (drug, side effect) pair 4-8 source words apart.
    Sentences are grouped into documents of ``doc_size`` sentences (ids ``doc00000`` ...).
    """

    check_range("n", n, 1, integer=True)
    check_probability("medical_rate", medical_rate)
    rng = np.random.default_rng(seed)
    src_l, tgt_l, al_l, docs, planted, domains = [], [], [], [], [], []
    doc, left = 0, int(rng.integers(doc_size[0], doc_size[1] + 1))
    for i in range(int(n)):
        if rng.random() < medical_rate:
            s_u, t_u, (a, b, w1, w2) = _medical(rng)
            planted.append(PlantedPair(i, a, b, w1, w2))
            domains.append("medical")
        else:
            s_u, t_u = _general(rng)
            domains.append("general")
        s, t, al = _realise(s_u, t_u)
        src_l.append(s)
        tgt_l.append(t)
        al_l.append(al)
        docs.append(f"doc{doc:05d}")
        left -= 1
        if left == 0:
            doc += 1
            left = int(rng.integers(doc_size[0], doc_size[1] + 1))
    return ParallelCorpus(
        tuple(src_l), tuple(tgt_l), tuple(al_l), tuple(docs), tuple(planted), tuple(domains)
    )
