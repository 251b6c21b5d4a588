"""Recognizers for the identifiers people type: e-mail, phone (international), IP, IBAN, card numbers,
national ids with checksums, postcodes, usernames in login / log contexts, dates in their written forms.

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` (PII extraction; the structured types
are the ones its auto-annotation matches by format rather than by fuzzy phrase matching). Validation is
delegated to well-kept libraries where one exists: ``phonenumbers`` (Google's libphonenumber metadata:
which digit strings are real phone numbers of which country), ``python-stdnum`` (IBAN mod 97, Spanish
DNI / NIE, French NIR, US SSN rules) and :mod:`ipaddress`; what is written by hand is the candidate
search (short, tested patterns), the UK NHS mod-11 check (not in ``python-stdnum``) and the context
rules (a username is only a username after ``user:`` / ``for user`` / ``sudo:`` ...).

Every recognizer returns :class:`PIISpan` objects in Presidio's shape (``entity_type``, ``start``, ``end``,
``score``), one span per identifier, with the punctuation around it left outside; :func:`recognize`
runs them in a fixed priority (checksummed types first) so one identifier is never cut into several
typed pieces. :func:`parse_date` turns a date mention into ``datetime.date`` readings so the annotator
can compare it with a known (ISO) date.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import re
import unicodedata
from collections.abc import Callable, Iterable
from functools import lru_cache

import phonenumbers
from stdnum import iban as _iban
from stdnum.br import cpf as _cpf
from stdnum.ca import sin as _sin
from stdnum.ch import ssn as _chssn
from stdnum.de import idnr as _idnr
from stdnum.es import dni as _dni
from stdnum.es import nie as _nie
from stdnum.fi import hetu as _hetu
from stdnum.fr import nir as _nir
from stdnum.gr import amka as _amka
from stdnum.ie import pps as _pps
from stdnum.in_ import aadhaar as _aadhaar
from stdnum.in_ import pan as _pan
from stdnum.it import codicefiscale as _cf
from stdnum.mx import curp as _curp
from stdnum.mx import rfc as _rfc
from stdnum.nl import bsn as _bsn
from stdnum.pl import pesel as _pesel
from stdnum.pt import cc as _ptcc
from stdnum.pt import nif as _nif
from stdnum.ro import cnp as _cnp
from stdnum.se import personnummer as _pnr
from stdnum.tr import tckimlik as _tck
from stdnum.za import idnr as _zaid
from wordfreq import zipf_frequency

from privnlp.core.errors import InvalidArgument

from .spans import Occupancy
from .types import PIISpan

__all__ = [
    "PIISpan",
    "find_emails",
    "find_phones",
    "find_ssns",
    "find_cards",
    "find_dates",
    "find_ips",
    "find_ibans",
    "find_national_ids",
    "find_postcodes",
    "find_usernames",
    "luhn_ok",
    "nhs_ok",
    "parse_date",
    "recognize",
    "DATE_FORMATS",
    "RECOGNIZER_LABELS",
    "PHONE_REGIONS",
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
_MONTHS_INTL = {  # es, fr, de, it, nl, pt, pl month names (lower case) -> month number
    **{
        m: i + 1
        for i, m in enumerate(
            "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre "
            "diciembre".split()
        )
    },
    "setiembre": 9,
    **{
        m: i + 1
        for i, m in enumerate(
            "janvier février mars avril mai juin juillet août septembre octobre novembre "
            "décembre".split()
        )
    },
    "fevrier": 2,
    "aout": 8,
    "decembre": 12,
    **{
        m: i + 1
        for i, m in enumerate(
            "januar februar märz april mai juni juli august september oktober november "
            "dezember".split()
        )
    },
    "maerz": 3,
    # it, nl, pt, pl (Polish: the genitive a date is written in, and the nominative)
    **{
        m: i + 1
        for i, m in enumerate(
            "gennaio febbraio marzo aprile maggio giugno luglio agosto settembre ottobre novembre "
            "dicembre".split()
        )
    },
    **{
        m: i + 1
        for i, m in enumerate(
            "januari februari maart april mei juni juli augustus september oktober november "
            "december".split()
        )
    },
    **{
        m: i + 1
        for i, m in enumerate(
            "janeiro fevereiro março abril maio junho julho agosto setembro outubro novembro "
            "dezembro".split()
        )
    },
    "marco": 3,
    **{
        m: i + 1
        for i, m in enumerate(
            "stycznia lutego marca kwietnia maja czerwca lipca sierpnia września października "
            "listopada grudnia".split()
        )
    },
    **{
        m: i + 1
        for i, m in enumerate(
            "styczeń luty marzec kwiecień maj czerwiec lipiec sierpień wrzesień październik "
            "listopad grudzień".split()
        )
    },
}
_MONTHS_INTL |= {  # Turkish; Swedish "augusti" (its other names are Dutch / French / Polish ones above)
    **{
        m: i + 1
        for i, m in enumerate(
            "ocak şubat mart nisan mayıs haziran temmuz ağustos eylül ekim kasım aralık".split()
        )
    },
    "augusti": 8,
}
_MONTHS_INTL |= {  # sixth round: Czech (genitive), Finnish (partitive), Romanian, Danish / Norwegian, Austrian,
    # romanised Greek (genitive)
    **{
        m: i + 1
        for names in (
            "ledna února března dubna května června července srpna září října listopadu prosince",
            "tammikuuta helmikuuta maaliskuuta huhtikuuta toukokuuta kesäkuuta heinäkuuta elokuuta "
            "syyskuuta lokakuuta marraskuuta joulukuuta",
            "ianuarie februarie martie aprilie mai iunie iulie august septembrie octombrie noiembrie "
            "decembrie",
            "ianouariou fevrouariou martiou apriliou maiou iouniou iouliou avgoustou septemvriou "
            "oktovriou noemvriou dekemvriou",
        )
        for i, m in enumerate(names.split())
    },
    "marts": 3,
    "desember": 12,
    "jänner": 1,
}
#: seventh round: Indonesian / Malay (the others of their months are Dutch / English names above)
_MONTHS_INTL |= {"maret": 3, "agustus": 8, "mac": 3, "ogos": 8, "disember": 12, "okt": 10}
#: Hungarian month names (a Hungarian date puts the year first: "2025. március 4.", ":func:`find_dates`")
_MONTHS_HU = {
    m: i + 1
    for i, m in enumerate(
        "január február március április május június július augusztus szeptember október november "
        "december".split()
    )
}
_MON = {m[:3]: i + 1 for i, m in enumerate(_MONTHS)} | {"sept": 9}
_MON_FULL = {m: i + 1 for i, m in enumerate(_MONTHS)} | _MONTHS_INTL
# a dot only after an abbreviation ("Feb."), never after a full name: "... of February." keeps its period
_MONTH_RE = (
    r"(?:(?:january|february|march|april|may|june|july|august|september|october|november|december)"
    r"(?![\w.])|(?:january|february|march|april|may|june|july|august|september|october|november|"
    r"december)(?=\.)|(?:jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec)\.?)"
)
_INTL_RE = "(?:" + "|".join(sorted(_MONTHS_INTL, key=len, reverse=True)) + ")"


def _month(name: str) -> int:
    k = name.lower().rstrip(".")
    return _MON_FULL.get(k) or _MON[k[:4] if k.startswith("sept") else k[:3]]


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

#: regions a phone number written without its country code is tried in (first valid reading wins)
PHONE_REGIONS = ("US", "GB", "ES", "FR", "DE", "IT", "NL", "IE", "PT", "BE", "AT", "CH", "PL", "SE")


def digits(s: str) -> str:
    return re.sub(r"\D", "", s)


# ------------------------------------------------------------------------------------------------ e-mail
_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])"
)


def find_emails(text: str, score: float = 0.95) -> list[PIISpan]:
    """E-mail addresses; surrounding brackets, quotes and a sentence's final period stay outside."""
    return [PIISpan(m.start(), m.end(), "EMAIL", score, "regex") for m in _EMAIL.finditer(text)]


# ------------------------------------------------------------------------------------------------ phones
_PHONE_CAND = re.compile(
    r"(?<![\w+.\-/@])(?:\+|\b00)?\(?\d[\d \u00a0().\-]{5,22}\d(?![\w\-@]|[.:]\d)"
)
_PHONE_CONTEXT = re.compile(
    r"(?:phone|tel|mobile|mob|cell|call|ring|text|fax|whatsapp|sms|contact|móvil|movil|teléfono|"
    r"telefono|téléphone|portable|handy|telefon|rufnummer|number)\W{0,3}[\w ]{0,12}$",
    re.I,
)


@lru_cache(maxsize=65536)  # libphonenumber's validation costs ~0.5 ms; corpora repeat their numbers
def _phone_valid(cand: str) -> tuple[bool, bool]:
    """(valid in some region, only possible) for a candidate string."""
    s = cand.strip()
    intl = s.startswith("+") or s.startswith("00")
    if s.startswith("00"):
        s = "+" + s[2:]
    regions: Iterable[str | None] = (None,) if intl else PHONE_REGIONS
    possible = False
    for r in regions:
        try:
            n = phonenumbers.parse(s, r)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(n):
            return True, False
        possible = possible or phonenumbers.is_possible_number(n)
    return False, possible


#: a number right after one of these words is an order / tax / reference id, not a phone
_ID_LABEL_BEFORE = re.compile(
    r"(?:\b(?:order|orders|invoice|ref|reference|po|vat|abn|acn|gst|ein|tax\s*id|account\s*no|"
    r"bestelling|bestelnummer|factuur|pedido|factura|albarán|commande|facture|bestellung|bestellnr|"
    r"rechnung|rechnungsnr|auftrag|sendungsnr|ordine|fattura|zamówienie|zamowienie|faktura|encomenda|"
    r"fatura|n[ºo°]\.?\s*de\s*pedido|tracking|sendung|ticket|case)\b[\s.:#nº°-]*(?:[A-Z]{2}\s?)?|"
    r"#\s*)$",
    re.I,
)


def find_phones(text: str, score: float = 0.85) -> list[PIISpan]:
    """Phone numbers in E.164 / international (``+44 20 7946 0958``, ``0044 ...``) and national formats
    (``020 7946 0958``, ``612 34 56 78``, ``(415) 555-0132``), with or without spaces.

    A candidate is a digit run with phone separators; it is kept when ``phonenumbers`` says it is a valid
    number of some region in :data:`PHONE_REGIONS` (or anywhere, with a ``+`` / ``00`` prefix), and
    additionally a bare digit run (no separator, no ``+``) needs a phone word just before it
    (``tel:``, ``mobile``, ``call`` ...), so order numbers and ids are not typed PHONE. A number that is
    only *possible* (right length, unassigned range such as Ofcom's drama numbers) is kept with a
    lower score when it has the country prefix or a phone word before it, and so is a short local
    number (fewer than 9 digits: no area code).
    """
    out = []
    for m in _PHONE_CAND.finditer(text):
        cand = m.group()
        a, b = m.start(), m.end()
        if cand.startswith("(") and ")" not in cand:
            a, cand = a + 1, cand[1:]
        nd = len(digits(cand))
        if not 7 <= nd <= 15:
            continue
        intl = cand.startswith(("+", "00"))
        grouped = bool(re.search(r"[ \u00a0().\-]", cand))
        ctx = bool(_PHONE_CONTEXT.search(text[max(0, a - 30) : a]))
        if (
            "." in cand
            and not intl
            and not ctx
            and re.fullmatch(r"[\d.]+", cand)
            and not re.fullmatch(r"\d{3}\.\d{3}\.\d{4}|0\d(?:\.\d\d){4}", cand)
        ):
            continue  # dotted digit runs without context are dates / versions / IPs (but 210.555.0122)
        if nd < 9 and not (intl or ctx):
            continue  # a short local number (no area code) only after a phone word
        if not ctx and _ID_LABEL_BEFORE.search(text[max(0, a - 30) : a]):
            continue  # "order 1180-22736", "VAT GB 284 1172 90", "ABN 51 824 753 556": an id, not a phone
        valid, possible = _phone_valid(cand)
        if valid and (intl or grouped or ctx):
            out.append(PIISpan(a, b, "PHONE", score, "regex"))
        elif possible and (intl or ctx):
            out.append(PIISpan(a, b, "PHONE", round(score * 0.7, 4), "regex"))
    return out


# ------------------------------------------------------------------------------------------------ ids
_SSN = re.compile(r"(?<![\w-])(?!000|666|9\d\d)\d{3}([- ])(?!00)\d{2}\1(?!0000)\d{4}(?![\w-])")
_SSN_BARE = re.compile(
    r"(?:SSN|social security(?: number| no\.?)?)\W{0,4}(?!000|666|9\d\d)(\d{3}(?!00)\d{2}(?!0000)\d{4})(?!\w)",
    re.I,
)
_CARD = re.compile(r"(?<![\w-])(?:\d[ -]?){12,18}\d(?![\w-])")
_NHS = re.compile(r"(?<![\w-])\d{3}([ -]?)\d{3}\1\d{4}(?![\w-])")
_NHS_CONTEXT = re.compile(r"NHS", re.I)
_DNI = re.compile(r"(?<![\w-])(?:\d{8}[- ]?[A-Z]|[XYZ][- ]?\d{7}[- ]?[A-Z])(?![\w-])")
_NIR = re.compile(
    r"(?<![\w-])[12] ?\d{2} ?(?:0[1-9]|1[0-2]|[2-9]\d) ?(?:\d{2}|2A|2B) ?\d{3} ?\d{3} ?\d{2}(?![\w-])"
)
_NINO = re.compile(
    r"(?<![\w-])(?!BG|GB|NK|KN|TN|NT|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D](?![\w-])"
)

# Italian codice fiscale: 6 letters, 2 digits, month letter, 2 digits, letter + 3 digits, check letter
# (digits may be replaced by letters for homonyms: the "omocodia" letters LMNPQRSTUV)
_CF = re.compile(
    r"(?<![\w-])[A-Z]{6}[\dLMNPQRSTUV]{2}[ABCDEHLMPRST][\dLMNPQRSTUV]{2}[A-Z][\dLMNPQRSTUV]{3}[A-Z]"
    r"(?![\w-])",
    re.I,
)
# digit-only national ids whose checksum passes by chance for 1 in 10 / 11 digit runs: only after their
# name (PESEL, BSN, NIF, Steuer-ID) within 30 characters
_DIGIT_IDS = (
    (re.compile(r"(?<![\w-])\d{11}(?![\w-])"), re.compile(r"PESEL", re.I), _pesel),
    (
        re.compile(r"(?<![\w-])\d{4}\.?\d{2}\.?\d{3}(?![\w-])"),
        re.compile(r"\b(?:BSN|burgerservicenummer|sofinummer)\b", re.I),
        _bsn,
    ),
    (
        re.compile(r"(?<![\w-])\d{3} ?\d{3} ?\d{3}(?![\w-])"),
        re.compile(r"\b(?:NIF|contribuinte)\b", re.I),
        _nif,
    ),
    (
        re.compile(r"(?<![\w-])\d{2} ?\d{3} ?\d{3} ?\d{3}(?![\w-])"),
        re.compile(r"\b(?:Steuer-?ID|Steueridentifikationsnummer|IdNr)\b", re.I),
        _idnr,
    ),
)


def _rfc_ok(number: str) -> bool:
    """Mexican RFC with its check digit (stdnum's ``is_valid`` skips the check digit by default)."""
    try:
        _rfc.validate(number, validate_check_digits=True)
    except ValueError:  # stdnum's ValidationError subclasses ValueError
        return False
    return True


_ZA_LABEL = re.compile(r"\bID\b|\bidentity\b", re.I)

# ids with their label (issue 32, fourth round): (pattern, label before it within 30 characters, checksum
# test, policy). "alone": a passing checksum is enough (a format with letters or separators that rarely occurs by
# chance); "label": the label is needed and then the format alone is enough (a mistyped id after its own
# label is still the id); "both": label and checksum (bare digit runs: a random run passes 1 time in 10-11).
#: the end of an id's label: punctuation / a number word, then the id (nothing else between)
_LABEL_END = r"(?:\s*(?:no\.?|nr\.?|n[º°]\.?|number|IT))?\s*[:#.]?\s*\(?\s*$"


def _sg_nric_ok(v: str) -> bool:
    """Singapore NRIC / FIN check letter (S / T: citizens, F / G: foreigners; weights 2 7 6 5 4 3 2)."""
    total = sum(int(d) * w for d, w in zip(v[1:8], (2, 7, 6, 5, 4, 3, 2)))
    total += 4 if v[0] in "TG" else 0
    table = "JZIHGFEDCBA" if v[0] in "ST" else "XWUTRQPNMLK"
    return v[0] in "STFG" and table[total % 11] == v[8]


def _rodne_cislo_ok(v: str) -> bool:
    """A Czech / Slovak birth number of 10 digits (since 1954): divisible by 11 (or remainder 10 and a last
    digit 0), with a valid month (+50 for women, +20 / +70 since 2004) and day."""
    d = v.replace("/", "")
    if len(d) != 10:
        return False
    n = int(d)
    ok = n % 11 == 0 or (int(d[:9]) % 11 == 10 and d[9] == "0")
    month, day = int(d[2:4]) % 50, int(d[4:6])
    return ok and (1 <= month <= 12 or 21 <= month <= 32) and 1 <= day <= 31


def _hu_tax_ok(v: str) -> bool:
    """A Hungarian tax id (adóazonosító jel): 10 digits starting with 8, sum of digit x position mod 11."""
    return (
        len(v) == 10
        and v[0] == "8"
        and sum(int(c) * i for i, c in enumerate(v[:9], 1)) % 11 == int(v[9])
    )


_LABELLED_IDS = (
    # Mexican RFC (persona física: 4 letters, yymmdd, 3-character homoclave; the last one a check digit)
    (
        re.compile(r"(?<![\w-])[A-ZÑ&]{4}\d{6}[A-Z\d]{2}[\dA](?![\w-])"),
        re.compile(r"\bRFC\b"),
        _rfc_ok,
        "alone",
    ),
    # Mexican CURP: 4 letters, yymmdd, H/M, state, 3 consonants, homonym character, check digit
    (
        re.compile(r"(?<![\w-])[A-Z]{4}\d{6}[HMX][A-Z]{5}[A-Z\d]\d(?![\w-])"),
        re.compile(r"\bCURP\b"),
        _curp.is_valid,
        "alone",
    ),
    # Brazilian CPF: NNN.NNN.NNN-NN (mod 11, two check digits); bare 11 digits need the label
    (
        re.compile(r"(?<![\w.-])\d{3}\.\d{3}\.\d{3}-\d{2}(?![\w-]|\.\d)"),
        re.compile(r"\bCPF\b"),
        _cpf.is_valid,
        "alone",
    ),
    (
        re.compile(r"(?<![\w.-])\d{11}(?![\w-]|\.\d)"),
        re.compile(r"\bCPF\b"),
        _cpf.is_valid,
        "both",
    ),
    # Brazilian RG (no national checksum): only after "RG"
    (
        re.compile(r"(?<![\w.-])\d{1,2}\.\d{3}\.\d{3}-[\dXx](?![\w-])"),
        re.compile(r"\bRG\b"),
        None,
        "label",
    ),
    # South African ID: yymmdd + 7 digits, Luhn; 13 bare digits, so only after "ID" / "identity"
    (
        re.compile(r"(?<![\w-])\d{13}(?![\w-])"),
        _ZA_LABEL,
        _zaid.is_valid,
        "both",
    ),
    # Swedish personnummer: (yy)yymmdd-nnnn, date + Luhn; only after its name
    (
        re.compile(r"(?<![\w-])(?:19|20)?\d{6}[-+]\d{4}(?![\w-])"),
        re.compile(r"\bperson(?:nummer|nr)\b|\bpnr\b", re.I),
        _pnr.is_valid,
        "both",
    ),
    # Turkish T.C. Kimlik No: 11 digits, two check digits; only after "T.C." / "kimlik"
    (
        re.compile(r"(?<![\w-])[1-9]\d{10}(?![\w-])"),
        re.compile(r"\bT\.\s?C\.|\bTC\b|\bkimlik", re.I),
        _tck.is_valid,
        "both",
    ),
    # Irish PPS number: 7 digits + check letter (+ an optional second letter); after "PPS" / "PPSN"
    (
        re.compile(r"(?<![\w-])\d{7}[A-W][A-IW]?(?![\w-])"),
        re.compile(r"\bPPSN?\b|personal public service", re.I),
        _pps.is_valid,
        "label",
    ),
    # Canadian SIN: 9 digits, Luhn; only after "SIN" / "social insurance"
    (
        re.compile(r"(?<![\w-])\d{3}[ -]?\d{3}[ -]?\d{3}(?![\w-])"),
        re.compile(r"\bSIN\b|social insurance", re.I),
        _sin.is_valid,
        "both",
    ),
    # Indian PAN: 5 letters (the 4th the holder type), 4 digits, a letter; after "PAN"
    (
        re.compile(r"(?<![\w-])[A-Z]{5}\d{4}[A-Z](?![\w-])"),
        re.compile(r"\bPAN\b"),
        _pan.is_valid,
        "label",
    ),
    # Indian Aadhaar: 12 digits (Verhoeff check digit); after "Aadhaar" / "UID"
    (
        re.compile(r"(?<![\w-])[2-9]\d{3} ?\d{4} ?\d{4}(?![\w-])"),
        re.compile(r"\baadhaa?r\b|\bUID\b", re.I),
        _aadhaar.is_valid,
        "label",
    ),
    # Portuguese Cartão de Cidadão: 8 digits, check digit, 2 characters, check digit
    (
        re.compile(r"(?<![\w-])\d{8} ?\d ?[A-Z\d]{2}\d(?![\w-])"),
        re.compile(r"Cart[ãa]o de Cidad[ãa]o|\bCC\b", re.I),
        _ptcc.is_valid,
        "alone",
    ),
    # sixth round: ids right after their own label even when a writer's check digit fails (the checksummed
    # rules above still take them anywhere when it passes); the label must end just before the id
    (_DNI, re.compile(r"\b(?:DNI|NIE|NIF|D\.N\.I\.|N\.I\.E\.)" + _LABEL_END), None, "label"),
    (
        _CF,
        re.compile(
            r"(?i:codice fiscale|cod\. ?fisc(?:ale)?\.?|c[óo]d\. fiscal(?: IT)?)|\bC\.F\."
            + _LABEL_END
        ),
        None,
        "label",
    ),
    # bare digit runs keep the round-4 rule: label and check digit (Romanian CNP, Greek AMKA: Luhn); the
    # Nigerian NIN has no check digit: its label alone
    (
        re.compile(r"(?<![\w-])[1-8]\d{12}(?![\w-])"),
        re.compile(r"\bCNP" + _LABEL_END),
        _cnp.is_valid,
        "both",
    ),
    (
        re.compile(r"(?<![\w-])\d{11}(?![\w-])"),
        re.compile(r"\bAMKA" + _LABEL_END),
        _amka.is_valid,
        "both",
    ),
    (re.compile(r"(?<![\w-])\d{11}(?![\w-])"), re.compile(r"\bNIN" + _LABEL_END), None, "label"),
    # French / Belgian social security number (NIR shape) after its name
    (
        _NIR,
        re.compile(
            r"(?i:s[ée]curit[ée] sociale|sociaal zekerheidsn(?:umme)?r\.?|\bNIR\b|n° ?SS)"
            + _LABEL_END
        ),
        None,
        "label",
    ),
    # Spanish social security affiliation number: 28/10458732/61
    (
        re.compile(r"(?<![\w/-])\d{2}/?\d{8}/?\d{2}(?![\w/-])"),
        re.compile(r"(?i:afiliaci[óo]n|\bNUSS\b|seguridad social|\bS\.S\.)" + _LABEL_END),
        None,
        "label",
    ),
    # Argentine DNI / Colombian cédula written with thousands dots: "DNI 32.458.119", "C.C. 16.789.452"
    (
        re.compile(r"(?<![\w.-])\d{1,3}(?:\.\d{3}){2,3}(?![\w-]|\.\d)"),
        re.compile(r"(?:\bDNI|(?i:c[ée]dula(?: de ciudadan[íi]a)?)|\bC\.C\.?|\bCC)" + _LABEL_END),
        None,
        "label",
    ),
    # Finnish henkilötunnus (check character), Swiss AHV / AVS number (EAN-13 check digit)
    (
        re.compile(r"(?<![\w-])\d{6}[-+A]\d{3}[0-9A-Y](?![\w-])"),
        re.compile(r"(?i:henkilötunnus|\bhetu\b|personbeteckning)" + _LABEL_END),
        _hetu.is_valid,
        "alone",
    ),
    (
        re.compile(r"(?<![\w.-])756\.\d{4}\.\d{4}\.\d{2}(?![\w-]|\.\d)"),
        re.compile(r"\b(?:AHV|AVS)\b[^\n\d]{0,30}$"),
        _chssn.is_valid,
        "alone",
    ),
    # New Zealand NHI, Czech rodné číslo, German health insurance number, UK NI number (any prefix after
    # its label: "QQ 12 34 56 C"), an ID card's letters + digits (a bare 13-digit South African ID still needs
    # "ID" and its Luhn digit: the round-4 rule above)
    (
        re.compile(r"(?<![\w-])[A-HJ-NP-Z]{3}\d{4}(?![\w-])"),
        re.compile(r"\bNHI" + _LABEL_END),
        None,
        "label",
    ),
    (  # (seventh round: a 10-digit one with its mod-11 check needs no label; "r. č." is a label)
        re.compile(r"(?<![\w/-])\d{6}/\d{3,4}(?![\w/-])"),
        re.compile(r"(?i:rodné číslo|rodne cislo|\bRČ|\br\.[ \t]?č\.)" + _LABEL_END),
        _rodne_cislo_ok,
        "alone",
    ),
    (
        re.compile(r"(?<![\w-])[A-Z]\d{9}(?![\w-])"),
        re.compile(
            r"(?i:versicherten-?n(?:umme)?r\.?|krankenversichertennummer|\bKVNR)" + _LABEL_END
        ),
        None,
        "label",
    ),
    (
        re.compile(r"(?<![\w-])[A-Z]{2} ?\d{2} ?\d{2} ?\d{2} ?[A-D](?![\w-])"),
        re.compile(
            r"(?i:national insurance(?: n(?:umbe)?r\.?| no\.?)?|\bNINO|\bNI n(?:umbe)?r\.?)[^\n\d]{0,6}$"
        ),
        None,
        "label",
    ),
    # seventh round: Singapore NRIC / FIN (check letter), Indonesian NIK / BPJS, Kenyan KRA PIN and ID number
    # (the label at a line start or after punctuation: not "Order ID No."), Hungarian tax id, Polish ID card
    (
        re.compile(r"(?<![\w-])[STFG]\d{7}[A-Z](?![\w-])"),
        re.compile(r"(?i:\bNRIC|\bFIN\b|\bIC\b|passport)[^\n]{0,20}$"),
        _sg_nric_ok,
        "alone",
    ),
    (
        re.compile(r"(?<![\w-])\d{16}(?![\w-])"),
        re.compile(r"(?:\bNIK|\bNo\.? KTP)" + _LABEL_END),
        None,
        "label",
    ),
    (
        re.compile(r"(?<![\w-])\d{11,13}(?![\w-])"),
        re.compile(r"(?:\bBPJS(?: Kesehatan)?)" + _LABEL_END),
        None,
        "label",
    ),
    (
        re.compile(r"(?<![\w-])[AP]\d{9}[A-Z](?![\w-])"),
        re.compile(r"(?:\bKRA PIN)" + _LABEL_END),
        None,
        "label",
    ),
    (
        re.compile(r"(?<![\w-])\d{7,9}(?![\w-])"),
        re.compile(r"(?:^|[\n(;,]|: )[ \t]*(?i:ID)\s*(?:No\.?|Number|Nr\.?)\s*[:#.]?\s*$"),
        None,
        "label",
    ),
    (
        re.compile(r"(?<![\w-])8\d{9}(?![\w-])"),
        re.compile(r"(?i:adóazonosító(?: jel)?|adoazonosito(?: jel)?)" + _LABEL_END),
        _hu_tax_ok,
        "both",
    ),
    (
        re.compile(r"(?<![\w-])[A-Z]{3} ?\d{6}(?![\w-])"),
        re.compile(
            r"(?i:dow(?:ó|o)d(?:u)?(?: osobist\w*)?|nr dowodu(?: osobistego)?)" + _LABEL_END
        ),
        None,
        "label",
    ),
    (
        re.compile(r"(?<![\w-])[A-Z]{1,2} ?\d{6,7}(?![\w-])"),
        re.compile(
            r"(?i:id card|identity card|carte d'identité|ausweis(?:nummer|-nr\.?)?|ταυτότητα)"
            + _LABEL_END
        ),
        None,
        "label",
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


def nhs_ok(number: str) -> bool:
    """UK NHS number check digit (mod 11, weights 10..2; a remainder giving 10 is invalid)."""
    ds = [int(c) for c in digits(number)]
    if len(ds) != 10:
        return False
    check = 11 - sum(d * w for d, w in zip(ds[:9], range(10, 1, -1))) % 11
    check = 0 if check == 11 else check
    return check != 10 and check == ds[9]


def find_ssns(text: str, score: float = 0.9) -> list[PIISpan]:
    """US SSNs: ``123-45-6789`` / ``123 45 6789`` (area not 000 / 666 / 9xx, group not 00, serial not
    0000), or nine bare digits right after ``SSN`` / ``social security number``."""
    out = [PIISpan(m.start(), m.end(), "SSN", score, "regex") for m in _SSN.finditer(text)]
    out += [PIISpan(m.start(1), m.end(1), "SSN", score, "regex") for m in _SSN_BARE.finditer(text)]
    return out


def find_cards(text: str, score: float = 0.95) -> list[PIISpan]:
    """Card numbers: 13-19 digits (spaces / dashes allowed) passing the Luhn check."""
    return [
        PIISpan(m.start(), m.end(), "CREDIT_CARD", score, "regex")
        for m in _CARD.finditer(text)
        if 13 <= len(digits(m.group())) <= 19
        and luhn_ok(m.group())
        and not _za_id_after_label(text, m)  # 13 digits, Luhn: also a South African ID number
    ]


def _za_id_after_label(text: str, m: re.Match[str]) -> bool:
    return (
        len(m.group()) == 13
        and bool(_ZA_LABEL.search(text[max(0, m.start() - 30) : m.start()]))
        and _zaid.is_valid(m.group())
    )


def find_national_ids(text: str, score: float = 0.95) -> list[PIISpan]:
    """National ids that carry a checksum or a strict format (``NATIONAL_ID``): UK NHS numbers (mod 11,
    with ``NHS`` within 40 characters before: a bare 3-3-4 digit run is more often a phone), Spanish DNI /
    NIE (letter check), French NIR (mod 97), UK National Insurance numbers (format only: no checksum),
    Italian codice fiscale (check letter); digit-only ids whose checksum a random digit run passes 1 time in
    10-11 only after their name: Polish PESEL, Dutch BSN (11-test), Portuguese NIF, German Steuer-ID."""
    out = []
    for m in _NHS.finditer(text):
        if nhs_ok(m.group()) and _NHS_CONTEXT.search(text[max(0, m.start() - 40) : m.start()]):
            out.append(PIISpan(m.start(), m.end(), "NATIONAL_ID", score, "regex"))
    for m in _DNI.finditer(text):
        s = m.group().replace("-", "").replace(" ", "")
        if _dni.is_valid(s) or _nie.is_valid(s):
            out.append(PIISpan(m.start(), m.end(), "NATIONAL_ID", score, "regex"))
    for m in _NIR.finditer(text):
        if _nir.is_valid(m.group()):
            out.append(PIISpan(m.start(), m.end(), "NATIONAL_ID", score, "regex"))
    for m in _NINO.finditer(text):
        out.append(PIISpan(m.start(), m.end(), "NATIONAL_ID", round(score * 0.85, 4), "regex"))
    for m in _CF.finditer(text):
        if _cf.is_valid(m.group()):
            out.append(PIISpan(m.start(), m.end(), "NATIONAL_ID", score, "regex"))
    for pat, ctx, mod in _DIGIT_IDS:
        for m in pat.finditer(text):
            if ctx.search(text[max(0, m.start() - 30) : m.start()]) and mod.is_valid(m.group()):
                out.append(PIISpan(m.start(), m.end(), "NATIONAL_ID", score, "regex"))
    for pat, ctx, check, policy in _LABELLED_IDS:
        for m in pat.finditer(text):
            labelled = bool(ctx.search(text[max(0, m.start() - 30) : m.start()]))
            valid = check is not None and check(m.group())
            if (
                (policy == "alone" and (valid or labelled))
                or (policy == "label" and labelled)
                or (policy == "both" and labelled and valid)
            ):
                out.append(PIISpan(m.start(), m.end(), "NATIONAL_ID", score, "regex"))
    seen: set[tuple[int, int]] = (
        set()
    )  # one span per position (a checksummed and a labelled rule agree)
    return [sp for sp in out if (sp.start, sp.end) not in seen and not seen.add((sp.start, sp.end))]


# ------------------------------------------------------------------------------------------------ IP, IBAN
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\w|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_IBAN = re.compile(r"(?<![\w-])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![\w-])")
#: an account label before an IBAN (within 40 characters, on its line)
_IBAN_LABEL = re.compile(
    r"(?i:\bIBAN|\bcuenta|\bcompte|\bconto|\bkonto|\brekening|\baccount|\bbank|\bBankverbindung|"
    r"\bkontonummer|\brachunek|\bconta|\bnómina|\bnomina)[^\n]{0,30}$"
)


def find_ips(text: str, score: float = 0.95) -> list[PIISpan]:
    """IPv4 / IPv6 addresses (validated by :mod:`ipaddress`); a port or prefix length stays outside."""
    out = []
    for m in _IPV4.finditer(text):
        try:
            ipaddress.IPv4Address(m.group())
        except ValueError:
            continue
        out.append(PIISpan(m.start(), m.end(), "IP_ADDRESS", score, "regex"))
    for m in _IPV6.finditer(text):
        g = m.group()
        if g.count(":") < 2 or not re.search(r"[0-9A-Fa-f]", g):
            continue
        try:
            ipaddress.IPv6Address(g)
        except ValueError:
            continue
        out.append(PIISpan(m.start(), m.end(), "IP_ADDRESS", score, "regex"))
    return out


def iban_shape_ok(number: str) -> bool:
    """The IBAN registry's structure for its country (length and character classes of the BBAN), whatever
    its check digits: a mistyped IBAN after an account label is still the account holder's."""
    c = _iban.compact(number)
    try:  # python-stdnum's registry (private names: a version without them gives False, never a crash)
        info = _iban._ibandb.info(c)
        bban = info[0][1].get("bban", "") if info and info[0][1] else ""
        return bool(bban) and bool(_iban._struct_to_re(bban).match(c[4:]))
    except (AttributeError, IndexError, TypeError):
        return False


def find_ibans(text: str, score: float = 0.97) -> list[PIISpan]:
    """IBANs, compact or in groups of four, whose mod-97 checksum holds (``python-stdnum``); the longest
    valid prefix of a candidate is taken, so a following capitalised word is never swallowed. After an
    account label (``IBAN``, ``cuenta``, ``compte``, ``Konto`` ...: seventh round) a string with the registry's
    structure for its country is taken even when a check digit fails (a writer's or a user's slip)."""
    out = []
    for m in _IBAN.finditer(text):
        g = m.group()
        for end in range(len(g), 14, -1):
            if g[end - 1] != " " and (end == len(g) or g[end] == " ") and _iban.is_valid(g[:end]):
                out.append(PIISpan(m.start(), m.start() + end, "IBAN", score, "regex"))
                break
        else:
            if _IBAN_LABEL.search(text[max(0, m.start() - 40) : m.start()]):
                for end in range(len(g), 14, -1):
                    if (
                        g[end - 1] != " "
                        and (end == len(g) or g[end] == " ")
                        and iban_shape_ok(g[:end])
                    ):
                        out.append(
                            PIISpan(
                                m.start(), m.start() + end, "IBAN", round(score * 0.9, 4), "regex"
                            )
                        )
                        break
    return out


# ------------------------------------------------------------------------------------------------ postcodes
_US_STATES = (
    "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY "
    "NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY"
).split()
_UK_POSTCODE = re.compile(
    r"(?<![\w-])(?:[A-PR-UWYZ][A-HK-Y]?\d[A-HJKPS-UW\d]?|GIR) ?\d[ABD-HJLNP-UW-Z]{2}(?![\w-])"
)
# a state code after a comma ("Boise, ID 83702"; not "Employee ID 55120") or after "ZIP"
_US_ZIP = re.compile(
    r"(?:(?:,\s*|^)(?:"
    + "|".join(_US_STATES)
    + r"),?\s+|\b(?i:zip)(?:\s*(?i:code))?\"?:?\s*\"?)(\d{5}(?:-\d{4})?)(?![\w-])",
    re.M,
)
# Irish Eircode: routing key + unique identifier ("D02 X285", "H91 E2K3")
_EIRCODE = re.compile(r"(?<![\w-])(?:[AC-FHKNPRTV-Y]\d{2}|D6W) ?[0-9AC-FHKNPRTV-Y]{4}(?![\w-])")
# continental: a 4-5 digit code (NL: 4 digits + 2 letters) before a capitalised town, at the start of a
# line / after a comma, or with a country prefix (D-10115, F-75011)
_EU_POSTCODE = re.compile(
    r"(?:(?<=,)\s*|(?<=^)|(?<=\n)|(?<=\bCP )|(?<=\bPLZ )|(?<=\b[DFEIAB]-))"
    r"(\d{4}-\d{3}|\d{2}-\d{3}|\d{5}|\d{4} ?[A-Z]{2}|\d{4})(?=\s+[A-ZÀ-ÞŁŚŻŹĆŃ][a-zà-ÿąćęłńóśźż]+)",
    re.M,
)


# Australian: a state / territory after the town, then four digits ("Ballarat VIC 3350", "Annandale NSW 2038")
_AU_POSTCODE = re.compile(r"\b[A-Z][a-z]+,? (?:NSW|VIC|QLD|SA|WA|TAS|ACT|NT)\s+(\d{4})(?![\w-])")
# any code after a postcode label ("Código postal: 41001", "PLZ / Ort: 70173", "CAP 20121", "kod pocztowy")
_LABELLED_POSTCODE = re.compile(
    r"\b(?:post\s?code|postal\s+code|zip\s+code|c[óo]digo\s+postal|cod\.\s*postal|c\.\s?p\.|"
    r"code\s+postal|(?-i:PLZ|CAP|CEP)|postleitzahl|postcode|kod\s+pocztowy|eircode|postnr|postnummer)\b"
    r"(?:\s*/\s*[A-Za-zÀ-ÿ]+)?\s*[:.]?\s*"
    r"(\d{4}-\d{3}|\d{2}-\d{3}|\d{3}-\d{4}|\d{5}-\d{3}|\d{5}(?:-\d{4})?|\d{3}\s\d{2}|\d{4}\s?[A-Z]{2}|\d{4})"
    r"(?![\w-])",
    re.I,
)
# Japanese: NNN-NNNN after 〒 or with a Japanese address nearby ("Shibuya-ku, Tokyo 150-0001")
# (``\d`` also matches full-width digits; the dash may be full-width too: "〒150－0002")
_JP_POSTCODE = re.compile(r"(?<![\w-])(?:〒\s?)?(\d{3}[-－‐]\d{4})(?![\w-])")
_JP_CONTEXT = re.compile(
    r"〒|\b[A-Z][a-z]+-(?:ku|shi|ken|cho|machi|gun)\b|\b(?:Tokyo|Osaka|Kyoto|Nagoya|Yokohama|Sapporo|"
    r"Fukuoka|Kobe|Sendai|Hiroshima|Japan)\b"
)

# Canadian: A1A 1A1 after a province / territory code ("Montréal QC H2X 3J6"); letters D F I O Q U never occur
_CA_POSTCODE = re.compile(
    r"\b(?:AB|BC|MB|NB|NL|NS|NT|NU|ON|PE|QC|SK|YT),?\s+"
    r"([ABCEGHJ-NPRSTVXY]\d[ABCEGHJ-NPRSTV-Z] ?\d[ABCEGHJ-NPRSTV-Z]\d)(?![\w-])"
)
# the Canadian shape written on its own ("postal code (H2J 3K5)", "G1J 2E6"): letter-digit-letter, one space,
# digit-letter-digit, with Canada Post's letter rules (no D F I O Q U; no W Z first); without the space or with
# lower case it stays a label's or province's case (product codes are written without the space or in lower case)
_CA_POSTCODE_BARE = re.compile(
    r"(?<![\w-])([ABCEGHJ-NPRSTVXY]\d[ABCEGHJ-NPRSTV-Z] \d[ABCEGHJ-NPRSTV-Z]\d)(?![\w-])"
)
# Indian PIN: six digits (first 1-9) after "<Town> - " ("Bengaluru - 560038"); a label is handled above
# or after "PIN code" / "Pincode" / "PIN:" (six digits only: a four-digit "PIN" is a bank PIN)
_IN_PIN = re.compile(
    r"(?:\b[A-Z][a-z]{2,}\s?[-–]|\b(?i:pin\s?code)\b:?|\bPIN\b:?)\s?([1-9]\d{5})(?![\w-])"
)
# Swedish: NNN NN before a capitalised town at a line start / after a comma ("136 40 Handen")
_SE_POSTCODE = re.compile(r"(?:(?<=,)\s*|(?<=^))(\d{3} \d{2})(?=\s+[A-ZÅÄÖ][a-zåäö]+)", re.M)
# Brazilian CEP: NNNNN-NNN after a state code ("São Paulo - SP, 01451-000"); "CEP" is a label above
_BR_CEP = re.compile(
    r"\b(?:AC|AL|AP|AM|BA|CE|DF|ES|GO|MA|MT|MS|MG|PA|PB|PR|PE|PI|RJ|RN|RS|RO|RR|SC|SP|SE|TO),?\s+"
    r"(\d{5}-\d{3})(?![\w-])"
)


#: the rest of a street-address line: ", <Town of 1-3 capitalised words> <4-6 digits>" at its end
_TOWN_CODE_TAIL = re.compile(
    r",[ \t]*(?:[A-ZÀ-Þ][\w'’.-]*[ \t]+){1,3}(?P<pc>\d{4,6})[ \t]*[.;]?[ \t]*$"
)
#: words that make the number after them a unit / room, not a postcode
_UNIT_BEFORE_NUMBER = frozenset(
    "suite ste room rm floor fl level lvl apt apartment unit flat box building bldg block blk lot plot "
    "office desk gate dock bay pier no nr number ext extension ref order invoice".split()
)
#: a ZIP right after the street and its comma ("1108 Duhon Rd, 70506.")
_COMMA_ZIP = re.compile(r",[ \t]*(?P<pc>\d{5})(?=[ \t]*(?:[.;,]|$))")
#: Singapore: "Singapore 460412", ", S(380015)"
_SG_POSTCODE = re.compile(r"\bSingapore[ \t]+(\d{6})\b|,[ \t]*S\((\d{6})\)")


def find_postcodes(text: str, score: float = 0.8) -> list[PIISpan]:
    """UK postcodes (``NW1 6XE``), US ZIP codes after a state or ``ZIP`` (``CA 94105``), Australian codes
    after the state (``VIC 3350``), any code after a postcode label (``Código postal: 41001``, ``PLZ:
    70173``), Japanese ``NNN-NNNN`` with a Japanese address around it, continental
    codes before a town at a line start / after a comma / after ``D-`` (``28013 Madrid``, ``1012 AB
    Amsterdam``, Portuguese ``1100-048 Lisboa``, Polish ``00-238 Warszawa``) and Irish Eircodes
    (``D02 X285``: letters and digits mixed in the last four)."""
    out = [
        PIISpan(m.start(), m.end(), "POSTCODE", score, "regex") for m in _UK_POSTCODE.finditer(text)
    ]
    out += [
        PIISpan(m.start(1), m.end(1), "POSTCODE", score, "regex") for m in _US_ZIP.finditer(text)
    ]
    for m in _EIRCODE.finditer(text):
        if re.search(r"[A-Z]", m.group()[3:]) and re.search(r"\d", m.group()[3:]):
            out.append(PIISpan(m.start(), m.end(), "POSTCODE", score, "regex"))
    for m in _EU_POSTCODE.finditer(text):
        a = m.start(1)
        out.append(PIISpan(a, m.end(1), "POSTCODE", round(score * 0.9, 4), "regex"))
    for pat in (
        _AU_POSTCODE,
        _LABELLED_POSTCODE,
        _CA_POSTCODE,
        _CA_POSTCODE_BARE,
        _IN_PIN,
        _SE_POSTCODE,
        _BR_CEP,
    ):
        out += [
            PIISpan(m.start(1), m.end(1), "POSTCODE", round(score * 0.9, 4), "regex")
            for m in pat.finditer(text)
        ]
    # seventh round: the code after the town that ends a street-address line ("118 Church Street, Parramatta
    # 2150", "56 Te Mata Road, Havelock North 4130", "1108 Duhon Rd, 70506."), Singapore's six digits
    for st in find_addresses(text):
        eol = text.find("\n", st.end)
        rest = text[st.end : len(text) if eol < 0 else eol]
        m = _TOWN_CODE_TAIL.search(rest) or _COMMA_ZIP.match(rest)
        if m is not None and not (
            set(re.findall(r"[^\W\d_]+", m.group().lower())) & _UNIT_BEFORE_NUMBER
        ):  # "Suite 1200", "Room 2210": a unit, not a town and its code
            a = st.end + m.start("pc")
            out.append(PIISpan(a, st.end + m.end("pc"), "POSTCODE", round(score * 0.9, 4), "regex"))
    for m in _SG_POSTCODE.finditer(text):
        g = 1 if m.group(1) else 2
        out.append(PIISpan(m.start(g), m.end(g), "POSTCODE", round(score * 0.9, 4), "regex"))
    for m in _JP_POSTCODE.finditer(text):
        a = m.start(1)
        if re.search(r"[\d)]", text[max(0, a - 3) : a]):
            continue  # the tail of a phone number: "(503) 555-0172"
        if m.group().startswith("〒") or _JP_CONTEXT.search(text[max(0, a - 80) : a + 80]):
            out.append(PIISpan(a, m.end(1), "POSTCODE", round(score * 0.9, 4), "regex"))
    seen: set[tuple[int, int]] = (
        set()
    )  # one span per position (a Canadian code after its province: two rules)
    return [sp for sp in out if (sp.start, sp.end) not in seen and not seen.add((sp.start, sp.end))]


# ------------------------------------------------------------------------------------------------ usernames
_UCHARS = r"[A-Za-z0-9][A-Za-z0-9._-]{1,38}"
#: a value shaped like a login: lower case, and a digit, "." or "_" inside ("dellison79", "solveig.aa")
_LOGIN = (
    r"(?:[a-z][a-z0-9]*[._][a-z0-9]+(?:[._-][a-z0-9]+)*|[a-z]+[0-9][a-z0-9]*(?:[._-][a-z0-9]+)*)"
)
_VPA_BANKS = (
    r"(?:okaxis|okicici|okhdfcbank|oksbi|ybl|paytm|upi|apl|ibl|axl|axisbank|icici|hdfcbank|sbi|kotak|"
    r"yesbank|barodampay|freecharge)"
)
_VPA = re.compile(r"@" + _VPA_BANKS + r"$")
_USER_PATTERNS = (
    # "Username: jdoe", "user=jdoe", JSON "user":"jdoe" (not "imap-login: Disconnected": a word before "-")
    re.compile(
        r"(?<![\w-])(?:user(?:[ _-]?name)?|login|log-in|uid|user[ _-]?id|account|acct|handle|usuario|"
        r"usu[aá]rio|utilisateur|identifiant|benutzer(?:name)?|nom d'utilisateur|gebruiker(?:snaam)?|compte|"
        r"utente|nome utente|użytkownik|uzytkownik|login_name|conta|cuenta|konto|nutzer|usr)"
        r"['\"]?\s*[:=]\s*['\"]?(" + _UCHARS + ")",
        re.I,
    ),
    # key=value / JSON of other keys that name a person's login in logs ("Kunde=h.bauer1971",
    # "target":"kmurphy", "actor":"jdoe")
    re.compile(
        r"(?<![\w-])['\"]?(?:kunde|customer|client|cliente|target|actor|member|assignee|owner|author)"
        r"['\"]?\s*(?:=|:(?=\s*\"))\s*['\"]?([a-z][a-z0-9._-]{1,38})(?![\w@])",
        re.I,
    ),
    # GitHub-style threads: "**kenji-w** commented", "Opened by t-nakamura-dev on", "Co-authored-by: jdoe <"
    re.compile(
        r"\*\*("
        + _UCHARS
        + r")\*\*\s+(?:commented|opened|wrote|replied|reviewed|approved|merged|closed|"
        r"reacted|mentioned|edited)\b"
    ),
    re.compile(
        r"\b(?:Opened|Reported|Created|Filed|Assigned|Reviewed|Closed|Merged|Submitted)\s+by:?\s+@?"
        r"([a-z][a-z0-9._-]{1,38}[a-z0-9])(?=\s+(?:on|at|in)\b|\s*[(,]|\s*$)",
        re.M,
    ),
    re.compile(r"\bCo-authored-by:\s+(" + _UCHARS + r")\s+<"),
    # a service's field: "GitHub: jjkreyes", "Discord: ponpon#4412"
    re.compile(
        r"\b(?:GitHub|GitLab|Bitbucket|Discord|Slack|Telegram|Skype|Reddit|Steam|Twitch|Mastodon|Signal|"
        r"Threema|Keybase|Xbox|PSN)\s*:\s*@?([A-Za-z0-9][A-Za-z0-9._-]{1,38}(?:#\d{4})?)(?![\w@])"
    ),
    # a login after "as" / "account" / "agent" ("log in as dellison79", "my account ohara.siobhan",
    # "account name is summerbrooks_88", "Login fürs Portal ist lhoffmann2")
    re.compile(
        r"\b(?i:account(?:\s+name)?(?:\s+is)?|agent|konto|účet|tai khoan|conta|cuenta|compte)\s+"
        r"(" + _LOGIN + r")(?![\w@]|\.[a-z])"
    ),
    re.compile(
        r"\b(?i:log(?:ged)?[ -]?(?:in|on)|sign(?:ed)?[ -]?in|connected|authenticated)\b[^.\n]{0,30}?"
        r"\bas\s+(" + _LOGIN + r")(?![\w@]|\.[a-z])"
    ),
    re.compile(
        r"\blogin\b[^.\n]{0,30}?\b(?:ist|is|es|est|è|é)\s+(" + _LOGIN + r")(?![\w@]|\.[a-z])", re.I
    ),
    # a login before a person's name in brackets, or after one: "tuan.ngo (Ngo Anh Tuan)", "Hemi (hemi-p)"
    re.compile(r"(?<![\w@./])(" + _LOGIN + r")\s+\((?=[A-ZÀ-Þ][\w'’-]+(?:\s+[A-ZÀ-Þ][\w'’-]+)+\))"),
    re.compile(
        r"(?<![\w.-])[A-ZÀ-Þ][\w'’-]+[ \t]+\(([a-z]{2,}[a-z0-9]{0,20}(?:[._-][a-z0-9]{1,20})+)\)(?!:)"
    ),
    # a UPI payment address (VPA): "ravi.teja88@okaxis"
    re.compile(r"(?<![\w.])([a-z0-9][a-z0-9._-]{1,40}@" + _VPA_BANKS + r")(?![\w.@])"),
    # a plain login after a label, before its owner's name: "Reporter: hkristoffersen (Håkon Kristoffersen)"
    re.compile(
        r"(?<=:)[ \t]+([a-z]{4,20})[ \t]+\((?=[A-ZÀ-Þ][\w'’-]+(?:[ \t]+[A-ZÀ-Þ][\w'’-]+)+\))"
    ),
    re.compile(
        r"\b(?:for|by|from)\s+(?:invalid\s+|unknown\s+)?user\s+['\"]?(" + _UCHARS + ")", re.I
    ),
    # "username is jdoe", "username jdoe1987" (without "is" the value must look like a login: a digit,
    # "_" or "." inside)
    re.compile(r"\b(?:user[ _-]?name|login|handle)\s+is\s+['\"]?(" + _UCHARS + ")", re.I),
    re.compile(
        r"\b(?:user[ _-]?name|login)\s+['\"]?([A-Za-z][A-Za-z0-9._-]*[0-9_][A-Za-z0-9._-]*)", re.I
    ),
    re.compile(
        r"\buser\s+['\"]?(" + _UCHARS + r")['\"]?\s+(?:logged|signed|failed|authenticated|"
        r"locked|connected|disconnected|was|has|from|changed|reset)\b",
        re.I,
    ),
    re.compile(r"\blogged (?:in|on) as\s+['\"]?@?(" + _UCHARS + ")", re.I),
    re.compile(r"\bsudo:\s+(" + _UCHARS + r")\s*:"),
    # sshd: "Accepted password for fweber from", "Failed publickey for jdoe from"
    re.compile(
        r"\b(?:Accepted|Failed)\s+(?:password|publickey|keyboard-interactive(?:/pam)?|none)\s+for\s+"
        r"(?:invalid\s+user\s+)?(" + _UCHARS + r")\s+from\b"
    ),
    # dovecot / postfix style: user=<sgreene>
    re.compile(r"\buser=<(" + _UCHARS + ")>"),
    # a home directory names its user: /home/jdoe, /Users/jdoe, C:\\Users\\jdoe
    re.compile(r"(?:/home/|/Users/|\\Users\\)(" + _UCHARS + ")"),
    # "user jdoe", "Benutzer lmueller", "utilisateur aperrin" in a log line: the value looks like a login
    # (lower case, no space) and a log verb / preposition follows, or it carries a digit, "_" or "."
    re.compile(
        r"\b(?:user|benutzer|utilisateur|usuario|utente|gebruiker|użytkownik)\s+['\"]?"
        r"([a-z][a-z0-9._-]*[0-9_.][a-z0-9._-]*[a-z0-9]|[a-z][a-z0-9_-]{2,30})['\"]?"
        r"(?=\s+(?:logged|signed|failed|authenticated|locked|connected|disconnected|assigned|from|"
        r"von|depuis|desde|via|session)\b)",
        re.I,
    ),
    re.compile(
        r"\b(?:user|benutzer|utilisateur|usuario|utente|gebruiker|użytkownik)\s+['\"]?"
        r"([a-z][a-z0-9]*[._][a-z0-9._]*[a-z0-9]|[a-z]+[0-9]+[a-z0-9]*)(?![\w@])"
    ),
    re.compile(r"\bsu(?:\[\d+\])?:.*?\bby\s+(" + _UCHARS + ")"),
    # (_N_USER_PATTERNS_6 = the patterns above) seventh round: a login after a label that names an account ("Assignee: jmorales", "Benutzerkonto:
    # kpoeschl", "Usuario corporativo: gbianchetti", "login Allegro: bartek_krawczyk91", "kakao ID dani_0315"):
    # the value in lower case (a name after "Assignee:" is capitalised and left to the tagger)
    re.compile(
        r"(?<![\w-])(?i:assignee|assigned to|benutzerkonto|benutzerkennung|kennung|anmeldename|"
        r"(?:usuario|usuário|utilisateur|utente|account|konto|compte|conta|cuenta)[ \t]+"
        r"(?:corporativo|corporativa|de red|interno|interne|intern|aziendale|windows|ad|ldap|sso|vpn)|"
        r"login[ \t]+(?-i:[A-Z][\w.-]*)(?=[ \t]*:)|"
        r"(?:kakao(?:talk)?|line|wechat|telegram|skype|viber|signal)[ \t]+id)"
        r"[ \t]*(?::[ \t]*|[ \t]+(?:(?:is|ist|es|est|è|é|är|er)[ \t]+)?)"
        r"([a-z][a-z0-9._-]{1,38}[a-z0-9])(?![\w@]|\.[a-z])"
    ),
    # a note signed with a login in brackets at a line start: "Interne Notiz (it-mpichler):", "Nota técnica
    # (atavares):"; and a person's login in brackets after a name it contains: "Rui Nuno Carvalho (rncarvalho)"
    re.compile(
        r"(?m)^[ \t]*(?:[A-ZÀ-Þ]\w*[ \t]+)?(?i:not(?:iz|a|e|es|atka)|kommentar|comentario|comentário|"
        r"commentaire|comment|anmerkung|remarque|opmerking)(?:[ \t]+\w+)?[ \t]+"
        r"\(([a-z][a-z0-9._-]{2,30}[a-z0-9])\):"
    ),
)
_N_USER_PATTERNS_6 = len(_USER_PATTERNS) - 2
#: a marketplace / chat speaker whose name is a login ("bargainhunter_77: hi is the cot still available?",
#: "Becca.J: Hi yes", "From kiwi_fishn_dad: Kia ora", "Maxime_L : Bonjour"): login-shaped (a "_" or "." inside,
#: or letters then two digits or more) at the very start of a line (an indented "config.guess:" / "utf8:" is a
#: changelog's file or function), a colon, then a sentence (two words of two letters or more)
_CHAT_LOGIN = re.compile(
    r"^(?:From[ \t]+)?([A-Za-z][A-Za-z0-9]*(?:[._][A-Za-z0-9]+)+_?|[A-Za-z]{2,}[0-9]{2,}(?:_[A-Za-z0-9]+)*)"
    r"[ \t]?:[ \t]+(?=[^\n]*?[^\W\d_]{2,}[^\n]*?\b[^\W\d_]{2,})",
    re.M,
)
#: a login in brackets after its owner's name, which it contains ("Rui Nuno Carvalho (rncarvalho)")
_NAME_LOGIN = re.compile(
    r"(?<![\w.-])([A-ZÀ-Þ][\w'’-]{2,})[ \t]+\(([a-z][a-z0-9._-]{2,30})\)(?![\w:])"
)
# a public profile URL names its owner: github.com/jwreed-dev, linkedin.com/in/jane-doe-12
_PROFILE_URL = re.compile(
    r"\b(?:github\.com|gitlab\.com|bitbucket\.org|linkedin\.com/in|twitter\.com|x\.com|"
    r"instagram\.com|facebook\.com|tiktok\.com/@|medium\.com/@|keybase\.io|behance\.net|"
    r"dribbble\.com)/@?([A-Za-z0-9][A-Za-z0-9._-]{1,38}[A-Za-z0-9])(?![\w-])"
)
_PROFILE_RESERVED = frozenset("in company pub about login signup home orgs settings search".split())
# in a log line (it carries a hh:mm:ss time): a login shaped like initial(s) / first name "." surname
# ("t.wagner (ipv4:...)", "[eoin.brennan] Peer Connection"), not a host / file / domain name
_LOG_LINE = re.compile(r"^[^\n]*\b\d{2}:\d{2}:\d{2}\b[^\n]*$", re.M)
_DOTTED_LOGIN = re.compile(r"(?<![\w.@/:=-])([a-z]{1,15}\.[a-z]{2,20})(?![\w.@(/-]|\.[a-z])")
_NOT_LOGINS = frozenset("e.g i.e a.m p.m etc n.b p.s e.v u.s".split())
_NOT_SUFFIX = frozenset(
    "account accounts api auth job jobs worker session sessions pc exe com net org edu gov io co uk de nl fr es it pl pt ie eu info biz local lan internal corp home log txt "
    "conf cfg ini json xml yml yaml service socket target timer mount pid sh py js ts html htm php exe "
    "dll so gz zip tar bak tmp lock sock err out csv pdf doc docx png jpg gif d ko rules key pem crt".split()
)
#: file suffixes of source / build files (changelog lines "parser.c: fix ...")
_SOURCE_SUFFIX = frozenset(
    "c h cc cpp hpp py rs go java rb pl pm md rst in am ac m4 sgml texi s 1 5 8 sub guess".split()
)
_HANDLE = re.compile(
    r"(?<![\w.@/])@[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,28}[A-Za-z0-9_])?(?![\w@-]|\.[A-Za-z])"
)
#: a chat export's speaker line with a login as the name: "kaylee.brooks 9:03 AM"
_SPEAKER_LOGIN = re.compile(
    r"^[ \t]*(" + _LOGIN + r")[ \t]+\[?\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp]\.?[Mm]\.?)?\]?[ \t]*$",
    re.M,
)
_NOT_USERS = frozenset(
    "root admin administrator guest unknown invalid test user users nobody www-data system the a an "
    "is was name id none null anonymous daemon service locked login logon password username "
    "administrador administrateur amministratore beheerder oracle postgres mysql ubuntu pi git ftp "
    "centos debian ec2-user apache nginx mail postfix nagios backup operator support".split()
)


def is_system_account(name: str) -> bool:
    """A system / service account, not a person's login: ``root``, ``admin``, ``oracle``, ``svc_backup``."""
    low = name.lower().lstrip("@")
    return low in _NOT_USERS or low.startswith(("svc_", "svc-", "svc.", "sa_", "srv_", "sys_"))


def _ordinary(word: str, langs: tuple[str, ...] = ("en",)) -> bool:
    """An ordinary word of ``langs`` (Zipf >= 3.5 in wordfreq's lists), not a login: "optional", "urgente"."""
    return word.isalpha() and any(
        zipf_frequency(word.lower(), lang, wordlist="small") >= 3.5 for lang in langs
    )


#: the languages of the label words the login rules read
_LOGIN_LANGS = ("en", "de", "fr", "es", "it", "nl", "pt", "pl")


def find_usernames(text: str, score: float = 0.8) -> list[PIISpan]:
    """Usernames in login / log contexts (``Username: jdoe1987``, ``Failed password for user jdoe``,
    ``session opened for user anna.k``, ``sudo: jdoe :``, ``logged in as m_ortiz``, ``gebruiker=rvl``), the
    owner of a profile URL (``github.com/jdoe``), ``first.last`` logins in log lines and ``@handles``;
    system accounts (``root``, ``admin``, ``www-data``...) are not personal and are left alone."""
    out = []
    for k, pat in enumerate(_USER_PATTERNS):
        for m in pat.finditer(text):
            v = m.group(1).rstrip("._-")
            if is_system_account(v) or ("@" in v and not _VPA.search(v)):
                continue
            if (
                v.isdigit()
                or v.lower() in _NOT_LOGINS
                or v.rsplit(".", 1)[-1].lower() in _NOT_SUFFIX
            ):
                continue  # "uid=1043", "user_id=88211045": a number, not a login; "e.g", "a.m"
            if k >= _N_USER_PATTERNS_6 and _ordinary(v, _LOGIN_LANGS):
                continue  # seventh-round labels: "Note (optional):", "Assignee: everyone"
            a = m.start(1)
            out.append(PIISpan(a, a + len(v), "USERNAME", score, "regex"))
    for m in _PROFILE_URL.finditer(text):
        if m.group(1).lower() not in _PROFILE_RESERVED:
            out.append(PIISpan(m.start(1), m.end(1), "USERNAME", score, "regex"))
    for line in _LOG_LINE.finditer(text):
        for m in _DOTTED_LOGIN.finditer(line.group()):
            v = m.group(1)
            if v.split(".")[1] in _NOT_SUFFIX or v.split(".")[0] in _NOT_SUFFIX:
                continue
            a = line.start() + m.start(1)
            out.append(PIISpan(a, a + len(v), "USERNAME", round(score * 0.9, 4), "regex"))
    for m in _SPEAKER_LOGIN.finditer(text):
        if not is_system_account(m.group(1)):
            out.append(PIISpan(m.start(1), m.end(1), "USERNAME", round(score * 0.9, 4), "regex"))
    for m in _CHAT_LOGIN.finditer(text):
        v, parts = m.group(1), m.group(1).lower().split(".")
        words = [w for w in re.findall(r"[a-z]+", v.lower()) if len(w) >= 2]
        if (
            is_system_account(v)
            or v.lower() in _NOT_LOGINS
            or (len(parts) > 1 and (parts[-1] in _NOT_SUFFIX or parts[0] in _NOT_SUFFIX))
            or parts[-1] in _SOURCE_SUFFIX
            or (
                # words only, each of two letters or more, all ordinary: a key, unless "From" or a digit
                # says login ("max_connections:" vs "From harbour_rat:", "vintage_finds_88:")
                all(_ordinary(w) for w in words)
                and all(len(w) >= 2 for w in re.split(r"[._]", v))
                and not any(c.isdigit() for c in v)
                and not m.group().lstrip().startswith("From")
            )
        ):
            continue  # "index.html:", "org.gnome.Shell:", "e.g:", "parser.c:", "max_connections:"
        out.append(PIISpan(m.start(1), m.end(1), "USERNAME", round(score * 0.85, 4), "regex"))
    for m in _NAME_LOGIN.finditer(text) if "(" in text else ():
        name = unicodedata.normalize("NFKD", m.group(1).lower())
        name = "".join(c for c in name if c.isalpha() and c.isascii())
        if (
            len(name) >= 3
            and name in m.group(2)
            and not is_system_account(m.group(2))
            and not _ordinary(m.group(2), _LOGIN_LANGS)
        ):
            out.append(PIISpan(m.start(2), m.end(2), "USERNAME", round(score * 0.9, 4), "regex"))
    for m in _HANDLE.finditer(text):
        if m.group()[1:].lower() not in _NOT_USERS:
            out.append(PIISpan(m.start(), m.end(), "USERNAME", round(score * 0.9, 4), "regex"))
    return out


# ------------------------------------------------------------------------------------------------ dates
_DAY = r"(?P<d>[0-3]?\d)(?:st|nd|rd|th|er|º|ª|°)?"
_DATE_PATTERNS = (
    # 05/30/2001, 5-30-01, 30.05.2001 (an ISO time may follow: 2001-05-30T10:22)
    re.compile(
        r"(?<![\w/.:-])(?P<a>\d{1,2})(?P<s>[/.-])(?P<b>\d{1,2})(?P=s)(?P<y>\d{4}|\d{2})(?![\w/-]|\.\d)"
    ),
    re.compile(
        r"(?<![\w/.:-])(?P<y>\d{4})(?P<s>[/.-])(?P<a>\d{1,2})(?P=s)(?P<b>\d{1,2})(?=T\d|(?![\w/-]|\.\d))"
    ),
    # May 30, 2001 / May 30th 2001 / Sept. 3, 2001
    re.compile(
        r"(?<!\w)(?P<mon>" + _MONTH_RE + r")\s+" + _DAY + r",?\s+(?P<y>\d{4})(?!\w)",
        re.I,
    ),
    # 30 May 2001 / 30th of May, 2001 / 3 de marzo de 2024 / 3. März 2024 / 12 mars 2024
    re.compile(
        r"(?<![\w.])"
        + _DAY
        + r"\.?\s+(?:of\s+|de\s+)?(?P<mon>"
        + _MONTH_RE
        + "|"
        + _INTL_RE
        + r"),?\s+(?:de\s+|del\s+)?(?P<y>\d{4})(?!\w)",
        re.I,
    ),
    # 12-Nov-25 / 03-Mar-2025 (bank statements, Indian / UK forms)
    re.compile(
        r"(?<![\w-])(?P<d>[0-3]?\d)-(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)-"
        r"(?P<y>\d{4}|\d{2})(?![\w-])",
        re.I,
    ),
)
# without a year (``1st of February``, ``February 1st``, ``14 März``) and month + year (``March 2021``)
_DATE_PARTIAL = (
    re.compile(
        r"(?<![\w.])(?:the\s+)?"
        + _DAY
        + r"\.?\s+(?:of\s+|de\s+)?(?:"
        + _MONTH_RE
        + "|"
        + _INTL_RE
        + r")(?![\w])",
        re.I,
    ),
    re.compile(r"(?<!\w)(?:" + _MONTH_RE + r")\s+" + _DAY + r"(?![\w:]|\s*(?:am|pm)\b)", re.I),
    re.compile(
        r"(?<!\w)(?:" + _MONTH_RE + "|" + _INTL_RE + r")(?:\s+de)?\s+(?:19|20)\d\d(?!\w)", re.I
    ),
    # month / year of a CV period: "10/2014 – 03/2019" (two-digit month only: "3/2019" is as often a ratio)
    re.compile(r"(?<![\w/.,-])(?:0[1-9]|1[0-2])/(?:19|20)\d\d(?![\w/-])"),
)
# a weekday written before a date belongs to it ("Saturday 22 February 2025", "vrijdag 11 juli", "Fri 12
# Dec", "sábado, 8 de março", "Thurs 6th March"): en, nl, de, fr, es, pt, it, sv, pl, tr (English short
# forms capitalised only: "we sat 12 Dec")
_WEEKDAY = (
    r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|(?-i:Mon|Tues?|Wed|Thu(?:rs?)?|Fri|Sat|Sun)|"
    r"maandag|dinsdag|woensdag|donderdag|vrijdag|zaterdag|zondag|"
    r"montag|dienstag|mittwoch|donnerstag|freitag|samstag|sonntag|"
    r"lundi|mardi|mercredi|jeudi|vendredi|samedi|dimanche|"
    r"lunes|martes|miércoles|jueves|viernes|sábado|domingo|"
    r"segunda|terça|quarta|quinta|sexta|(?:segunda|terça|quarta|quinta|sexta)-feira|"
    r"lunedì|martedì|mercoledì|giovedì|venerdì|sabato|domenica|"
    r"måndag|tisdag|onsdag|torsdag|fredag|lördag|söndag|"
    r"poniedziałek|wtorek|środa|czwartek|piątek|sobota|niedziela|"
    r"pazartesi|salı|çarşamba|perşembe|cuma|cumartesi|pazar|"
    r"mandag|tirsdag|onsdag|torsdag|fredag|lørdag|søndag|"
    r"luni|marți|miercuri|joi|vineri|sâmbătă|duminică|kyriaki|deftera|triti|tetarti|pempti|savvato|"
    # seventh round: Czech, Hungarian, Finnish (also essive: "keskiviikkona"), Indonesian / Malay
    r"pondělí|úterý|středa|čtvrtek|pátek|neděle|"
    r"hétfő|kedd|szerda|csütörtök|péntek|szombat|vasárnap|"
    r"(?:maanantai|tiistai|keskiviikko|torstai|perjantai|lauantai|sunnuntai)(?:na)?|"
    r"senin|selasa|rabu|kamis|jumat|jum'at|sabtu|minggu|isnin|khamis|ahad|"
    r"(?-i:Mån|Tis|Ons|Tors?|Fre|Lör|Sön|Lør|Søn))"
)
_WEEKDAY_BEFORE = re.compile(r"(?<!\w)" + _WEEKDAY + r"\.?,?[ \t]+$", re.I)
# a short weekday + day / month without a year ("Qui, 10/04", "vendredi 28/11"): a date only with the weekday
_WEEKDAY_DM = re.compile(
    r"(?<!\w)(?:"
    + _WEEKDAY
    + r"|(?-i:Seg|Ter|Qua|Qui|Sex|Sáb|Dom))\.?,?[ \t]+([0-3]?\d)/([01]?\d)(?![\w/]|\.\d)",
    re.I,
)
# the first day of a range or a pair before a date: "2–6 April 2025", "4 e 5 de fevereiro", "3 and 4 May"
_DAY_RANGE_BEFORE = re.compile(
    r"(?<![\w.,/:-])[0-3]?\d(?:\s?[–-]\s?|\s(?:and|e|y|et|und|en|i|ve|och|a|to|tot|bis|al)\s)$",
    re.I,
)

# a German / Dutch / Polish day and month without the year, both dotted: "vom 22.12. bis 2.1."
# (after a word that introduces a date: a bare "1.2." is as often a section number)
_DOTTED_DAY_MONTH = re.compile(
    r"\b(?:vom|von|am|bis|ab|zum|seit|den|op|tot|van|per|dnia|od|do|le|du|au|del|al|dal)\s"
    r"(([0-3]?\d)\.([01]?\d)\.)(?![\w.]|\d)",
    re.I,
)
# a day and month without the year, slashed, after a word that introduces a date ("el 18/05", "le 12/01",
# "den 3/2", "by 12/15", "as of 3/28", "ngay 24/11"): d/m or m/d; not a fraction ("by 2/3 of", "1/2 majority")
_SLASH_DAY_MONTH = re.compile(
    r"\b(?:el|le|den|d\.|by|on|as of|until|till|from|ngay|am|il|op|em|dia|dne|dnia|du|au|al|del|vom|bis|"
    r"zum|tot|van|llamada|desde|hasta|entro|fino|avant|après)[ \t]+(([0-3]?\d)/([0-3]?\d))"
    r"(?![\w/%]|\.\d|[ \t]+(?:of|majority|des|de la|del|der)\b)",
    re.I,
)
#: a romanised Japanese block number ("4-7-15 Sakae, Naka-ku") is no d-m-y date
_JP_BLOCK = re.compile(r"\s+[A-Z][a-z]+,\s*[A-Z][a-z]+-(?:ku|shi|cho|machi|gun)\b")
# a syslog time stamp with a month abbreviation of another language at the line start ("Dez 02 06:58:41")
_SYSLOG_INTL = re.compile(
    r"^(?:jan|feb|mär|mrz|apr|mai|jun|jul|aug|sep|okt|nov|dez|janv|févr|mars|avr|juin|juil|août|sept|"
    r"oct|déc|ene|abr|may|ago|dic|gen|mag|giu|lug|set|ott|mrt|mei|sty|lut|kwi|cze|lip|sie|wrz|paź|"
    r"lis|gru|fev|out|dec)\.?\s+[0-3]?\d(?=\s+\d{2}:\d{2}:\d{2})",
    re.I | re.M,
)
# the Common Log Format time stamp of web servers: [10/Mar/2024:13:55:36 +0000] (the day / month / year part)
_CLF_DATE = re.compile(
    r"(?<=\[)[0-3]\d/(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)/(?:19|20)\d\d(?=:\d\d:\d\d:\d\d)"
)
# a Japanese era year with month and day: "Heisei 8, June 21", "Showa 55, 3 May"
_ERA_DATE = re.compile(
    r"\b(?:Reiwa|Heisei|Sh[oō]wa|Taish[oō])\s+\d{1,2},?\s+(?:(?:"
    + _MONTH_RE
    + r")\s+[0-3]?\d|[0-3]?\d\s+(?:"
    + _MONTH_RE
    + r"))(?!\w)",
    re.I,
)


# a Hungarian date, year first ("2025. március 4.", "1902. március 4.", "2025. február 3-án", "2025. május"):
# the year with its dot, the month, the day with its dot or its case ending; or month + day alone with a case
# ending ("március 21-én", "február 7-én": the ending makes the number a day)
_HU_MONTH_RE = "(?:" + "|".join(_MONTHS_HU) + ")"
_HU_DATE = re.compile(
    r"(?<![\w.])(?:(?P<y>(?:18|19|20)\d\d)\.[ \t]+(?P<mon>"
    + _HU_MONTH_RE
    + r")(?:[ \t]+(?P<d>[0-3]?\d)(?:-(?:á|é)?[nt]|-(?:a|e|i|je|ja|ig|ától|étől|áig|éig)|\.))?"
    r"|(?P<mon2>" + _HU_MONTH_RE + r")[ \t]+(?P<d2>[0-3]?\d)-(?:á|é)?n)(?![\w])",
    re.I,
)
# a spaced day. month. year (Czech / Slovak / Hungarian typing: "2. 1. 1909", "so 19. 7. 2025"), years 1800-2099
_SPACED_DMY = re.compile(
    r"(?<![\w.])(?P<d>[0-3]?\d)\.[ \t](?P<m>[01]?\d)\.[ \t](?P<y>(?:18|19|20)\d\d)(?![\w.]|\.\d)"
)
# airline / military day + month in capitals, with or without a two-digit year ("11MAY25", "14MAR", "14 DIC 24",
# "13 FEB 25"): capitals only, the day two digits when glued
_CAPS_MON = r"(?:JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC|ENE|ABR|AGO|DIC|GEN|MAG|GIU|LUG|SET|OTT|DEZ|OKT|MAI)"
_CAPS_DATE = re.compile(
    r"(?<![\w/.-])(?:(?P<d>[0-3]\d)"
    + _CAPS_MON
    + r"(?:\d\d)?|(?P<d2>[0-3]?\d) "
    + _CAPS_MON
    + r" \d\d)(?![\w/.:-])"
)
# legal / notarial phrasing: "the 1st day of June, 2025", "a los 21 días del mes de febrero de 2025"
_DAY_OF_MONTH = re.compile(
    r"(?<![\w.])"
    + _DAY
    + r"\s+(?:day\s+of|d[ií]as?\s+del\s+mes\s+de)\s+(?:"
    + _MONTH_RE
    + "|"
    + _INTL_RE
    + r")(?:,?\s+(?:de\s+|del\s+(?:año\s+)?)?(?:18|19|20)\d\d)?(?!\w)",
    re.I,
)
# a month name + a year of the nineteenth century ("March 1868", "jun. 1851")
_MONTH_YEAR_1800S = re.compile(
    r"(?<!\w)(?:" + _MONTH_RE + "|" + _INTL_RE + r")(?:\s+de)?\s+18\d\d(?!\w)", re.I
)
#: cheap markers that gate the passes above: a year of the nineteenth century, a Hungarian year-first date
#: ("2025. m...") or day ending ("3-án"), a "day of" / "días del mes"
_YEAR_1800S = re.compile(r"(?<!\d)18\d\d(?!\d)")
_HU_MARK = re.compile(r"\d\.[ \t]+[^\W\d_]|\d-[áé]n\b")
_DAY_OF_MARK = re.compile(r"\b(?:day\s+of|d[ií]as?\s+del\s+mes)\b", re.I)
# the Polish "r." (roku) after a year belongs to the date ("3 marca 2025 r.")
_ROK_AFTER = re.compile(r"[ \t]?r\.(?!\w)")


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
            if not 1900 <= y <= 2100:
                continue  # "2.10.5501" is a version number
            if g.get("mon"):
                ds = (_mk(y, _month(g["mon"]), int(g["d"])),)
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


def find_dates(text: str, score: float = 0.8) -> list[PIISpan]:
    """Dates: numeric (``30/05/2001``, ``2001-05-30``), written (``May 30th, 2001``, ``30 de mayo de
    2001``, ``3. März 2024``), without a year (``1st of February``) and month + year (``March 2021``).
    A leading ``the`` is left outside the span."""
    out = [
        PIISpan(a, b, "DATE", score, "regex")
        for a, b, _ in _date_candidates(text)
        if not _JP_BLOCK.match(text, b)
    ]
    for pat in _DATE_PARTIAL:
        for m in pat.finditer(text):
            a = m.start()
            if text[a : a + 4].lower() == "the ":
                a += 4
            if g := m.groupdict().get("d"):
                if not 1 <= int(g) <= 31:
                    continue
            out.append(PIISpan(a, m.end(), "DATE", round(score * 0.9, 4), "regex"))
    for m in _DOTTED_DAY_MONTH.finditer(text):
        if 1 <= int(m.group(2)) <= 31 and 1 <= int(m.group(3)) <= 12:
            out.append(PIISpan(m.start(1), m.end(1), "DATE", round(score * 0.8, 4), "regex"))
    for pat in (_SYSLOG_INTL, _ERA_DATE, _CLF_DATE):
        out += [
            PIISpan(m.start(), m.end(), "DATE", round(score * 0.9, 4), "regex")
            for m in pat.finditer(text)
        ]
    for m in _WEEKDAY_DM.finditer(text):
        if 1 <= int(m.group(1)) <= 31 and 1 <= int(m.group(2)) <= 12:
            out.append(PIISpan(m.start(), m.end(), "DATE", round(score * 0.9, 4), "regex"))
    for m in _SLASH_DAY_MONTH.finditer(text):
        x, y = int(m.group(2)), int(m.group(3))
        if (1 <= x <= 31 and 1 <= y <= 12) or (1 <= x <= 12 and 1 <= y <= 31):
            out.append(PIISpan(m.start(1), m.end(1), "DATE", round(score * 0.8, 4), "regex"))
    # seventh round: written dates of the nineteenth century ("14 Jan 1890", "March 1868"; a month name makes
    # them dates: the numeric forms keep 1900-2100, "2.10.1850" is as often a version), Hungarian, spaced,
    # capitals and legal forms
    # (each pass only where its cheap marker occurs: the month-name alternations cost a scan of the text)
    if _YEAR_1800S.search(text):
        for pat in _DATE_PATTERNS[2:4]:
            for m in pat.finditer(text):
                y = int(m.group("y"))
                if 1800 <= y < 1900 and _mk(y, _month(m.group("mon")), int(m.group("d"))):
                    out.append(PIISpan(m.start(), m.end(), "DATE", score, "regex"))
        for m in _MONTH_YEAR_1800S.finditer(text):
            out.append(PIISpan(m.start(), m.end(), "DATE", round(score * 0.9, 4), "regex"))
    if _HU_MARK.search(text):
        for m in _HU_DATE.finditer(text):
            d = m.group("d") or m.group("d2")
            if d is None or 1 <= int(d) <= 31:
                out.append(PIISpan(m.start(), m.end(), "DATE", round(score * 0.9, 4), "regex"))
    for m in _SPACED_DMY.finditer(text):
        if _mk(int(m.group("y")), int(m.group("m")), int(m.group("d"))):
            out.append(PIISpan(m.start(), m.end(), "DATE", round(score * 0.9, 4), "regex"))
    for m in _CAPS_DATE.finditer(text):
        if 1 <= int(m.group("d") or m.group("d2")) <= 31:
            out.append(PIISpan(m.start(), m.end(), "DATE", round(score * 0.8, 4), "regex"))
    if _DAY_OF_MARK.search(text):
        for m in _DAY_OF_MONTH.finditer(text):
            if 1 <= int(m.group("d")) <= 31:
                out.append(PIISpan(m.start(), m.end(), "DATE", score, "regex"))
    return [_widen_date(text, sp) for sp in out]


def _widen_date(text: str, sp: PIISpan) -> PIISpan:
    """Take a weekday written before the date (``Saturday 22 February 2025``) and the first day of a range
    or pair (``2–6 April 2025``, ``4 e 5 de fevereiro``) into its span (only a date that starts with the
    day number takes a range), and the Polish ``r.`` after its year (``3 marca 2025 r.``)."""
    a, b = sp.start, sp.end
    if text[b - 4 : b].isdigit() and (m := _ROK_AFTER.match(text, b)):
        sp = PIISpan(a, m.end(), sp.label, sp.score, sp.source)
    if text[a : a + 1].isdigit() and (m := _DAY_RANGE_BEFORE.search(text, max(0, a - 8), a)):
        a = m.start()
    if m := _WEEKDAY_BEFORE.search(text, max(0, a - 20), a):
        a = m.start()
    return sp if a == sp.start else PIISpan(a, sp.end, sp.label, sp.score, sp.source)


# ------------------------------------------------------------------------------------------------ addresses
_CAP = r"[A-ZÀ-ÞŁŚŻŹĆ][\w'’.-]*"
_NUM = r"\d{1,5}[A-Za-z]?(?![\w/.-]\d)"
#: a continental house number with its door / staircase ("118/2", "37/2/14") or Dutch / Belgian suffix
#: ("231 bis", "176-III", "12 B": a lone capital letter after a space)
_NUM_EU = (
    r"\d{1,5}[A-Za-z]?(?:/\d{1,4}[A-Za-z]?){0,2}(?:-(?:I{1,3}|IV|hs|h)\b|\s(?:bis|ter)\b|\s[A-H]\b(?![.'’-]))?"
    r"(?![\w/.-]\d)"
)
#: street address grammars (house number + street), one per writing convention
_ADDRESS_PATTERNS = (
    # en: 221B Baker Street, 1600 Maple Dr, 27 High St; "Plot 27 Admiralty Way" / "Blk 412 Bedok North Ave 2"
    # (a plot / block word glued to its number is part of it), "27-29 Pacific Highway", "1904 E 12th St"
    re.compile(
        r"(?<![\w/-])(?:(?:Plot|Blk|Block|Lot)\s+)?(?:\d{1,5}-)?"
        + _NUM
        + r"\s+(?:(?:N|S|E|W|NE|NW|SE|SW)\.?\s+\d{1,3}(?:st|nd|rd|th)\s+|(?:"
        + _CAP
        + r"\s+){1,3})(?:Street|St|Road|Rd|Avenue|Ave|Lane|Ln|"
        r"Drive|Dr|Grove|Close|Way|Court|Ct|Place|Pl|Terrace|Crescent|Cres|Boulevard|Blvd|Square|Sq|"
        r"Gardens|Gdns|Hill|Row|Mews|Parkway|Pkwy|Highway|Hwy|Circle|Cir|Walk|Trail|Broadway|Parade|Pde|"
        r"Quay)\b"
        # a directional / part suffix: "1187 Peachtree Battle Ave NW", "27 Dominick Street Lower"
        r"(?:\s+(?:NW|NE|SW|SE|N|S|E|W|North|South|East|West|Upper|Lower)(?![\w'’-]))?"
        # Singapore's numbered streets: "Tampines Street 86", "Bedok North Ave 2"
        r"(?:\s\d{1,3}(?![\w:./-]))?"
    ),
    # Welsh street word first: "9 Heol y Nant", "14 Ffordd Las"
    re.compile(r"(?<![\w-])" + _NUM + r"\s+(?:Heol|Ffordd|Stryd|Lôn)\s+(?:y\s+|yr\s+)?" + _CAP),
    # Indian cross / main roads: "27, 14th Cross Road", "27, 14th Cross, 2nd Main Road"
    re.compile(
        r"(?<![\w-])\d{1,4}[A-Z]?,\s+\d{1,2}(?:st|nd|rd|th)\s+(?:Cross|Main)(?:\s+Road)?"
        r"(?:,\s+\d{1,2}(?:st|nd|rd|th)\s+(?:Cross|Main)(?:\s+Road)?)?"
    ),
    # Nordic: "Storgatan 12 B", "Klitvej 7", "Vårvindsvägen 3", "Thorvald Meyers gate 58B", "Nordre gate 7B"
    re.compile(
        r"(?<![\w-])(?:(?:(?:Øvre|Nedre|Nordre|Søndre|Store|Lille|Gamle|Norra|Södra|Östra|Västra|Stora|Lilla|"
        r"Gamla)\s+)?[A-ZÅÄÖØÆ][\wåäöøæ-]*(?:gatan|vägen|gränd|torget|stigen|backen|allén|vej|gade|"
        r"vænget|veien|veg|gata|gate|stræde|plass)|(?:"
        + _CAP
        + r"\s+){1,2}(?:gate|gata|vei|veien|vej|gade|allé|gatan|vägen))\s+"
        + _NUM_EU
    ),
    # tr: "Bağdat Caddesi No: 221", "Atatürk Bulvarı No: 98", "Uzundere Cad. No:7", with its quarter first
    # ("Çamlık Mahallesi, Lale Sokak No: 8/2")
    re.compile(
        r"(?<![\w-])(?:(?:" + _CAP + r"\s+){1,2}(?:Mahallesi|Mah\.),?\s+)?"
        r"(?:" + _CAP + r"\s+){1,3}(?:Caddesi|Cad\.|Cd\.|Sokak|Sokağı|Sok\.|Sk\.|Bulvarı|Blv\.)"
        r"\s*(?:No\s*:\s*|No\.?\s*)\d{1,4}[A-Za-z]?(?:/\d{1,3})?"
    ),
    # co: "Carrera 76 # 33A-41", "Calle 93 # 11A-28", "Cra. 43A No. 1-50"
    re.compile(
        r"(?<![\w-])(?:Calle|Carrera|Cra\.?|Cr\.?|Kr\.?|Cl\.?|Avenida|Av\.?|Diagonal|Dg\.?|Transversal|"
        r"Tv\.?)\s+\d{1,3}\s?[A-Z]?(?:\s?bis)?\s*(?:#|No\.?|N[°º])\s*\d{1,3}\s?[A-Z]?\s*-\s*\d{1,3}\b"
    ),
    # ro: "Str. Vasile Lascăr nr. 44", "Bd. Independenței nr. 15", "Calea Victoriei nr. 12"
    re.compile(
        r"(?<![\w-])(?:Str\.|Strada|Bd\.|Bdul\.?|Bulevardul|Calea|Șos\.|Şos\.|Șoseaua|Aleea|Splaiul)\s+"
        r"(?:" + _CAP + r"\s+){1,3}nr\.\s*\d{1,4}[A-Za-z]?"
    ),
    # au / nz: unit / house number ("3/45 Beach Rd", "2/118 Marine Pde")
    re.compile(
        r"(?<![\w/-])\d{1,4}[A-Za-z]?/\d{1,5}[A-Za-z]?\s+(?:"
        + _CAP
        + r"\s+){1,3}(?:Street|St|Road|Rd|Avenue|Ave|Lane|Ln|Drive|Dr|Grove|Close|Way|Court|Ct|Place|"
        r"Pl|Parade|Pde|Terrace|Tce|Crescent|Cres|Boulevard|Blvd|Highway|Hwy|Circuit|Cct|Esplanade|Esp)\b"
    ),
    # ja (romanised): chome-ban-go before the district and its ward / city ("4-7-15 Sakae, Naka-ku")
    re.compile(
        r"(?<![\w-])\d{1,2}-\d{1,2}(?:-\d{1,3})?\s+[A-Z][a-z]+(?=,\s*[A-Z][a-z]+-(?:ku|shi|cho|machi|gun)\b)"
    ),
    # nl: "Laan van Meerdervoort 412", "Weg naar Rhoon 3"
    re.compile(
        r"(?<![\w-])(?:Laan|Weg|Kade|Plein|Singel|Gracht|Dijk|Straat)\s+(?:van|der|de|den|het|ter|te|op|naar)"
        r"(?:\s+(?:van|der|de|den|het|ter|te|op))*\s+" + _CAP + r"(?:\s+" + _CAP + r")?\s+" + _NUM
    ),
    # fr: 12 rue de la Paix, 18 avenue Jean Jaurès, 4 bis place Bellecour
    re.compile(
        r"(?<![\w-])\d{1,4}(?:\s?(?:bis|ter))?,?\s+(?i:rue|avenue|av\.|boulevard|bd|place|allée|impasse|"
        r"chemin|quai|cours|route|square|passage|faubourg)\s+(?:(?:de|du|des|la|le|l'|d'|l’|d’)\s*)*"
        + _CAP
        + r"(?:\s+(?:(?:de|du|des|la|le|l'|d'|et)\s*)*"
        + _CAP
        + r"){0,4}"
    ),
    # es / it / pt / ca: Calle de Alcalá 155, Via Zamboni 22, Avenida da Liberdade 190, C/ Mayor, 3
    re.compile(
        r"(?<![\w-])(?:(?:Calle|C/|Avenida|Avda\.?|Av\.|Plaza|Pza\.|Paseo|Camino|Carrer|Ronda|Travesía|"
        r"Via|Viale|Corso|Piazza|Piazzale|Vicolo|Largo|Borgo|Rua|Travessa|Praça|Estrada|Alameda)|"
        # lower case only after "in / en / em / na / no / a" ("residente in via Roma 3", "vivo en calle")
        # lower case too ("piso calle de Toledo 42", "residente in via Roma 3": the house number decides)
        r"(?:calle|c/|avenida|plaza|paseo|viale|corso|piazza|largo|rua|travessa|praça|"
        r"(?:(?<=\bin )|(?<=\ben )|(?<=\bem )|(?<=\bna )|(?<=\bno )|(?<=\ba ))via))\s+"
        r"(?:(?:de|del|la|las|los|di|della|delle|dei|degli|da|do|dos|das)\s+)*"
        + _CAP
        + r"(?:\s+(?:(?:de|del|la|di|della|da|do|dos|das|e|y)\s+)*"
        + _CAP
        + r"){0,4},?\s+(?:n\.?\s?º\s*|nº\s*|n\.\s*)?"
        + _NUM_EU
    ),
    # de / nl: Goethestraße 5, Prinsengracht 263, Hauptstr. 12a, Kerkstraat 4
    re.compile(
        # an inflected adjective may come first: "Nieuwe Binnenweg 210", "Alte Hauptstraße 4"
        r"(?<![\w-])(?:[A-ZÄÖÜ][a-zäöüß]+e\s+)?"
        r"[A-ZÀ-Þ][\w-]*(?:straße|strasse|str\.|weg|gasse|platz|allee|ring|damm|ufer|gracht|"
        r"laan|straat|plein|kade|singel|dijk|steeg|markt)[ \t]+" + _NUM_EU
    ),
    # de / at / ch with the street word apart: Mariahilfer Straße 88, Am Alten Markt 3 (not "Markt 3")
    re.compile(
        r"(?<![\w-])[A-ZÄÖÜ][\w-]*(?:er|e|es)?\s+(?:Straße|Strasse|Str\.|Weg|Gasse|Platz|Allee|Ring|Damm|"
        r"Ufer|Chaussee|Steig|Zeile)[ \t]+" + _NUM_EU
    ),
    # seventh round: Hungarian (street word after the name: "Rákóczi út 12", "Andrássy út 83-85"), Finnish
    # (glued street word: "Porkkalankatu 13", "Pohjoinen Rautatiekatu 15"; the staircase / flat after it is no
    # part of the street), Czech ("Lannova třída 22", "náměstí")
    re.compile(
        r"(?<![\w-])[A-ZÁÉÍÓÖŐÚÜŰ][\w-]+[ \t]+(?:út|utca|u\.|tér|körút|krt\.|fasor|köz|sor)[ \t]+"
        r"\d{1,4}(?:[–-]\d{1,4})?(?![\w/-])"
    ),
    re.compile(
        r"(?<![\w-])(?:(?:Pohjoinen|Eteläinen|Itäinen|Läntinen|Uusi|Vanha|Iso|Pieni)[ \t]+)?"
        r"[A-ZÄÖÅ][a-zäöå]+(?:katu|tie|kuja|polku|väylä|raitti|ranta|kaari|tori)[ \t]+\d{1,4}(?![\w/-])"
    ),
    re.compile(
        r"(?<![\w-])[A-ZČŘŠŽÚ][\w]+[ \t]+(?:třída|náměstí|nábřeží)[ \t]+\d{1,4}(?:/\d{1,4})?(?![\w/-])"
    ),
    # pl: ul. Długa 15, al. Jerozolimskie 44/2
    re.compile(
        r"(?<![\w-])(?:ul\.|al\.|pl\.|os\.)\s+"
        + _CAP
        + r"(?:\s+"
        + _CAP
        + r"){0,3}\s+\d{1,4}[A-Za-z]?"
        r"(?:/\d{1,4})?"
    ),
)


def find_addresses(text: str, score: float = 0.75) -> list[PIISpan]:
    """Street addresses (house number + street) in the English, French, Spanish / Italian / Portuguese,
    German / Dutch and Polish conventions (``221B Baker Street``, ``12 rue de la Paix``, ``Calle de
    Alcalá 155``, ``Goethestraße 5``, ``ul. Długa 15``); the town and postcode are separate spans.

    The last few texts' results are memoised: the redactor's recognizers and the CRF tagger's district rule
    both need the streets of the same text (its 15 patterns take ~11 % of the recognizers' time)."""
    return list(_find_addresses(text, score))


@lru_cache(maxsize=4)
def _find_addresses(text: str, score: float) -> tuple[PIISpan, ...]:
    out = []
    for pat in _ADDRESS_PATTERNS:
        for m in pat.finditer(text):
            a, b = m.start(), m.end()
            while b > a and text[b - 1] in ",. ":
                b -= 1
            out.append(PIISpan(a, b, "ADDRESS", score, "regex"))
    return tuple(out)


# ------------------------------------------------------------------------------------------------ all
#: recognizers in priority order: a span overlapping one found earlier in this order is dropped
_FINDERS: dict[str, Callable[[str], list[PIISpan]]] = {
    "EMAIL": find_emails,
    "IBAN": find_ibans,
    "IP_ADDRESS": find_ips,
    "CREDIT_CARD": find_cards,
    "NATIONAL_ID": find_national_ids,
    "SSN": find_ssns,
    "DATE": find_dates,
    "PHONE": find_phones,
    "ADDRESS": find_addresses,  # before POSTCODE: the "1600" of "1600 Maple Dr" is a house number
    "POSTCODE": find_postcodes,
    "USERNAME": find_usernames,
}
RECOGNIZER_LABELS = tuple(_FINDERS)


def recognize(text: str, labels: Iterable[str] = RECOGNIZER_LABELS) -> list[PIISpan]:
    """All recognizers in ``labels``: one span per identifier, in text order.

    Recognizers run in the priority of :data:`RECOGNIZER_LABELS` (checksummed and unambiguous types
    first); a span that overlaps one already kept is dropped, and within one recognizer the longer span
    wins, so an IP address is never also cut into phone / date pieces.

    Args:
        text: the text.
        labels: the recognizers to run, among :data:`RECOGNIZER_LABELS`.

    Returns:
        Non-overlapping spans, in text order.

    Raises:
        InvalidArgument: an unknown label (named, with the allowed ones).
    """
    labels = tuple(labels)
    unknown = sorted(set(labels) - set(_FINDERS))
    if unknown:
        raise InvalidArgument(f"labels must be among {list(_FINDERS)}; got unknown {unknown}")
    occ = Occupancy()
    for lab in _FINDERS:
        if lab not in labels:
            continue
        for s in sorted(_FINDERS[lab](text), key=lambda s: (-(s.end - s.start), -s.score, s.start)):
            occ.try_add(s)
    return list(occ.spans)
