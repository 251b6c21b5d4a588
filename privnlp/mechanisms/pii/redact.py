"""Redaction of PII: typed placeholders or consistent surrogates, from a tagger + regex recognizers
(+ known fields when the user has them).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` (the PII tagger trained on noisy labels
is what finds the mentions). Spans are reported in Presidio's shape (``entity_type``, ``start``, ``end``,
``score``) so results can be compared with Presidio's analyzer.

* ``mode="placeholder"``: every mention becomes its type in brackets, the same name the spans carry
  (``[PERSON]``, ``[DATE]``, ``[EMAIL]`` ...);
* ``mode="surrogate"``: every mention becomes a keyed pseudonym of the same type, format and locale
  (:class:`~.surrogates.Surrogates`: HMAC-SHA256 with a secret key, so the same entity maps to the same
  surrogate across a corpus and runs that share the key; a first or last name alone maps to the first /
  last name of the full name's surrogate).

Spans are chosen in priority order, one per identifier: known fields (the user's own list), then the
recognizers (checksummed formats first), then the tagger; a tagger span that overlaps a recognizer span
is dropped, and tagger spans are cut at separators (``—``, ``|``, ``;``, ``:``, brackets) so the text
around an identifier keeps its punctuation and its non-PII words.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm
from wordfreq import zipf_frequency

from privnlp.core.errors import InvalidArgument, MalformedInput
from privnlp.core.report import atomic_write_text

from .annotate import AutoAnnotator, validate_fields
from .context import fold
from .recognizers import RECOGNIZER_LABELS, digits, is_system_account, recognize
from .spans import Occupancy, merge_for_redaction
from .surrogates import Surrogates
from .types import PIISpan

__all__ = [
    "PIIRedactor",
    "RedactionResult",
    "RedactionSummary",
    "redact_file",
    "PLACEHOLDERS",
    "MODES",
]

MODES = ("placeholder", "surrogate")
PLACEHOLDERS: dict[str, str] = {"NAME": "[PERSON]"}
REGEX_LABELS = RECOGNIZER_LABELS
#: types taken from the tagger: those no format recognizer can find (the recognizers validate the
#: structured ones exactly; a tagger's guess at an IP or a date is a second, worse opinion)
TAGGER_LABELS = frozenset({"PERSON", "NAME", "LOC", "ADDRESS", "USERNAME", "ORG"})
#: PII types something in the pipeline can find (recognizers + tagger); others only from known fields
DETECTABLE = frozenset(RECOGNIZER_LABELS) | {"PERSON", "NAME", "LOC", "ADDRESS"}
_CUT = frozenset('—–|;:()[]{}<>"\n')


@dataclass(frozen=True)
class RedactionResult:
    """The redacted text, the detected spans (offsets in the *input* text) and what replaced each.

    Attributes:
        text: the redacted text.
        spans: the detected PII spans, offsets in the input text.
        replacements: ``(original, replacement, label)`` per replaced mention.
    """

    text: str
    spans: tuple[PIISpan, ...]
    replacements: tuple[tuple[str, str, str], ...] = ()  # (original, replacement, label)

    def presidio(self) -> list[dict]:
        return [s.to_presidio() for s in self.spans]

    def counts(self) -> dict[str, int]:
        return dict(Counter(s.label for s in self.spans))


def _norm(label: str, s: str) -> str:
    if label in ("PHONE", "SSN", "CREDIT_CARD"):
        return label + ":" + digits(s)
    return label + ":" + " ".join(s.lower().replace("'s", "").split())


#: a piece left over from a tagger span that is no PII of its own: a unit / flat designator, a state code
_LEFTOVER_NOISE = re.compile(
    r"(?:(?:apt|apartment|flat|unit|suite|ste|piso|wohnung|app|appt|bus)\.?\s*\w{1,5}|"
    r"[A-Z]{2,3}|[\W\d_]*)",
    re.I,
)
_STATE_TAIL = re.compile(r"[ \t]+(?:[A-Z]{2}|NSW|VIC|QLD|TAS|ACT)$")

# issue 32, fourth round: a name the tagger found in part is widened over its particles and its quoted
# nickname. ``Lucía Fernández`` + `` de la Fuente``, ``Ruud`` + `` van der Linden``, ``Jean du Plessis``,
# ``Niamh Ó Súilleabháin``; ``Mackenzie "Mac" Brennan`` (the nickname and the surname after it).
_NCAP = r"[A-ZÀ-ÞŁŚŻŹĆŃ][\w'’]*(?:-[A-ZÀ-ÞŁŚŻŹĆŃ][\w'’]*)*"
_PARTICLE = (
    r"(?:van\s+der|van\s+den|van\s+de|von\s+der|de\s+la|de\s+las|de\s+los|de|del|della|"
    r"da|das|do|dos|di|du|van|von|le|la|Ó|Ní|Nic|Mac|Mc|ter|ten|zu)"
)
_PARTICLE_NAME = re.compile(
    rf"{_NCAP}(?:[ \t]+{_NCAP})*(?:[ \t]+{_PARTICLE}[ \t]+{_NCAP}(?:[ \t]+{_NCAP})?)+"
)
_NICK_NAME = re.compile(rf"{_NCAP}[ \t]+[\"“'‘]{_NCAP}[\"”'’][ \t]+{_NCAP}")

# a name written in capitals after a name label or a greeting ("Nom de naissance : DUPONT", "Ordenante: JUAN
# PÉREZ GIL", "Dear PRIYA S"): bank messages and forms write names so, and the tagger's case features miss them
# (not after a hyphen: Debian's "Upstream-Name: LIBFOO")
_CAPS_NAME = re.compile(
    r"(?:(?<![\w-])(?:Dear|Ordenante|Beneficiario|Titular|Nom(?: de naissance| d'usage| de famille)?|Pr[ée]nom\(?s?\)?|"
    r"Name|Surname|Family\s+name|Nombre|Apellidos?|Nachname|Vorname|Cognome|Nome|Naam|Achternaam)"
    r"[ \t]*:?[ \t]*)"
    r"((?:[A-ZÀ-ÞŁŚŻŹĆŃ]\.?[ \t]+)?[A-ZÀ-ÞŁŚŻŹĆŃ]{2,}[A-ZÀ-ÞŁŚŻŹĆŃ'’-]*"
    r"(?:[ \t]+(?:[A-ZÀ-ÞŁŚŻŹĆŃ]{2,}[A-ZÀ-ÞŁŚŻŹĆŃ'’-]*|[A-ZÀ-ÞŁŚŻŹĆŃ]\.?))*)(?![\w'’-])"
)


def _caps_names(text: str) -> list[PIISpan]:
    """PERSON spans for names in capitals after a name label or ``Dear`` (see ``_CAPS_NAME``): at least one
    word of four letters or more, and not all such words ordinary English words (``Dear CUSTOMER SERVICE``)."""
    out = []
    for m in _CAPS_NAME.finditer(text):
        long = [w for w in re.findall(r"[^\W\d_]{4,}", m.group(1))]
        if long and not all(zipf_frequency(w.lower(), "en") >= 4.0 for w in long):
            out.append(PIISpan(m.start(1), m.end(1), "PERSON", 0.8, "rule"))
    return out


# a title, then (initials and) a name particle and a surname: "Hr. von Albrecht", "mevr. J. van der Meulen",
# "Dr. de la Cruz" (the context rules start a name at a capitalised word, so a particle after the title is lost)
_TITLE_PARTICLE = re.compile(
    r"(?<![\w-])(?:Hr\.|Fr\.|(?:Herr|Herrn|Frau|mevr|Mevr|dhr|Dhr|Mr|Mrs|Ms|Dr|Prof|Mme|Sr|Sra|Srta|Dott|sig\.ra)\.?)"
    r"[ \t]+((?:[A-Z]\.[ \t]?)*" + _PARTICLE + r"[ \t]+" + _NCAP + r")"
)


def _title_particle_names(text: str) -> list[PIISpan]:
    """PERSON spans for a particle surname after a title (see ``_TITLE_PARTICLE``)."""
    return [
        PIISpan(m.start(1), m.end(1), "PERSON", 0.8, "rule") for m in _TITLE_PARTICLE.finditer(text)
    ]


def _widen_persons(
    text: str, spans: list[PIISpan], taken: Sequence[PIISpan], town: Callable[[str], bool]
) -> list[PIISpan]:
    """Widen each PERSON span to a particle name or a name with a quoted nickname that it overlaps (on
    one line), unless the wider span would run into a span already taken (a recognizer's) or the words
    after the particle are a known town (``Pedro de Madrid`` is Pedro from Madrid)."""
    wide = [
        (m.start(), m.end(), pat is _NICK_NAME)
        for pat in (_PARTICLE_NAME, _NICK_NAME)
        for m in pat.finditer(text)
    ]
    out = []
    for sp in spans:
        if sp.label == "PERSON":
            for a, b, nick in wide:
                if not (a < sp.end and sp.start < b) or (a >= sp.start and b <= sp.end):
                    continue
                # a particle name only grows to the right: the capitalised words before a name are as
                # often a title or a heading ("Customer", "Dear Ms", "Trattoria da Nino")
                a, b = (min(a, sp.start) if nick else sp.start), max(b, sp.end)
                if (a, b) == (sp.start, sp.end):
                    continue
                if any(t.start < b and a < t.end for t in taken):
                    continue
                tail = re.split(rf"[ \t]{_PARTICLE}[ \t]", text[a:b])[-1]
                if town(tail) or all(town(w) for w in tail.split()):
                    continue
                sp = PIISpan(a, b, sp.label, sp.score, sp.source)
        out.append(sp)
    return out


#: words a PERSON span never starts with (greetings and honorifics of the supported languages, beyond the CRF's
#: own list): a greeting or title before a name stays outside the span, as in the annotation table
_LEAD_WORDS = frozenset(
    "dear hi hello hey hiya hola buenas bonjour salut coucou hallo moin servus ciao gentile beste lieve olá ola "
    "oi querido querida estimado estimada liebe lieber grüezi grüß grüss kære kjære hej hei moi dragă stimate "
    "stimată drogi droga szanowny szanowna sevgili merhaba sayın bayan geachte sehr geehrte geehrter herr frau "
    "herrn mr mrs ms miss mx dr prof sir sr sra srta doña dona dña mme mlle dott sig pan pani dhr mevr fru herra "
    "rouva ibu bapak pak kuya auntie aunty uncle gogo kyria kyrios kyrie".split()
)  # not "Don", "Cara", "Tito", "Bay": first names and surnames as often as titles (privacy first: kept whole)
#: all-caps form labels and codes that are never a name on their own (an id's label, a currency, a tax)
_LABEL_CODES = frozenset(
    "DOB ID BSN PPSN PPS SSN NIN NINO CPF CNP DNI NIE NIR NHS PIN IBAN BIC SWIFT VAT TIN PAN PAYE AUD USD EUR GBP "
    "CAD NZD ZAR SEK NOK DKK PLN TRY RON INR BRL MXN URL FAQ PDF DIAN RUT CURP RFC AHV AMKA TC CPR OIB".split()
)


def _tidy_persons(text: str, spans: list[PIISpan]) -> list[PIISpan]:
    """PERSON spans from every source (tagger, caps / title / particle rules, widening) cut at a column gap (two
    spaces or a tab: ``Ana Santos   CPF``), without leading greetings / titles (``Hola Mª José``,
    ``Grüezi Herr Rüegg``), and without pieces that are an all-caps form label (``BSN``, ``DOB``)."""
    out = []
    for sp in spans:
        if sp.label != "PERSON":
            out.append(sp)
            continue
        for m in re.finditer(r"\S+(?:[ ]\S+)*", text[sp.start : sp.end]):
            a, b = sp.start + m.start(), sp.start + m.end()
            while True:  # drop leading greeting / title words while a word is left after them
                w = re.match(r"[^\W\d_]+\.?,?[ ]+", text[a:b])
                if not w or w.group().strip(" .,").lower() not in _LEAD_WORDS:
                    break
                a += w.end()
            piece = text[a:b].strip(" ,;:")
            if not piece or piece in _LABEL_CODES:
                continue
            a = text.index(piece, a)
            out.append(PIISpan(a, a + len(piece), sp.label, sp.score, sp.source))
    return out


def _leftovers(
    text: str, span: PIISpan, taken: Sequence[PIISpan], town: Callable[[str], bool]
) -> list[PIISpan]:
    """What remains of a tagger span that overlaps recognizer spans (``48003 Bilbao`` around the
    postcode, ``3/45 Beach Rd, Mollymook NSW 2539`` around the address and the postcode): the pieces
    between them, cut at commas and line breaks, without unit designators (``Apt 3B``), acronyms and
    state codes; a piece with a digit is dropped (the recognizers own the identifiers). A piece next to a
    postcode, or a known ``town`` left of an ADDRESS span, is a town (LOC); other pieces of an ADDRESS
    span are dropped (a shop's name before its phone number)."""
    over = sorted((t for t in taken if t.overlaps(span)), key=lambda t: t.start)
    if not over:
        return [span]
    out: list[PIISpan] = []
    bounds, a = [], span.start
    for t in over:
        bounds.append((a, t.start))
        a = max(a, t.end)
    bounds.append((a, span.end))
    for x, y in bounds:
        for m in re.finditer(r"[^,\n/]+", text[x:y] if y > x else ""):
            piece = m.group().strip(" \t.-:;()")
            if not piece or _LEFTOVER_NOISE.fullmatch(piece) or any(c.isdigit() for c in piece):
                continue
            raw_end = x + m.start() + m.group().index(piece) + len(piece)
            piece = _STATE_TAIL.sub("", piece)
            if not piece[:1].isupper() or piece.isupper():
                continue
            start = x + m.start() + m.group().index(piece)
            near_pc = any(
                t.label == "POSTCODE" and (0 <= start - t.end <= 2 or 0 <= t.start - raw_end <= 2)
                for t in over
            )
            if span.label == "ADDRESS" and not (near_pc or town(piece)):
                continue
            label = "LOC" if span.label == "ADDRESS" or (near_pc and town(piece)) else span.label
            out.append(PIISpan(start, start + len(piece), label, span.score, span.source))
    return out


def _cut(text: str, span: PIISpan) -> list[PIISpan]:
    """A tagger span cut at separators, each piece trimmed to its first / last word character."""
    out, a = [], span.start
    for i in range(span.start, span.end + 1):
        if i == span.end or text[i] in _CUT or text[i : i + 2] == ", " and span.label != "ADDRESS":
            x, y = a, i
            while x < y and not text[x].isalnum():
                x += 1
            while y > x and not (text[y - 1].isalnum() or text[y - 1] == "."):
                y -= 1
            if y > x and any(c.isalnum() for c in text[x:y]):
                out.append(PIISpan(x, y, span.label, span.score, span.source))
            a = i + 1
    return out


class PIIRedactor:
    """Find PII (tagger + regex recognizers + known fields) and replace it.

    Args:
        tagger: a :class:`~privnlp.mechanisms.pii.tagger.PIITagger` (``None``: regex / known fields only).
        regex: run the regex recognizers (e-mail, phone, SSN, card numbers with Luhn, dates).
        mode: ``"placeholder"`` or ``"surrogate"``.
        annotator: an :class:`~privnlp.mechanisms.pii.AutoAnnotator` used when known fields are passed.
        labels: only these labels are redacted (default: all).
        placeholders: the placeholder per label (default ``[LABEL]``).
        key: the secret HMAC key of the surrogates (at least 16 bytes; default: a random key per redactor,
            so surrogates agree within this redactor's corpus only).
        min_score: tagger spans scored below this are not redacted (reported as warnings by
            :func:`redact_file`); 0 redacts every tagger span.
    """

    def __init__(
        self,
        tagger: Any = None,
        regex: bool = True,
        mode: str = "placeholder",
        annotator: Any = None,
        labels: Sequence[str] | None = None,
        placeholders: Mapping[str, str] | None = None,
        key: bytes | None = None,
        min_score: float = 0.0,
    ) -> None:
        if mode not in MODES:
            raise InvalidArgument(f"mode must be one of {MODES}; got {mode!r}")
        self.tagger = tagger
        self.regex = regex
        self.mode = mode
        self.annotator = annotator
        self.labels = None if labels is None else tuple(labels)
        self.placeholders = dict(PLACEHOLDERS if placeholders is None else placeholders)
        self.key = key
        self.min_score = min_score
        self._surrogates = Surrogates(key if key is not None else os.urandom(32))
        self._first_mention_only = False  # the leaky twin's bug (privnlp.mechanisms.pii.mechanism)

    def analyze(
        self, text: str, fields: Mapping[str, Sequence[str]] | None = None
    ) -> list[PIISpan]:
        """Merged, non-overlapping PII spans of ``text`` (Presidio's ``AnalyzerEngine.analyze`` analogue)."""
        if not isinstance(text, str):
            raise MalformedInput(f"text must be a string; got {type(text).__name__}")
        if not text.strip():
            return []
        occ = Occupancy()

        def add(cands: list[PIISpan]) -> None:
            for c in sorted(cands, key=lambda c: (-(c.end - c.start), c.start)):
                occ.try_add(c)

        if fields:
            known = list((self.annotator or AutoAnnotator()).annotate(text, fields).spans)
            add(merge_for_redaction(known))
        if self.regex:
            add(recognize(text, REGEX_LABELS))
        if self.tagger is not None:
            tag = [
                p
                for s in self.tagger.spans(text)
                if s.label in TAGGER_LABELS
                for p in _cut(text, s)
                if not (p.label == "USERNAME" and is_system_account(text[p.start : p.end]))
            ]
            rules = getattr(self.tagger, "rules", None)
            town = (lambda w: fold(w) in rules.towns) if rules is not None else (lambda w: False)
            taken = list(occ.spans)
            if self.regex:  # a tagger span over a recognizer's span keeps what lies beside it
                tag = [q for p in tag for q in _leftovers(text, p, taken, town)]
            tag = _tidy_persons(
                text,
                _widen_persons(
                    text, tag + _caps_names(text) + _title_particle_names(text), taken, town
                ),
            )
            add([s for s in tag if s.score >= self.min_score])
        kept = list(occ.spans)
        if self.labels is not None:
            kept = [s for s in kept if s.label in self.labels]
        return kept

    def redact(
        self, text: str, fields: Mapping[str, Sequence[str]] | None = None
    ) -> RedactionResult:
        """Replace every span of :meth:`analyze` by its placeholder / keyed surrogate; the text between
        spans (punctuation, line ends, non-PII words) is copied unchanged."""
        spans = self.analyze(text, fields)
        sur = self._surrogates if self.mode == "surrogate" else None
        pieces, pos, reps, seen = [], 0, [], set()
        kept: list[PIISpan] = []
        for s in spans:
            orig = text[s.start : s.end]
            key = _norm(s.label, orig)
            if self._first_mention_only and key in seen:
                continue
            seen.add(key)
            rep = (
                sur(s.label, orig)
                if sur is not None
                else self.placeholders.get(s.label, f"[{s.label}]")
            )
            pieces += [text[pos : s.start], rep]
            pos = s.end
            reps.append((orig, rep, s.label))
            kept.append(s)
        pieces.append(text[pos:])
        return RedactionResult("".join(pieces), tuple(kept), tuple(reps))

    def redact_many(
        self,
        texts: Sequence[str],
        fields: Sequence[Mapping[str, Sequence[str]] | None] | None = None,
        *,
        progress: bool = False,
    ) -> list[RedactionResult]:
        """Redact every text (surrogates are keyed, so they agree across the whole list)."""
        texts = list(texts)
        if fields is not None and len(fields) != len(texts):
            raise InvalidArgument(
                f"fields must hold one entry per text ({len(texts)}); got {len(fields)}"
            )
        it: Any = range(len(texts))
        if progress:
            it = tqdm(it, desc="redact", unit="doc")
        return [self.redact(texts[i], None if fields is None else fields[i]) for i in it]


# ------------------------------------------------------------------------------------------------ files
@dataclass(frozen=True)
class RedactionSummary:
    output: str
    sidecar: str
    n_documents: int
    n_empty: int
    counts: Mapping[str, int]
    spans_path: str | None = None
    warnings: tuple[str, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    low_confidence: tuple[tuple[int, int, int, str, float], ...] = ()
    texts: tuple[str, ...] = field(default=(), repr=False)  # in memory only (never in the sidecar)
    results: tuple[RedactionResult, ...] = field(default=(), repr=False)

    def least_sure(self, k: int = 10) -> list[tuple[int, str, float, str]]:
        """The ``k`` tagger spans with the lowest confidence: ``(document, type, score, text)``."""
        spans = [
            (i, s.label, float(s.score), self.texts[i][s.start : s.end])
            for i, r in enumerate(self.results)
            for s in r.spans
            if s.source.startswith("tagger")
        ]
        return sorted(spans, key=lambda x: x[2])[:k]

    def to_dict(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "spans": self.spans_path,
            "n_documents": self.n_documents,
            "n_empty": self.n_empty,
            "counts": dict(self.counts),
            "warnings": list(self.warnings),
            "low_confidence": [
                {"document": i, "start": a, "end": b, "type": t, "score": sc}
                for i, a, b, t, sc in self.low_confidence
            ],
            "config": dict(self.config),
        }


_EXT = {".txt": "txt", ".text": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}


@dataclass(frozen=True)
class _Layout:
    """What the output must reproduce of the input's bytes: a BOM, the line ends, a final newline."""

    bom: bool
    newline: str
    final_newline: bool
    line_ends: tuple[str, ...] = ()  # txt: each line's own end ("\r\n", "\n" or "")


def _read_raw(path: Path) -> tuple[str, _Layout]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidArgument(f"input: {path} does not exist") from None
    except IsADirectoryError:
        raise InvalidArgument(f"input: {path} is a directory, not a file") from None
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        raw = data[3 if bom else 0 :].decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedInput(
            f"input: {path} is not valid UTF-8 (byte {e.start}: {data[e.start : e.start + 4]!r}); "
            "convert it first, e.g. iconv -f latin1 -t utf-8"
        ) from None
    newline = "\r\n" if "\r\n" in raw else "\n"
    return raw, _Layout(bom, newline, raw.endswith("\n"))


def _read_rows(
    path: Path, fmt: str, field_: str | None
) -> tuple[list[Any], list[str], _Layout, Any]:
    raw, lay = _read_raw(path)
    if fmt == "txt":
        if field_ is not None:
            raise InvalidArgument("--field is not used for txt files (one document per line)")
        lines = raw.split("\n")
        ends = ["\n"] * (len(lines) - 1) + [""]
        if lines and lines[-1] == "":
            lines, ends = lines[:-1], ends[:-1]
        texts = []
        for i, t in enumerate(lines):
            if t.endswith("\r"):
                t, ends[i] = t[:-1], "\r" + ends[i]
            texts.append(t)
        return texts, texts, _Layout(lay.bom, lay.newline, lay.final_newline, tuple(ends)), None
    field_ = field_ or "text"
    if fmt == "jsonl":
        rows, texts = [], []
        for i, line in enumerate(raw.split("\n"), 1):
            line = line.rstrip("\r")
            if not line.strip():
                rows.append(None)
                texts.append("")
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise MalformedInput(f"{path}, line {i}: not JSON ({e.msg})") from None
            if not isinstance(obj, dict) or field_ not in obj:
                keys = sorted(obj)[:8] if isinstance(obj, dict) else type(obj).__name__
                raise MalformedInput(
                    f"{path}, line {i}: no field {field_!r} (keys: {keys}); pick it with --field"
                )
            if obj[field_] is not None and not isinstance(obj[field_], str):
                raise MalformedInput(
                    f"{path}, line {i}: field {field_!r} is a {type(obj[field_]).__name__}, not "
                    "text (nothing was written)"
                )
            rows.append(obj)
            texts.append(obj[field_] or "")
        if lay.final_newline and rows and rows[-1] is None:
            rows, texts = rows[:-1], texts[:-1]
        return rows, texts, lay, None
    reader = csv.DictReader(io.StringIO(raw, newline=""))
    if reader.fieldnames is None or field_ not in reader.fieldnames:
        raise MalformedInput(
            f"{path}: no column {field_!r} (columns: {reader.fieldnames}); pick it with --field"
        )
    rows = list(reader)
    return rows, [r[field_] or "" for r in rows], lay, reader.fieldnames


def _write_rows(
    path: Path,
    fmt: str,
    field_: str | None,
    rows: list[Any],
    new_texts: list[str],
    header: Any,
    lay: _Layout,
) -> None:
    bom = "\ufeff" if lay.bom else ""
    if fmt == "txt":
        atomic_write_text(path, bom + "".join(t + e for t, e in zip(new_texts, lay.line_ends)))
        return
    field_ = field_ or "text"
    if fmt == "jsonl":
        lines = []
        for row, t in zip(rows, new_texts):
            if row is None:
                lines.append("")
                continue
            row = dict(row)
            row[field_] = t if row[field_] is not None else None
            lines.append(json.dumps(row, ensure_ascii=False))
        body = lay.newline.join(lines) + (lay.newline if lay.final_newline else "")
        atomic_write_text(path, bom + body)
        return
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=header, lineterminator=lay.newline)
    w.writeheader()
    for row, t in zip(rows, new_texts):
        w.writerow({**row, field_: t})
    atomic_write_text(path, bom + buf.getvalue())


def load_known_fields(path: str | os.PathLike) -> dict[str, dict[str, list[str]]]:
    """A known-fields file: JSON ``{doc_id: {LABEL: [values]}}`` or JSONL rows ``{"id": ..., "fields": {...}}``
    (or ``{"id": ..., LABEL: [values], ...}``)."""

    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidArgument(f"known fields: {p} does not exist") from None
    raw_s = raw.strip()
    out: dict[str, dict[str, list[str]]] = {}
    if raw_s.startswith("{") and p.suffix.lower() == ".json":
        try:
            obj = json.loads(raw_s)
        except json.JSONDecodeError as e:
            raise MalformedInput(f"known fields: {p} is not JSON ({e.msg})") from None
        for k, v in obj.items():
            out[str(k)] = {a: list(b) for a, b in validate_fields(v, where=f"{p}[{k!r}]").items()}
        return out
    for i, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise MalformedInput(f"known fields: {p}, line {i}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict) or "id" not in obj:
            raise MalformedInput(
                f"known fields: {p}, line {i}: needs an 'id' key naming the document"
            )
        f = obj.get("fields", {k: v for k, v in obj.items() if k != "id"})
        out[str(obj["id"])] = {
            a: list(b) for a, b in validate_fields(f, where=f"{p}, line {i}").items()
        }
    return out


#: a tagger span whose calibrated confidence is below this is listed in the sidecar's warnings
LOW_CONFIDENCE = 0.5
#: common PII types; the sidecar warns about those nothing in the configured pipeline can find
STANDARD_TYPES = ("PERSON", "LOC", "ADDRESS", "EMAIL", "PHONE", "DATE", "POSTCODE", "USERNAME")


def _covered(redactor: PIIRedactor, known: bool) -> set[str]:
    cov: set[str] = set(REGEX_LABELS) if redactor.regex else set()
    tg = redactor.tagger
    if tg is not None:
        labs = getattr(tg, "labels", None)
        if labs is None and getattr(tg, "vocab", None) is not None:
            labs = {t[2:] for t in tg.vocab.tags if t != "O"}
        cov |= set(labs or ())
    return cov


def redact_file(
    input: str | os.PathLike,
    output: str | os.PathLike,
    *,
    field: str | None = None,
    fmt: str | None = None,
    redactor: PIIRedactor | None = None,
    known_fields: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    id_field: str = "id",
    spans_path: str | os.PathLike | None = None,
    progress: bool = False,
    seed: int | None = None,
) -> RedactionSummary:
    """Redact a txt (one document per line) / JSONL / CSV file; other columns / keys are kept as they are.

    Writes ``output`` atomically (a UTF-8 BOM, CRLF line ends and a missing final newline are reproduced),
    a sidecar ``OUTPUT.redaction.json`` (counts per type, warnings, config; never the PII itself) and, with
    ``spans_path``, one JSON line per document with its spans in Presidio's shape.
    ``known_fields``: ``{doc id: {LABEL: [values]}}``; documents are matched by ``id_field`` (JSONL / CSV) or by
    line number (``"1"``, ``"2"``, ... for txt). Documents without an entry are still redacted (tagger + regex).
    Nothing is written when the input cannot be read whole (bad UTF-8, a record without its field, a field
    that is not text).

    Args:
        input: the file to redact.
        output: where the redacted file is written (must differ from ``input``).
        field: the JSONL key / CSV column holding the text (default ``"text"``, as ``privnlp sanitize``).
        fmt: ``"txt"``, ``"jsonl"`` or ``"csv"`` (default: from the extension).
        redactor: the redactor (default: ``PIIRedactor()``, recognizers only).
        known_fields: ``{doc id: {LABEL: [values]}}`` (see above).
        id_field: the JSONL key / CSV column holding the document id.
        spans_path: also write the spans of every document here (JSON Lines).
        progress: show a progress bar.
        seed: deprecated and ignored (surrogates were seeded before issue 32; they are keyed now: pass
            ``PIIRedactor(mode="surrogate", key=...)``); a ``DeprecationWarning`` says so.

    Returns:
        The summary (counts per type, warnings, paths; ``texts`` / ``results`` for a report).

    Raises:
        InvalidArgument: ``output`` equals ``input``, an unknown ``fmt``, a missing ``input``, or ``field``
            given for txt.
        MalformedInput: the input cannot be parsed (a record without ``field``, bad JSON / CSV, not UTF-8).
    """
    if seed is not None:
        warnings.warn(
            "redact_file(seed=...) is ignored: surrogates are keyed (PIIRedactor(key=...))",
            DeprecationWarning,
            stacklevel=2,
        )
    inp, out = Path(input), Path(output)
    if inp.resolve() == out.resolve():
        raise InvalidArgument("output must differ from input (nothing is redacted in place)")
    fmt = fmt or _EXT.get(inp.suffix.lower())
    if fmt not in ("txt", "jsonl", "csv"):
        raise InvalidArgument(
            f"fmt must be txt, jsonl or csv (or use one of the extensions {sorted(_EXT)}); "
            f"got {fmt!r} for {inp}"
        )
    redactor = redactor or PIIRedactor()
    rows, texts, layout, header = _read_rows(inp, fmt, field)
    msgs: list[str] = []
    fields_list = None
    if known_fields is not None:
        if fmt == "txt":
            ids = [str(i + 1) for i in range(len(texts))]
        else:
            ids = [
                str(r.get(id_field))
                if r is not None and r.get(id_field) is not None
                else f"#{i + 1}"
                for i, r in enumerate(rows)
            ]
        fields_list = [known_fields.get(i) for i in ids]
        absent = sum(f is None for f in fields_list)
        extra = sorted(set(known_fields) - set(ids))
        if absent == len(ids) and known_fields:
            msgs.append(
                f"no document id matches the known-fields file (ids are read from {id_field!r}"
                f"{' = line numbers' if fmt == 'txt' else ''}; first known id: "
                f"{next(iter(known_fields))!r}): documents were redacted with the tagger / regex only"
            )
        elif absent or extra:
            msgs.append(
                f"known fields: {absent} documents have no entry, {len(extra)} entries match no "
                f"document (first: {extra[:3]})"
            )
    n_empty = sum(1 for t in texts if not t.strip())
    if n_empty:
        msgs.append(f"{n_empty} empty documents (kept as they are)")
    cov = _covered(redactor, known_fields is not None)
    missing = [t for t in STANDARD_TYPES if t not in cov]
    if missing:
        msgs.append(
            f"no recognizer or tagger label for {', '.join(missing)}: these are redacted only where "
            "--known-fields lists them (use the default tagger to find them)"
        )
    results = redactor.redact_many(texts, fields_list, progress=progress)
    low = [
        (i, s.start, s.end, s.label, round(float(s.score), 4))
        for i, r in enumerate(results)
        for s in r.spans
        if s.source.startswith("tagger") and s.score < LOW_CONFIDENCE
    ]
    if low:
        msgs.append(
            f"{len(low)} tagger spans with confidence < {LOW_CONFIDENCE} (redacted; check them: "
            "'low_confidence' lists document, offsets, type, score)"
        )
    for m in msgs:
        warnings.warn(m, UserWarning, stacklevel=2)
    msgs.append(  # always true of this pipeline: in the sidecar, not repeated on every run's stderr
        "no recognizer for organisations, free-text ids (order / ticket / medical record numbers) or "
        "health details: they are kept"
    )
    new_texts = [r.text for r in results]
    spath = None
    if spans_path is not None:
        spath = str(spans_path)
        atomic_write_text(
            spans_path,
            "".join(
                json.dumps({"index": i, "spans": r.presidio()}) + "\n"
                for i, r in enumerate(results)
            ),
        )
    _write_rows(out, fmt, field, rows, new_texts, header, layout)
    counts: Counter[str] = Counter()
    for r in results:
        counts.update(r.counts())
    cfg = {
        "mode": redactor.mode,
        "regex": redactor.regex,
        "tagger": None if redactor.tagger is None else getattr(redactor.tagger, "kind", "custom"),
        "format": fmt,
        "field": None if fmt == "txt" else (field or "text"),
        "surrogate_key": None
        if redactor.mode != "surrogate"
        else ("given" if redactor.key is not None else "random, not saved"),
        "known_fields": known_fields is not None,
        "bom": layout.bom,
        "newline": "CRLF" if layout.newline == "\r\n" else "LF",
    }
    sidecar = Path(str(out) + ".redaction.json")
    summary = RedactionSummary(
        str(out),
        str(sidecar),
        len(texts),
        n_empty,
        dict(sorted(counts.items())),
        spath,
        tuple(msgs),
        cfg,
        tuple(sorted(low, key=lambda x: x[4])[:200]),
        tuple(texts),
        tuple(results),
    )
    atomic_write_text(sidecar, json.dumps(summary.to_dict(), indent=2) + "\n")
    return summary
