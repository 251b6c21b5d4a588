"""Consistent, keyed pseudonyms (issue 32, item 4): the same entity maps to the same surrogate across a
corpus, the surrogate has the entity's type, format and locale, and it never changes the sentence's
structure (one line, no added punctuation, the original's case style).

Keying: ``HMAC-SHA256(key, type + normalised value)`` seeds the choice (never a plain hash: without the
secret key nobody can test a guess ``"Jane Doe" -> "Mary Smith"`` by recomputing it). A person's name is
keyed word by word (first names and last names separately), so ``Jane Doe``, ``Jane`` and ``Ms Doe``
stay one person in the output.

Locale: a phone number's country (``phonenumbers``), an e-mail's top-level domain, a name's presence in
a Faker locale's name lists, a street's words (``Calle``, ``rue``, ``Straße`` ...). Format: digits are
replaced digit by digit (separators, ``+44`` prefixes and parentheses kept) and checksums recomputed
(IBAN mod 97, Luhn, NHS mod 11, DNI letter), dates are shifted and re-rendered in the same written form.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import ipaddress
import re
import unicodedata
from functools import cache, lru_cache

import phonenumbers
from faker import Faker
from stdnum import iban as _iban

from privnlp.core.errors import InvalidArgument

from .recognizers import _MON_FULL, _MONTHS, luhn_ok, parse_date
from .synth import LOCALES

__all__ = ["Surrogates", "guess_locale"]

_REGION_LOCALE = {
    "GB": "en_GB",
    "US": "en_US",
    "IE": "en_IE",
    "ES": "es_ES",
    "FR": "fr_FR",
    "DE": "de_DE",
    "IT": "it_IT",
    "NL": "nl_NL",
    "PT": "pt_PT",
    "PL": "pl_PL",
    "JP": "ja_JP",
}
_TLD_LOCALE = {
    "uk": "en_GB",
    "ie": "en_IE",
    "es": "es_ES",
    "fr": "fr_FR",
    "de": "de_DE",
    "it": "it_IT",
    "nl": "nl_NL",
    "pt": "pt_PT",
    "pl": "pl_PL",
    "jp": "ja_JP",
}
_STREET_LOCALE = (
    (re.compile(r"\b(?:calle|avenida de|plaza|paseo|c/)\b", re.I), "es_ES"),
    (re.compile(r"\b(?:rue|boulevard|avenue de|place|chemin|allée)\b", re.I), "fr_FR"),
    (re.compile(r"(?:stra(?:ß|ss)e|str\.|weg|allee|platz|gasse)\b", re.I), "de_DE"),
    (re.compile(r"\b(?:via|viale|piazza|corso)\b", re.I), "it_IT"),
    (re.compile(r"(?:gracht|straat|laan|plein|kade)\b", re.I), "nl_NL"),
    (re.compile(r"\b(?:rua|avenida da|travessa|largo)\b", re.I), "pt_PT"),
    (re.compile(r"\bul\.", re.I), "pl_PL"),
)


def _fold(s: str) -> str:
    return "".join(
        c for c in unicodedata.normalize("NFKD", s.lower()) if not unicodedata.combining(c)
    )


@cache
def _faker(locale: str) -> Faker:
    return Faker(locale)


@cache
def _names_of(locale: str) -> tuple[frozenset[str], frozenset[str]]:
    first: set[str] = set()
    last: set[str] = set()
    for p in _faker(locale).providers:
        for attr, dest in (
            ("first_names", first),
            ("first_romanized_names", first),
            ("last_names", last),
            ("last_romanized_names", last),
        ):
            vals = getattr(p, attr, None)
            if vals:
                dest.update(_fold(v) for v in vals)
    return frozenset(first), frozenset(last)


_PARTICLES = frozenset(
    "de del della di da dos das du van von der den ter la le lo los las y e".split()
)


@lru_cache(maxsize=4096)
def _name_locale(word: str, which: int) -> str | None:
    """The first locale (in :data:`LOCALES` order) whose first (``which=0``) / last (1) names hold ``word``
    (folded); a word with accents prefers a locale that spells it with them (``Lucía`` -> es_ES)."""
    if any(ord(c) > 127 for c in word):
        for loc in LOCALES:
            if word in _raw_names_of(loc)[which]:
                return loc
    key = _fold(word)
    for loc in LOCALES:
        if key in _names_of(loc)[which]:
            return loc
    return None


@cache
def _raw_names_of(locale: str) -> tuple[frozenset[str], frozenset[str]]:
    first: set[str] = set()
    last: set[str] = set()
    for p in _faker(locale).providers:
        for attr, dest in (("first_names", first), ("last_names", last)):
            vals = getattr(p, attr, None)
            if vals:
                dest.update(v.lower() for v in vals)
    return frozenset(first), frozenset(last)


def guess_locale(label: str, value: str) -> str:
    """The Faker locale a value most likely comes from (``en_US`` when nothing says otherwise)."""
    v = value.strip()
    if label == "PHONE":
        for region in (None, "US", "GB", "ES", "FR", "DE", "IT", "NL", "PT", "PL", "IE"):
            try:
                n = phonenumbers.parse(v.replace("00", "+", 1) if v.startswith("00") else v, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(n):
                return _REGION_LOCALE.get(phonenumbers.region_code_for_number(n) or "", "en_US")
        return "en_US"
    if label == "EMAIL":
        tld = v.rsplit(".", 1)[-1].lower()
        return _TLD_LOCALE.get(tld, "en_US")
    if label == "ADDRESS":
        for pat, loc in _STREET_LOCALE:
            if pat.search(v):
                return loc
        return "en_GB" if re.search(r"\b(?:road|lane|terrace|grove|close)\b", v, re.I) else "en_US"
    if label in ("PERSON", "NAME", "LOC"):
        words = [_fold(w) for w in re.findall(r"[^\W\d_]+", v)]
        best, score = "en_US", 0
        for loc in LOCALES:
            first, last = _names_of(loc)
            s = sum((w in first) + (w in last) for w in words)
            if s > score:
                best, score = loc, s
        if score == 0 and any(ord(c) > 127 for c in v):
            return "es_ES" if re.search("[ñáíóú]", v.lower()) else "fr_FR"
        return best
    return "en_US"


def _case_like(src: str, out: str) -> str:
    if src.islower():
        return out.lower()
    if src.isupper() and len(src) > 1:
        return out.upper()
    return out


class Surrogates:
    """Keyed surrogate values (see the module docstring).

    Args:
        key: the secret key (at least 16 bytes); the same key gives the same surrogates in every run.
    """

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) < 16:
            raise InvalidArgument("key must be at least 16 bytes (a secret; never a plain hash)")
        self.key = bytes(key)

    def _seed(self, *parts: str) -> int:
        msg = "\x1f".join(parts).encode("utf-8")
        return int.from_bytes(hmac.new(self.key, msg, hashlib.sha256).digest()[:8], "big")

    def _fk(self, locale: str, *parts: str) -> Faker:
        f = _faker(locale)
        f.seed_instance(self._seed(locale, *parts))
        return f

    def _stream(self, n: int, *parts: str) -> bytes:
        """``n`` keyed pseudo-random bytes (HMAC-SHA256 in counter mode)."""
        msg = "\x1f".join(parts).encode("utf-8")
        out = b""
        k = 0
        while len(out) < n:
            out += hmac.new(self.key, msg + k.to_bytes(4, "big"), hashlib.sha256).digest()
            k += 1
        return out[:n]

    def _digits(self, s: str, *parts: str, keep: int = 0) -> str:
        """``s`` with every digit after the first ``keep`` replaced by a keyed digit, letters by keyed
        letters of the same case; separators kept."""
        stream = self._stream(len(s), "digits", *parts)
        out, seen = [], 0
        for i, c in enumerate(s):
            if c.isdigit():
                seen += 1
                out.append(c if seen <= keep else str(stream[i] % 10))
            elif c.isalpha() and c.isascii():
                ch = chr(ord("A") + stream[i] % 26)
                out.append(ch if c.isupper() else ch.lower())
            else:
                out.append(c)
        return "".join(out)

    def __call__(self, label: str, value: str) -> str:
        v = value
        norm = " ".join(_fold(v).split())
        if label in ("PERSON", "NAME"):
            return self.person(v)
        if label == "PHONE":
            return self.phone(v)
        if label == "DATE":
            return self.date(v)
        if label == "EMAIL":
            loc = guess_locale("EMAIL", v)
            f = self._fk(loc, "EMAIL", norm)
            domain = v.rsplit("@", 1)[-1].lower()
            tld = domain.rsplit(".", 1)[-1]
            dom = f.free_email_domain() if tld in _TLD_LOCALE or tld == "com" else f"example.{tld}"
            return f"{f.user_name()}@{dom}"
        if label == "USERNAME":
            u = self._fk("en_US", "USERNAME", norm).user_name()
            return "@" + u if v.startswith("@") else u
        if label == "IP_ADDRESS":
            return self.ip(v)
        if label == "IBAN":
            return self.iban(v)
        if label == "CREDIT_CARD":
            return self.card(v)
        if label in ("SSN", "NATIONAL_ID"):
            return self.national_id(label, v)
        if label == "POSTCODE":
            return self._digits(v, "POSTCODE", norm)
        if label == "ADDRESS":
            loc = guess_locale("ADDRESS", v)
            return " ".join(self._fk(loc, "ADDRESS", norm).street_address().split())
        if label == "LOC":
            loc = guess_locale("LOC", v)
            return _case_like(v, " ".join(self._fk(loc, "LOC", norm).city().split()))
        if label == "ORG":
            return " ".join(self._fk("en_US", "ORG", norm).company().split())
        return f"[{label}]"

    # -------------------------------------------------------------------------------------------
    def person(self, v: str) -> str:
        """Word by word: a first name maps to a first name, a last name to a last name, both from the
        locale whose name lists hold the word (so ``Jane`` alone and ``Jane`` in ``Jane Doe`` agree)."""
        words = list(re.finditer(r"[^\W\d_](?:[^\s]*[^\W\d_])?\.?", v))
        if not words:
            return v
        out, pos = [], 0
        for k, m in enumerate(words):
            w = m.group()
            out.append(v[pos : m.start()])
            pos = m.end()
            key = _fold(w.rstrip("."))
            if w.islower() and key in _PARTICLES:  # "de", "van", "von" ... stay as they are
                out.append(w)
                continue
            if len(w.rstrip(".")) == 1:  # an initial stays an initial
                rep = chr(ord("A") + self._seed("PERSON.initial", key) % 26) + w[1:]
            else:
                raw = w.rstrip(".").lower()
                in_first = _name_locale(raw, 0)
                is_first = (
                    (k == 0 and len(words) > 1)
                    or (in_first is not None and k < len(words) - 1)
                    or (len(words) == 1 and in_first is not None)
                )
                loc = (
                    (in_first if is_first else _name_locale(key, 1))
                    or _name_locale(key, 1 - int(is_first))
                    or "en_US"
                )
                part = "first" if is_first else "last"
                f = self._fk(loc, f"PERSON.{part}", key)
                rep = f.first_name() if is_first else f.last_name()
                rep = rep.split()[0] if " " in rep else rep
            out.append(_case_like(w, rep))
        out.append(v[pos:])
        return "".join(out)

    def phone(self, v: str) -> str:
        m = re.match(r"^(\+\d{1,3}|00\d{1,3})?", v.strip())
        prefix = len(m.group()) if m and m.group() else 0
        loc = guess_locale("PHONE", v)
        region = next((r for r, lc in _REGION_LOCALE.items() if lc == loc), "US")
        keep = len(re.sub(r"\D", "", v[:prefix])) + 2  # country code + the range's leading digits
        cand = v
        for attempt in range(25):
            cand = self._digits(v, "PHONE", _fold(re.sub(r"\D", "", v)), str(attempt), keep=keep)
            try:
                n = phonenumbers.parse(
                    cand.replace("00", "+", 1) if cand.startswith("00") else cand, region
                )
                if phonenumbers.is_valid_number(n):
                    return cand
            except phonenumbers.NumberParseException:
                pass
        return cand

    def date(self, v: str) -> str:
        """The date shifted by a keyed offset (within a year either way), re-rendered in the same form:
        each number keeps its width, a month name its language, abbreviation and case."""
        norm = " ".join(v.split()).lower()
        days = int(self._seed("DATE", norm) % 730) - 365
        shift = _dt.timedelta(days=days + (days >= 0))  # never 0: the date always changes
        parts = re.split(r"(\d+|[^\W\d_]+)", v)
        nums = [i for i, p in enumerate(parts) if p.isdigit()]
        names = [i for i, p in enumerate(parts) if p and p[0].isalpha() and _is_month(p)]
        readings = parse_date(v)
        d0 = readings[0] if readings else None
        roles: dict[int, str] = {}
        if names:
            roles[names[0]] = "month"
        for i in nums:
            if len(parts[i]) == 4:
                roles[i] = "year"
        rest = [i for i in nums if i not in roles]
        if names:
            if rest:
                roles[rest[0]] = "day"
        elif len(rest) >= 2:
            a, b = rest[0], rest[1]
            month_first = d0 is not None and int(parts[a]) == d0.month and int(parts[b]) == d0.day
            if nums and len(parts[nums[0]]) == 4:
                month_first = True  # ISO: year, month, day
            roles[a], roles[b] = ("month", "day") if month_first else ("day", "month")
            if len(rest) >= 3:
                roles[rest[2]] = "year"
        if d0 is None:  # no year, or no day: the parts that are there
            y, mo, dd = 2001, 1, 1
            for i, r in roles.items():
                if r == "day":
                    dd = min(max(int(parts[i]), 1), 28)
                elif r == "year" and len(parts[i]) == 4:
                    y = int(parts[i])
                elif r == "month":
                    mo = _MON_FULL.get(parts[i].lower().rstrip(".")) or _month_num(parts[i])
            d0 = _dt.date(y, mo, dd)
        d1 = d0 + shift
        out = []
        for i, p in enumerate(parts):
            r = roles.get(i)
            if r == "year":
                out.append(str(d1.year) if len(p) == 4 else f"{d1.year % 100:02d}")
            elif r == "day":
                out.append(f"{d1.day:02d}" if len(p) == 2 and not names else str(d1.day))
            elif r == "month" and p.isdigit():
                out.append(f"{d1.month:02d}" if len(p) == 2 else str(d1.month))
            elif r == "month":
                out.append(_month_like(p, d1.month))
            elif (
                p in ("st", "nd", "rd", "th")
                and [x for x in out if x][-1:]
                and [x for x in out if x][-1].isdigit()
            ):
                prev = [x for x in out if x][-1]
                out.append(
                    "th"
                    if prev in ("11", "12", "13")
                    else {"1": "st", "2": "nd", "3": "rd"}.get(prev[-1], "th")
                )
                continue
                out.append(
                    {"1": "st", "2": "nd", "3": "rd"}.get(out[-1][-1], "th")
                    if out[-1] not in ("11", "12", "13")
                    else "th"
                )
            else:
                out.append(p)
        return "".join(out)

    def ip(self, v: str) -> str:
        addr = ipaddress.ip_address(v)
        seed = self._seed("IP", v.lower())
        if addr.version == 4:
            o = [int(x) for x in v.split(".")]
            keep = 2 if addr.is_private else 1
            new = o[:keep] + [(seed >> (8 * i)) % 254 + 1 for i in range(4 - keep)]
            return ".".join(map(str, new))
        pre = (
            int(addr) >> 64 << 64
            if addr.is_link_local or addr.is_private
            else (int(addr) >> 96) << 96
        )
        return str(ipaddress.IPv6Address(pre | (seed & ((1 << 64) - 1))))

    def iban(self, v: str) -> str:
        compact = re.sub(r"\s", "", v)
        body = self._digits(compact[4:], "IBAN", compact)
        check = _iban.calc_check_digits(compact[:2] + "00" + body)
        new = compact[:2] + check + body
        out, k = [], 0
        for c in v:  # the original's grouping
            if c.isspace():
                out.append(c)
            else:
                out.append(new[k])
                k += 1
        return "".join(out)

    def card(self, v: str) -> str:
        for attempt in range(10):
            cand = self._digits(v, "CARD", re.sub(r"\D", "", v), str(attempt), keep=1)
            ds = re.sub(r"\D", "", cand)
            for last in "0123456789":
                if luhn_ok(ds[:-1] + last):
                    idx = max(i for i, c in enumerate(cand) if c.isdigit())
                    return cand[:idx] + last + cand[idx + 1 :]
        return cand

    def national_id(self, label: str, v: str) -> str:
        norm = re.sub(r"\W", "", v).upper()
        if label == "SSN":
            seed = self._seed("SSN", norm)
            area, group, serial = seed % 665 + 1, (seed >> 10) % 99 + 1, (seed >> 20) % 9999 + 1
            if area == 666:
                area = 667
            sep = re.sub(r"\d", "", v)[:1] or ""
            return (
                f"{area:03d}{sep}{group:02d}{sep}{serial:04d}"
                if sep
                else f"{area:03d}{group:02d}{serial:04d}"
            )
        if re.fullmatch(r"\d{8}[A-Z]", norm) or re.fullmatch(r"[XYZ]\d{7}[A-Z]", norm):  # DNI / NIE
            cand = (
                self._digits(v[:-1], "DNI", norm)
                if norm[0].isdigit()
                else v[0] + self._digits(v[1:-1], "NIE", norm)
            )
            num = int(
                re.sub(r"\D", "", cand.replace("X", "0").replace("Y", "1").replace("Z", "2"))
                if cand[0].isdigit()
                else str("XYZ".index(cand[0])) + re.sub(r"\D", "", cand[1:])
            )
            return cand + "TRWAGMYFPDXBNJZSQVHLCKE"[num % 23]
        if len(norm) == 10 and norm.isdigit():  # NHS: nine keyed digits + the mod-11 check digit
            for attempt in range(50):
                cand = self._digits(v, "NHS", norm, str(attempt))
                ds = [int(c) for c in re.sub(r"\D", "", cand)]
                check = (11 - sum(d * w for d, w in zip(ds[:9], range(10, 1, -1))) % 11) % 11
                if check != 10:
                    idx = max(i for i, c in enumerate(cand) if c.isdigit())
                    return cand[:idx] + str(check) + cand[idx + 1 :]
        return self._digits(v, label, norm, keep=0)


def _is_month(w: str) -> bool:
    low = w.lower().rstrip(".")
    return low in _MON_FULL or (
        len(low) >= 3
        and low[:3] in {m[:3] for m in _MONTHS}
        and low in {m[: len(low)] for m in _MONTHS}
    )


_MONTH_LISTS = (
    tuple(m.capitalize() for m in _MONTHS),
    tuple(
        "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre".split()
    ),
    tuple(
        "janvier février mars avril mai juin juillet août septembre octobre novembre décembre".split()
    ),
    tuple(
        "Januar Februar März April Mai Juni Juli August September Oktober November Dezember".split()
    ),
)


def _month_num(w: str) -> int:
    low = w.lower().rstrip(".")
    if low in _MON_FULL:
        return _MON_FULL[low]
    return next(i + 1 for i, m in enumerate(_MONTHS) if m.startswith(low[:3]))


def _month_like(src: str, month: int) -> str:
    """Month ``month`` written like ``src``: same language, abbreviation, case and trailing dot."""
    s = src.rstrip(".")
    low = s.lower()
    for lst in _MONTH_LISTS[1:]:
        if low in (m.lower() for m in lst) and low not in _MONTHS:
            return (
                _case_like(s, lst[month - 1] if s[:1].isupper() else lst[month - 1].lower())
                + src[len(s) :]
            )
    full = _MONTH_LISTS[0][month - 1]
    rep = full if low in _MONTHS else full[: len(s)] if len(s) <= 4 else full
    if low.startswith("sept") and len(s) == 4:
        rep = full[:3]
    return _case_like(s, rep) + src[len(s) :]
