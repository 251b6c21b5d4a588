"""Auto-annotation of PII from documents plus their known fields (no human reads the text).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` §2.2: an institution holds documents
*and* the PII fields of each (an infobox, a patient record) but not where they occur; each field is
located in the text by matching its variations against candidate phrases with fuzzy string matching,
and the located mentions become BIO tags (noisy labels: Table 4, strict F1 0.37, partial 0.54 against
manual labels). Here the candidate phrases come from the tokenizer and the regex recognizers instead
of spaCy, and fuzzy matching uses ``rapidfuzz`` (the paper used ``fuzzyset``).

Variants matched per field type:

* names (``PERSON`` / ``NAME``): full name, first or last name alone, initial + last name (``J. Doe``),
  reordered (``Doe, Jane``), nicknames both ways (``Bill`` <-> ``William``, :data:`NICKNAMES`); a
  possessive ``'s`` stays outside the span; fuzzy matching (typos) over capitalised token n-grams;
* ``DATE``: every date mention of the text (any common format, :func:`~.recognizers.parse_date`) whose
  reading equals the known date;
* ``PHONE`` / ``SSN`` / IDs: phone-, SSN- and digit-run candidates compared digit by digit;
* ``EMAIL``: e-mail candidates, exact or fuzzy;
* anything else (``ADDRESS``, ``ORG``, ``LOC``, user labels): case-insensitive exact search, else the
  best fuzzy alignment (``rapidfuzz.fuzz.partial_ratio_alignment``) snapped to token boundaries.

Usage::

    ann = AutoAnnotator()
    doc = ann.annotate(text, {"PERSON": ["Jane Doe"], "DATE": ["1975-03-02"]})
    doc.spans, doc.tokens_and_tags(), doc.unmatched
    evaluate_annotation(corpus.records, corpus.known_fields, ann).metrics.strict.f1
"""

from __future__ import annotations

import datetime as _dt
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz, process

from privnlp.core.errors import MalformedInput, check_range
from privnlp.core.rng import as_numpy
from privnlp.data.corpus import tokenize
from privnlp.metrics import ner_span_metrics

from .recognizers import (
    PIISpan,
    _date_candidates,
    digits,
    find_emails,
    find_phones,
    find_ssns,
    parse_date,
    recognize,
)
from .spans import resolve_overlaps, to_bio

__all__ = [
    "AutoAnnotator",
    "AnnotatedDoc",
    "AnnotationEval",
    "evaluate_annotation",
    "degrade_fields",
    "name_variants",
    "NICKNAMES",
    "UnmatchedFieldWarning",
    "validate_fields",
]

NAME_LABELS = ("PERSON", "NAME")

#: formal first name -> common nicknames (used both ways)
NICKNAMES: dict[str, tuple[str, ...]] = {
    "William": ("Bill", "Will", "Billy", "Liam"),
    "Robert": ("Bob", "Rob", "Bobby", "Robbie"),
    "Richard": ("Rick", "Rich", "Dick", "Richie"),
    "James": ("Jim", "Jimmy", "Jamie"),
    "John": ("Jack", "Johnny"),
    "Michael": ("Mike", "Mikey"),
    "Joseph": ("Joe", "Joey"),
    "Thomas": ("Tom", "Tommy"),
    "Christopher": ("Chris",),
    "Daniel": ("Dan", "Danny"),
    "Matthew": ("Matt",),
    "Anthony": ("Tony",),
    "Donald": ("Don", "Donnie"),
    "Steven": ("Steve",),
    "Stephen": ("Steve",),
    "Andrew": ("Andy", "Drew"),
    "Joshua": ("Josh",),
    "Kenneth": ("Ken", "Kenny"),
    "Timothy": ("Tim", "Timmy"),
    "Jeffrey": ("Jeff",),
    "Ronald": ("Ron", "Ronnie"),
    "Edward": ("Ed", "Eddie", "Ted"),
    "Jonathan": ("Jon",),
    "Nicholas": ("Nick",),
    "Benjamin": ("Ben", "Benny"),
    "Samuel": ("Sam", "Sammy"),
    "Gregory": ("Greg",),
    "Alexander": ("Alex",),
    "Patrick": ("Pat",),
    "Jennifer": ("Jen", "Jenny"),
    "Elizabeth": ("Liz", "Beth", "Betty", "Lizzie"),
    "Patricia": ("Pat", "Patty"),
    "Margaret": ("Maggie", "Peggy", "Meg"),
    "Susan": ("Sue", "Susie"),
    "Jessica": ("Jess", "Jessie"),
    "Katherine": ("Kate", "Kathy", "Katie"),
    "Catherine": ("Cathy", "Kate"),
    "Kimberly": ("Kim",),
    "Rebecca": ("Becky",),
    "Deborah": ("Debbie", "Deb"),
    "Christina": ("Tina", "Chris"),
    "Christine": ("Chris",),
    "Samantha": ("Sam",),
    "Stephanie": ("Steph",),
    "Victoria": ("Vicky", "Tori"),
    "Alexandra": ("Alex",),
    "Pamela": ("Pam",),
    "Cynthia": ("Cindy",),
    "Jacqueline": ("Jackie",),
    "Barbara": ("Barb",),
    "Amanda": ("Mandy",),
    "Melissa": ("Mel", "Missy"),
    "Theresa": ("Terry", "Tess"),
    "Gabriel": ("Gabe",),
    "Zachary": ("Zach",),
    "Nathan": ("Nate",),
    "Nathaniel": ("Nate",),
    "Jacob": ("Jake",),
    "Raymond": ("Ray",),
    "Lawrence": ("Larry",),
    "Frederick": ("Fred",),
    "Douglas": ("Doug",),
    "Gerald": ("Jerry",),
    "Phillip": ("Phil",),
    "Charles": ("Charlie", "Chuck"),
    "David": ("Dave",),
    "Anne": ("Annie",),
    "Jeremy": ("Jerry",),
    "Vincent": ("Vince",),
    "Mitchell": ("Mitch",),
    "Bradley": ("Brad",),
    "Cameron": ("Cam",),
    "Abigail": ("Abby",),
    "Allison": ("Ally",),
    "Angela": ("Angie",),
    "Valerie": ("Val",),
    "Veronica": ("Ronnie",),
    "Natalie": ("Nat",),
    "Jonathon": ("Jon",),
    "Kathleen": ("Kathy", "Kate"),
    "Sandra": ("Sandy",),
    "Gary": ("Gar",),
    "Frank": ("Frankie",),
    "Anthonia": ("Toni",),
    "Madison": ("Maddie",),
    "Courtney": ("Court",),
    "Tiffany": ("Tiff",),
}
_NICK_INDEX: dict[str, set[str]] = {}
for _f, _ns in NICKNAMES.items():
    _grp = {_f, *_ns}
    for _n in _grp:
        _NICK_INDEX.setdefault(_n.lower(), set()).update(_grp)


class UnmatchedFieldWarning(UserWarning):
    """A known field was found nowhere in its document (or the fields do not fit the documents)."""


def validate_fields(fields: Any, where: str = "fields") -> dict[str, tuple[str, ...]]:
    """``{label: [values]}`` with string values; a bare string value is accepted as one value."""
    if fields is None:
        return {}
    if not isinstance(fields, Mapping):
        raise MalformedInput(
            f"{where} must map a label (PERSON, DATE, ...) to a list of values; got "
            f"{type(fields).__name__}"
        )
    out: dict[str, tuple[str, ...]] = {}
    for lab, vals in fields.items():
        if not isinstance(lab, str) or not lab.strip():
            raise MalformedInput(f"{where}: labels must be non-empty strings; got {lab!r}")
        if isinstance(vals, str):
            vals = [vals]
        if not isinstance(vals, (list, tuple)):
            raise MalformedInput(
                f"{where}[{lab!r}] must be a list of strings; got {type(vals).__name__}"
            )
        clean = []
        for v in vals:
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                raise MalformedInput(
                    f"{where}[{lab!r}] holds a {type(v).__name__}; values must be strings"
                )
            v = str(v).strip()
            if v:
                clean.append(v)
        out[lab.strip().upper()] = tuple(dict.fromkeys(clean))
    return out


def _split_name(value: str) -> tuple[str, tuple[str, ...], str]:
    v = " ".join(value.split())
    if "," in v:  # "Doe, Jane" (reordered as databases often store it)
        last, _, first = v.partition(",")
        parts = first.split() + last.split()
    else:
        parts = v.split()
    if len(parts) == 1:
        return parts[0], (), ""
    return parts[0], tuple(parts[1:-1]), parts[-1]


def name_variants(
    value: str, *, nicknames: bool = True, initials: bool = True, partial: bool = True
) -> list[tuple[str, float]]:
    """``(variant, score)`` for a known name: full, reordered, initial + last, first / last alone, nicknames.

    Args:
        value: a known name (``"First Middle Last"`` or ``"Last, First"``).
        nicknames: add nickname forms of the first name (score 0.9).
        initials: add ``"J. Doe"``-style forms.
        partial: add the first or last name alone.

    Returns:
        Distinct ``(variant, score)`` pairs, score in (0, 1] (how sure a match of the variant is).
    """
    first, middle, last = _split_name(value)
    firsts = [first] + (
        sorted(_NICK_INDEX.get(first.lower(), set()) - {first}) if nicknames else []
    )
    out: list[tuple[str, float]] = []
    for i, f in enumerate(firsts):
        s = 1.0 if i == 0 else 0.9
        if last:
            out += [(f"{f} {last}", s), (f"{last}, {f}", s * 0.95)]
            if middle:
                out.append((" ".join([f, *middle, last]), s))
        if partial or not last:
            out.append((f, s * 0.85))
    if last:
        if initials:
            out += [
                (f"{first[0]}. {last}", 0.9),
                (f"{first[0]} {last}", 0.85),
                (f"{first} {last[0]}.", 0.85),
            ]
        if partial:
            out.append((last, 0.85))
    return list(dict.fromkeys(out))


def _word_re(variant: str, ignore_case: bool) -> re.Pattern:
    body = r"\s+".join(re.escape(p) for p in variant.split())
    return re.compile(r"(?<![\w@.])" + body + r"(?![\w@]|\.\w)", re.I if ignore_case else 0)


@dataclass(frozen=True)
class AnnotatedDoc:
    """A document's automatically located PII and the known values found nowhere in it.

    Attributes:
        text: the document.
        spans: the located PII spans.
        unmatched: ``(label, value)`` known values found nowhere in the text.
    """

    text: str
    spans: tuple[PIISpan, ...]
    unmatched: tuple[tuple[str, str], ...] = ()

    def tokens_and_tags(self) -> tuple[list[str], list[str]]:
        return to_bio(self.text, self.spans)


class AutoAnnotator:
    """Locate known PII fields in a document (paper §2.2) and return non-overlapping spans.

    Args:
        fuzzy_threshold: rapidfuzz ratio a candidate phrase needs to match a field variant, in [50, 100].
        nicknames / initials / partial_names: which name variants are searched.
        patterns: also tag every date / phone / SSN / e-mail the regex recognizers find, known or not
            (structured PII that the fields do not list; off in the paper's setting).
        shared_names: in :meth:`annotate_records`, a name known for *any* record (the institution's whole
            database) is tagged wherever it occurs, first / last name alone included (exact, case-sensitive).
    """

    def __init__(
        self,
        fuzzy_threshold: float = 85.0,
        nicknames: bool = True,
        initials: bool = True,
        partial_names: bool = True,
        patterns: bool = False,
        shared_names: bool = False,
    ) -> None:
        check_range("fuzzy_threshold", fuzzy_threshold, 50.0, 100.0)
        self.fuzzy_threshold = fuzzy_threshold
        self.nicknames = nicknames
        self.initials = initials
        self.partial_names = partial_names
        self.patterns = patterns
        self.shared_names = shared_names

    # ------------------------------------------------------------------------------------------
    def annotate(
        self, text: str, fields: Mapping[str, Sequence[str]] | None, _extra: Any = None
    ) -> AnnotatedDoc:
        if not isinstance(text, str):
            raise MalformedInput(f"text must be a string; got {type(text).__name__}")
        fields = validate_fields(fields)
        cands: list[PIISpan] = []
        unmatched: list[tuple[str, str]] = []
        if not text.strip():
            return AnnotatedDoc(text, (), tuple((lab, v) for lab, vs in fields.items() for v in vs))
        for lab, values in fields.items():
            for v in values:
                found = self._match(text, lab, v)
                if not found:
                    unmatched.append((lab, v))
                cands.extend(found)
        if _extra is not None:
            cands.extend(
                PIISpan(m.start(), m.end(), "PERSON", 0.4, "shared-name")
                for m in _extra.finditer(text)
            )
        if self.patterns:
            cands.extend(
                PIISpan(s.start, s.end, s.label, 0.5, "pattern")
                for s in recognize(text, ("EMAIL", "PHONE", "SSN", "DATE"))
            )
        return AnnotatedDoc(text, tuple(resolve_overlaps(cands)), tuple(unmatched))

    def _match(self, text: str, label: str, value: str) -> list[PIISpan]:
        if label in NAME_LABELS:
            return self._names(text, label, value)
        if label == "DATE":
            return self._dates(text, label, value)
        if label in ("PHONE", "SSN", "ID") or (
            digits(value)
            and len(digits(value)) >= 7
            and len(digits(value)) >= 0.7 * len(value.replace(" ", ""))
        ):
            return self._digits(text, label, value)
        if label == "EMAIL":
            return self._emails(text, label, value)
        return self._free(text, label, value)

    def _names(self, text: str, label: str, value: str) -> list[PIISpan]:

        out: list[PIISpan] = []
        variants = name_variants(
            value, nicknames=self.nicknames, initials=self.initials, partial=self.partial_names
        )
        for var, score in variants:
            multi = len(var.split()) > 1
            for m in _word_re(var, ignore_case=multi).finditer(text):
                out.append(PIISpan(m.start(), m.end(), label, score, "name"))
        # fuzzy: capitalised token n-grams not covered by an exact match
        choices = [v for v, _ in variants if len(v) >= 5 and (len(v.split()) > 1 or not out)]
        if not choices:
            return out
        toks = [t for t in tokenize(text)]
        for n in (3, 2, 1):
            for i in range(len(toks) - n + 1):
                seg = toks[i : i + n]
                if not seg[0][0][:1].isupper() or not seg[-1][0][:1].isalpha():
                    continue
                a, b = seg[0][1], seg[-1][2]
                if any(a < s.end and s.start < b and s.end - s.start >= b - a for s in out):
                    continue  # an exact match at least as long covers it
                phrase = text[a:b]
                if len(phrase) < 4:
                    continue
                hit = process.extractOne(
                    phrase,
                    choices,
                    scorer=fuzz.ratio,
                    processor=str.lower,
                    score_cutoff=self.fuzzy_threshold,
                )
                if hit is not None and (n > 1) == (len(hit[0].split()) > 1):
                    out.append(PIISpan(a, b, label, 0.8 * hit[1] / 100.0, "name-fuzzy"))
        return out

    def _dates(self, text: str, label: str, value: str) -> list[PIISpan]:
        try:
            known = {_dt.date.fromisoformat(value.strip()[:10])}
        except ValueError:
            known = set(parse_date(value))
        if not known:
            warnings.warn(
                f"known DATE value {value!r} is not a date in a format privnlp parses "
                "(ISO, 05/30/2001, May 30, 2001, 30 May 2001, ...): it is searched as plain text",
                UnmatchedFieldWarning,
                stacklevel=4,
            )
            return self._free(text, label, value)
        return [
            PIISpan(a, b, label, 1.0, "date")
            for a, b, ds in _date_candidates(text)
            if known & set(ds)
        ]

    def _digits(self, text: str, label: str, value: str) -> list[PIISpan]:
        want = digits(value)
        if len(want) < 4:
            return self._free(text, label, value)
        cands = (
            find_phones(text)
            + find_ssns(text)
            + [
                PIISpan(m.start(), m.end(), label)
                for m in re.finditer(r"(?<![\w-])\d[\d\s().-]{5,}\d(?![\w-])", text)
            ]
        )
        out = []
        for c in cands:
            got = digits(text[c.start : c.end])
            if (
                got == want
                or (len(want) >= 10 and got[-10:] == want[-10:])
                or (len(got) >= 10 and got[-10:] == want[-10:])
            ):
                out.append(PIISpan(c.start, c.end, label, 1.0, "digits"))
        return out

    def _emails(self, text: str, label: str, value: str) -> list[PIISpan]:

        out = []
        for c in find_emails(text):
            got = text[c.start : c.end].lower()
            r = fuzz.ratio(got, value.lower())
            if r >= self.fuzzy_threshold:
                out.append(PIISpan(c.start, c.end, label, r / 100.0, "email"))
        return out

    def _free(self, text: str, label: str, value: str) -> list[PIISpan]:

        multi = len(value.split()) > 1 or not value[:1].isalpha()
        out = [
            PIISpan(m.start(), m.end(), label, 1.0, "exact")
            for m in _word_re(value, ignore_case=multi).finditer(text)
        ]
        if out or len(value) < 6:
            return out
        al = fuzz.partial_ratio_alignment(
            value.lower(), text.lower(), score_cutoff=self.fuzzy_threshold
        )
        if al is None:
            return out
        a, b = al.dest_start, al.dest_end
        toks = tokenize(text)
        inside = [t for t in toks if t[1] < b and a < t[2]]
        while inside and not inside[-1][0][-1:].isalnum():
            inside.pop()
        while inside and not inside[0][0][:1].isalnum():
            inside.pop(0)
        if not inside:
            return out
        a, b = inside[0][1], inside[-1][2]
        if fuzz.ratio(text[a:b].lower(), value.lower()) >= self.fuzzy_threshold:
            out.append(PIISpan(a, b, label, al.score / 100.0, "fuzzy"))
        return out

    # ------------------------------------------------------------------------------------------
    def annotate_records(
        self, records: Sequence[Any], known_fields: Mapping[str, Any], *, missing: str = "warn"
    ) -> list[AnnotatedDoc]:
        """Annotate corpus records (``.id``, ``.text``) with ``known_fields[record.id]``.

        ``missing``: what to do when a record has no entry (``"warn"``: annotate with no fields and warn
        once; ``"error"``: raise :class:`MalformedInput`). Known ids that match no record are reported too.
        """
        if missing not in ("warn", "error"):
            raise MalformedInput(f"missing must be 'warn' or 'error'; got {missing!r}")
        ids = [str(r.id) for r in records]
        absent = [i for i in ids if i not in known_fields]
        extra = sorted(set(map(str, known_fields)) - set(ids))
        if absent and missing == "error":
            raise MalformedInput(
                f"known fields missing for {len(absent)} of {len(ids)} documents "
                f"(first: {absent[:3]}); the known-fields file does not match the documents"
            )
        if absent or extra:
            warnings.warn(
                f"known fields: {len(absent)} of {len(ids)} documents have no entry (first: {absent[:3]}), "
                f"{len(extra)} entries match no document (first: {extra[:3]}); documents without fields "
                "get no auto-annotation (kept, not dropped)",
                UnmatchedFieldWarning,
                stacklevel=2,
            )
        gaz = None
        if self.shared_names:
            names: set[str] = set()
            for f in known_fields.values():
                for lab, vals in validate_fields(f).items():
                    if lab in NAME_LABELS:
                        for v in vals:
                            first, _, last = _split_name(v)
                            names.update(
                                x for x in (f"{first} {last}".strip(), first, last) if len(x) >= 2
                            )
            if names:
                alt = "|".join(
                    re.escape(n).replace(r"\ ", r"\s+")
                    for n in sorted(names, key=len, reverse=True)
                )
                gaz = re.compile(r"(?<![\w@.])(?:" + alt + r")(?![\w@]|\.\w)")
        docs = [self.annotate(r.text, known_fields.get(str(r.id)), gaz) for r in records]
        n_fields = sum(
            len(v) for r in records for v in validate_fields(known_fields.get(str(r.id))).values()
        )
        n_un = sum(len(d.unmatched) for d in docs)
        if n_fields and n_un == n_fields:
            warnings.warn(
                f"none of the {n_fields} known field values was found in its document: the fields probably "
                "belong to other documents (check the ids)",
                UnmatchedFieldWarning,
                stacklevel=2,
            )
        return docs


@dataclass(frozen=True)
class AnnotationEval:
    """Noisy labels vs gold: the paper's four schemes, strict F1 per label, counts."""

    metrics: Any  # privnlp.metrics.ner.SpanMetrics
    by_label: Mapping[str, float]
    n_docs: int
    n_gold: int
    n_pred: int
    unmatched_fraction: float
    config: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.metrics.to_dict(),
            "by_label_strict_f1": dict(self.by_label),
            "n_docs": self.n_docs,
            "n_gold": self.n_gold,
            "n_pred": self.n_pred,
            "unmatched_fraction": self.unmatched_fraction,
            "config": dict(self.config),
        }

    def to_markdown(self, title: str = "auto-annotation") -> str:
        m = self.metrics
        rows = [
            f"| {title} | "
            + " | ".join(
                f"{getattr(m, s).precision:.2f} / {getattr(m, s).recall:.2f} / "
                f"{getattr(m, s).f1:.2f}"
                for s in ("strict", "exact", "type", "partial")
            )
            + " |"
        ]
        return (
            "| labels | strict P/R/F1 | exact P/R/F1 | type P/R/F1 | partial P/R/F1 |\n|---|---|---|---|---|\n"
            + "\n".join(rows)
        )


def _spans_of(d: Any) -> list[tuple[int, int, str]]:
    return [(int(s.start), int(s.end), str(s.label)) for s in d]


def evaluate_annotation(
    records: Sequence[Any],
    known_fields: Mapping[str, Any],
    annotator: AutoAnnotator | None = None,
    *,
    docs: Sequence[AnnotatedDoc] | None = None,
) -> AnnotationEval:
    """Score the auto-annotation of ``records`` against their gold ``spans`` (strict / exact / type / partial).

    Args:
        records: records with gold ``spans`` (``.id``, ``.text``).
        known_fields: record id -> {label: [values]}.
        annotator: the annotator (default: ``AutoAnnotator()``).
        docs: already annotated documents, aligned with ``records`` (skips annotation).

    Returns:
        Span metrics overall and strict F1 per label, the counts, and the fraction of known values found nowhere.

    Raises:
        MalformedInput: ``known_fields`` entries that are not label -> list of strings.
    """

    annotator = annotator or AutoAnnotator()
    if docs is None:
        docs = annotator.annotate_records(records, known_fields)
    gold = [_spans_of(r.spans) for r in records]
    pred = [_spans_of(d.spans) for d in docs]
    m = ner_span_metrics(gold, pred)
    labels = sorted({s[2] for d in gold for s in d} | {s[2] for d in pred for s in d})
    by = {}
    for lab in labels:
        g = [[s for s in d if s[2] == lab] for d in gold]
        p = [[s for s in d if s[2] == lab] for d in pred]
        by[lab] = float(ner_span_metrics(g, p).strict.f1)
    n_fields = sum(
        len(v) for r in records for v in validate_fields(known_fields.get(str(r.id))).values()
    )
    return AnnotationEval(
        m,
        by,
        len(records),
        sum(map(len, gold)),
        sum(map(len, pred)),
        (sum(len(d.unmatched) for d in docs) / n_fields) if n_fields else 0.0,
        {k: v for k, v in vars(annotator).items()},
    )


# ---------------------------------------------------------------------------------------------- degraded
_KEYB = "qwertyuiopasdfghjklzxcvbnm"


def _typo(s: str, g) -> str:
    idx = [i for i, c in enumerate(s) if c.isalpha()]
    if len(idx) < 4:
        return s
    i = int(idx[int(g.integers(1, len(idx) - 1))])
    c = s[i]
    k = _KEYB.find(c.lower())
    rep = _KEYB[(k + 1) % len(_KEYB)] if k >= 0 else "e"
    kind = int(g.integers(0, 3))
    if kind == 0:
        return s[:i] + (rep.upper() if c.isupper() else rep) + s[i + 1 :]  # substitution
    if kind == 1:
        return s[:i] + s[i + 1 :]  # deletion
    return (
        s[:i] + s[i + 1 : i + 2] + s[i] + s[i + 2 :]
        if i + 1 < len(s) and s[i + 1].isalpha()
        else s[:i] + s[i + 1 :]
    )


def degrade_fields(
    known_fields: Mapping[str, Mapping[str, Sequence[str]]],
    *,
    p_typo: float = 0.3,
    p_nickname: float = 0.5,
    p_reorder: float = 0.3,
    p_reformat: float = 0.5,
    rng: Any,
) -> dict[str, dict[str, list[str]]]:
    """A noisier copy of the known fields, as real databases hold them: nicknames (``Bill`` for ``William``)
    and typos in names and addresses, reordered names (``Doe, Jane``), dates and phones in other formats.
    The documents and their gold spans are unchanged; only what the annotator is told degrades.

    Args:
        known_fields: record id -> {label: [values]}.
        p_typo: the probability of a typo in a last name, address or organisation, in [0, 1].
        p_nickname: the probability that a first name with a nickname is replaced by it, in [0, 1].
        p_reorder: the probability that a name is written ``"Last, First"``, in [0, 1].
        p_reformat: the probability that a date / phone is written in another format, in [0, 1].
        rng: randomness (keyword-only).

    Returns:
        The degraded copy (record id -> {label: [values]}).

    Raises:
        MalformedInput: malformed ``known_fields``.
    """
    g = as_numpy(rng)
    out: dict[str, dict[str, list[str]]] = {}
    for rid in sorted(known_fields):
        f = validate_fields(known_fields[rid], where=f"known_fields[{rid!r}]")
        new: dict[str, list[str]] = {}
        for lab, vals in f.items():
            nv = []
            for v in vals:
                if lab in NAME_LABELS:
                    first, middle, last = _split_name(v)
                    if first.lower() in _NICK_INDEX and g.random() < p_nickname:
                        alts = sorted(_NICK_INDEX[first.lower()] - {first})
                        first = alts[int(g.integers(0, len(alts)))]
                    if last and g.random() < p_typo:
                        last = _typo(last, g)
                    v = (
                        f"{last}, {' '.join([first, *middle])}"
                        if last and g.random() < p_reorder
                        else " ".join(x for x in [first, *middle, last] if x)
                    )
                elif lab == "DATE" and g.random() < p_reformat:
                    try:
                        v = _dt.date.fromisoformat(v[:10]).strftime("%m/%d/%Y")
                    except ValueError:
                        pass
                elif lab == "PHONE" and g.random() < p_reformat:
                    d = digits(v)
                    v = f"({d[-10:-7]}) {d[-7:-4]}-{d[-4:]}" if len(d) >= 10 else v
                elif lab in ("ADDRESS", "ORG") and g.random() < p_typo:
                    v = _typo(v, g)
                nv.append(v)
            new[lab] = nv
        out[rid] = new
    return out
