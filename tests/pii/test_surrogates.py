"""Keyed pseudonyms (issue 32, item 4): same type, format and locale; HMAC with a secret key; the same
entity gets the same surrogate across a corpus; the sentence keeps its structure."""

from __future__ import annotations

import re

import numpy as np
import phonenumbers
import pytest
from stdnum import iban
from stdnum.es import dni, nie

from privnlp.mechanisms.pii.recognizers import luhn_ok, nhs_ok, parse_date, recognize
from privnlp.mechanisms.pii.surrogates import Surrogates, guess_locale

KEYS = [bytes([i]) * 32 for i in range(1, 41)]


def shape(s: str) -> str:
    return re.sub(r"[A-Za-z]", "a", re.sub(r"\d", "9", s))


@pytest.mark.parametrize(
    ("label", "value"),
    [
        ("PHONE", "+44 20 7946 0958"),
        ("PHONE", "(415) 555-0132"),
        ("PHONE", "06 12 34 56 78"),
        ("IBAN", "GB82 WEST 1234 5698 7654 32"),
        ("CREDIT_CARD", "4111 1111 1111 1111"),
        ("SSN", "219-09-9999"),
        ("NATIONAL_ID", "943 476 5919"),
        ("POSTCODE", "NW1 6XE"),
        ("POSTCODE", "28013"),
        ("DATE", "14/07/1990"),
        ("DATE", "2024-02-29"),
    ],
)
def test_format_kept_and_keyed(label, value):
    outs = [Surrogates(k)(label, value) for k in KEYS]
    assert all(shape(o) == shape(value) for o in outs), outs[:5]
    assert all(o != value for o in outs)
    assert len(set(outs)) > len(KEYS) // 2  # the key decides: many different surrogates
    assert Surrogates(KEYS[0])(label, value) == outs[0]  # same key, same surrogate (a new instance)


def test_ip_same_version_and_private_prefix():
    import ipaddress

    for k in KEYS:
        out = Surrogates(k)("IP_ADDRESS", "192.168.10.44")
        assert out.startswith("192.168.") and ipaddress.ip_address(out).version == 4
        assert ipaddress.ip_address(Surrogates(k)("IP_ADDRESS", "2001:db8::1")).version == 6


def test_checksums_and_validity_hold():
    for k in KEYS:
        s = Surrogates(k)
        assert iban.is_valid(s("IBAN", "DE89 3704 0044 0532 0130 00"))
        assert luhn_ok(s("CREDIT_CARD", "5555 5555 5555 4444"))
        assert nhs_ok(s("NATIONAL_ID", "943 476 5919"))
        assert dni.is_valid(s("NATIONAL_ID", "12345678Z"))
        assert nie.is_valid(s("NATIONAL_ID", "X1234567L"))
        assert parse_date(s("DATE", "03/14/2024"))
        assert [x.label for x in recognize("SSN " + s("SSN", "219-09-9999"))] == ["SSN"]


def test_phone_stays_in_its_country():
    ok = 0
    for k in KEYS:
        for v, region in (
            ("+34 612 345 678", "ES"),
            ("020 7946 0958", "GB"),
            ("+49 30 901820", "DE"),
        ):
            out = Surrogates(k)("PHONE", v)
            n = phonenumbers.parse(out, region)
            ok += (
                phonenumbers.is_valid_number(n) and phonenumbers.region_code_for_number(n) == region
            )
    assert ok >= 0.9 * 3 * len(KEYS)


def test_names_consistent_word_by_word_and_locale():
    s = Surrogates(KEYS[0])
    full = s("PERSON", "Margaret O'Connell")
    assert s("PERSON", "Margaret") == full.split()[0]
    assert s("PERSON", "O'Connell") == full.split()[-1]
    assert s("PERSON", "margaret") == full.split()[0].lower()  # case style kept
    assert guess_locale("PERSON", "Jürgen Schäfer") == "de_DE"
    sp = s("PERSON", "Lucía Fernández de Sevilla")
    assert " de " in sp and len(sp.split()) == 4  # the particle stays, the sentence keeps its shape
    assert guess_locale("PHONE", "+34 612 345 678") == "es_ES"
    assert guess_locale("EMAIL", "a@orange.fr") == "fr_FR"
    assert guess_locale("ADDRESS", "Calle de Alcalá 42") == "es_ES"


def test_dates_keep_their_written_form():
    s = Surrogates(KEYS[3])
    for v, pat in (
        ("12 March 2024", r"\d{1,2} [A-Z][a-z]+ \d{4}"),
        (
            "3 de marzo de 1985",
            r"\d{1,2} de (enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|octubre|noviembre|diciembre) de \d{4}",
        ),
        ("May 30th, 2001", r"[A-Z][a-z]+ \d{1,2}(st|nd|rd|th), \d{4}"),
        ("17.08.1983", r"\d\d\.\d\d\.\d{4}"),
    ):
        out = s("DATE", v)
        assert re.fullmatch(pat, out), (v, out)
        assert parse_date(out), out


def test_surrogates_never_add_line_breaks_or_brackets():
    g = np.random.default_rng(0)
    for k in KEYS[:10]:
        s = Surrogates(k)
        for lab, v in (("ADDRESS", "221B Baker Street"), ("LOC", "Sevilla"), ("EMAIL", "x@y.de")):
            out = s(lab, v)
            assert "\n" not in out and "(" not in out and "," not in out, out
    assert g is not None


def test_key_must_be_a_secret():
    with pytest.raises(Exception, match="16 bytes"):
        Surrogates(b"short")
