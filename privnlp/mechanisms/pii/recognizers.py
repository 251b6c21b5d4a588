"""Regex recognizers for structured PII (e-mail, phone, SSN, card numbers with a Luhn check, dates).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` (PII extraction; the structured types
are the ones its auto-annotation matches by format rather than by fuzzy phrase matching). Hand-written
because Presidio's recognizers pull spaCy models; the patterns are short and each is tested.

Every recognizer returns :class:`PIISpan` objects in Presidio's shape (``entity_type``, ``start``, ``end``,
``score``); :func:`parse_date` turns a date mention in any of the common formats into a
``datetime.date`` so the annotator can compare it with a known (ISO) date.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable
from dataclasses import dataclass

from privnlp.core.errors import InvalidArgument

__all__ = [
    "PIISpan",
    "find_emails",
    "find_phones",
    "find_ssns",
    "find_cards",
    "find_dates",
    "luhn_ok",
    "parse_date",
    "recognize",
    "DATE_FORMATS",
    "digits",
]

_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MON = {m[:3]: i + 1 for i, m in enumerate(_MONTHS)}
_MONTH_RE = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
    r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)

#: strftime formats a known date is rendered in before exact search (plus unpadded variants)
DATE_FORMATS = (
    "%B %d, %Y",
    "%m/%d/%Y",
    "%Y-%m-%d",
    "%d %B %Y",
    "%b %d, %Y",
    "%m-%d-%Y",
    "%d/%m/%Y",
    "%B %d %Y",
    "%d.%m.%Y",
    "%Y/%m/%d",
    "%b. %d, %Y",
)


@dataclass(frozen=True)
class PIISpan:
    """A PII mention ``text[start:end]`` of type ``label`` (Presidio: ``entity_type``) with a ``score``.

    Attributes:
        start: first character offset (inclusive).
        end: last character offset (exclusive).
        label: the PII type (``PERSON``, ``EMAIL``, ``PHONE``, ``SSN``, ``CREDIT_CARD``, ``DATE``, ...).
        score: confidence in [0, 1].
        source: what found it (``"regex"``, ``"known_field"``, ``"tagger"``, ...).
    """

    start: int
    end: int
    label: str
    score: float = 1.0
    source: str = ""

    @property
    def entity_type(self) -> str:
        return self.label

    def to_presidio(self) -> dict:
        """Presidio's ``RecognizerResult`` shape."""
        return {
            "entity_type": self.label,
            "start": int(self.start),
            "end": int(self.end),
            "score": round(float(self.score), 4),
        }

    def overlaps(self, other: PIISpan) -> bool:
        return self.start < other.end and other.start < self.end


def digits(s: str) -> str:
    return re.sub(r"\D", "", s)


_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])"
)
_PHONE = re.compile(
    r"(?<![\w+])(?:\+?1[\s.-]?)?(?:\(\d{3}\)\s?|\d{3}[\s.-])\d{3}[\s.-]\d{4}(?!\w)"
    r"|(?<![\w+])\+?1?\d{10}(?!\w)"
)
_SSN = re.compile(r"(?<![\w-])(?!000|666|9\d\d)\d{3}[- ](?!00)\d{2}[- ](?!0000)\d{4}(?![\w-])")
_CARD = re.compile(r"(?<![\w-])(?:\d[ -]?){12,18}\d(?![\w-])")
_DATE_PATTERNS = (
    # 05/30/2001, 5-30-01, 30.05.2001, 2001-05-30, 2001/5/30
    re.compile(
        r"(?<![\w/.-])(?P<a>\d{1,2})(?P<s>[/.-])(?P<b>\d{1,2})(?P=s)(?P<y>\d{4}|\d{2})(?![\w/-])"
    ),
    re.compile(r"(?<![\w/.-])(?P<y>\d{4})(?P<s>[/.-])(?P<a>\d{1,2})(?P=s)(?P<b>\d{1,2})(?![\w/-])"),
    # May 30, 2001 / May 30th 2001 / Sept. 3, 2001
    re.compile(
        r"(?<!\w)(?P<mon>"
        + _MONTH_RE
        + r")\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<y>\d{4})(?!\w)",
        re.I,
    ),
    # 30 May 2001 / 30th of May, 2001
    re.compile(
        r"(?<!\w)(?P<d>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<mon>"
        + _MONTH_RE
        + r"),?\s+(?P<y>\d{4})(?!\w)",
        re.I,
    ),
)


def luhn_ok(number: str) -> bool:
    """The Luhn checksum of the digits of ``number`` (card numbers).

    Args:
        number: a string holding the card number (non-digits ignored).

    Returns:
        ``True`` when it has at least 13 digits and the checksum holds.
    """
    ds = [int(c) for c in digits(number)]
    if len(ds) < 13:
        return False
    tot = 0
    for i, d in enumerate(reversed(ds)):
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        tot += d
    return tot % 10 == 0


def _year(y: str) -> int:
    v = int(y)
    return v if len(y) == 4 else (2000 + v if v < 50 else 1900 + v)


def _mk(y: int, m: int, d: int) -> _dt.date | None:
    try:
        return _dt.date(y, m, d)
    except ValueError:
        return None


def _date_candidates(text: str) -> Iterable[tuple[int, int, tuple[_dt.date, ...]]]:
    for k, pat in enumerate(_DATE_PATTERNS):
        for m in pat.finditer(text):
            g = m.groupdict()
            y = _year(g["y"])
            if "mon" in g and g.get("mon"):
                ds = (_mk(y, _MON[g["mon"].lower().rstrip(".")[:3]], int(g["d"])),)
            elif k == 1:
                ds = (_mk(y, int(g["a"]), int(g["b"])),)
            else:  # ambiguous numeric: month-first (US) and day-first readings
                ds = (_mk(y, int(g["a"]), int(g["b"])), _mk(y, int(g["b"]), int(g["a"])))
            ds = tuple(dict.fromkeys(d for d in ds if d is not None))
            if ds:
                yield m.start(), m.end(), ds


def parse_date(s: str) -> tuple[_dt.date, ...]:
    """Every reading of a date mention ``s`` (``05/06/2001`` is both May 6 and June 5); ``()`` if none."""
    for a, b, ds in _date_candidates(s.strip()):
        if a == 0 and b == len(s.strip()):
            return ds
    return ()


def find_dates(text: str, score: float = 0.6) -> list[PIISpan]:
    return [PIISpan(a, b, "DATE", score, "regex") for a, b, _ in _date_candidates(text)]


def find_emails(text: str, score: float = 0.95) -> list[PIISpan]:
    return [PIISpan(m.start(), m.end(), "EMAIL", score, "regex") for m in _EMAIL.finditer(text)]


def find_phones(text: str, score: float = 0.7) -> list[PIISpan]:
    return [PIISpan(m.start(), m.end(), "PHONE", score, "regex") for m in _PHONE.finditer(text)]


def find_ssns(text: str, score: float = 0.85) -> list[PIISpan]:
    return [PIISpan(m.start(), m.end(), "SSN", score, "regex") for m in _SSN.finditer(text)]


def find_cards(text: str, score: float = 0.9) -> list[PIISpan]:
    """Card numbers: 13-19 digits (spaces / dashes allowed) passing the Luhn check."""
    return [
        PIISpan(m.start(), m.end(), "CREDIT_CARD", score, "regex")
        for m in _CARD.finditer(text)
        if 13 <= len(digits(m.group())) <= 19 and luhn_ok(m.group())
    ]


_FINDERS = {
    "EMAIL": find_emails,
    "PHONE": find_phones,
    "SSN": find_ssns,
    "CREDIT_CARD": find_cards,
    "DATE": find_dates,
}


def recognize(text: str, labels: Iterable[str] = tuple(_FINDERS)) -> list[PIISpan]:
    """All regex recognizers in ``labels``; overlaps resolved (longer, then higher score, wins).

    Args:
        text: the text.
        labels: the recognizers to run, among ``EMAIL``, ``PHONE``, ``SSN``, ``CREDIT_CARD``, ``DATE``.

    Returns:
        Non-overlapping spans, in text order.

    Raises:
        InvalidArgument: an unknown label (named, with the allowed ones).
    """
    from .spans import resolve_overlaps

    labels = tuple(labels)
    unknown = sorted(set(labels) - set(_FINDERS))
    if unknown:
        raise InvalidArgument(f"labels must be among {sorted(_FINDERS)}; got unknown {unknown}")
    out: list[PIISpan] = []
    for lab in labels:
        out.extend(_FINDERS[lab](text))
    return resolve_overlaps(out)
