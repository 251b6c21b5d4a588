"""Recognizer rules of issue 32's seventh round, one class of errors each (from the misses of
``test_blind6.txt``, development data), with positive and negative cases written for this test: written dates
of the nineteenth century, Hungarian dates, spaced day. month. year, capitals dates (airline / military),
legal "day of" dates, Indonesian / Czech / Hungarian / Finnish weekdays and months, the Polish "r." after a year;
logins after account labels, in chat / marketplace speaker slots, in a signed note and after their owner's
name. ``find_addresses`` runs once per text (memoised)."""

from __future__ import annotations

import pytest

from privnlp.mechanisms.pii import recognizers
from privnlp.mechanisms.pii.recognizers import find_addresses, recognize


def spans(text: str, label: str) -> list[str]:
    return [text[s.start : s.end] for s in recognize(text) if s.label == label]


@pytest.mark.parametrize(
    "text, date",
    [
        ("Baptised on 3 Feb 1874 at the parish church.", "3 Feb 1874"),
        ("The house was sold in November 1852 to a merchant.", "November 1852"),
        ("Geboren am 9. Oktober 1861 in Ulm.", "9. Oktober 1861"),
        ("She emigrated on August 21, 1883.", "August 21, 1883"),
        ("Számla kelte: 2024. szeptember 12.", "2024. szeptember 12."),
        ("A szerződés 2023. június 30-án lejár.", "2023. június 30-án"),
        ("Beköltözés: 2026. augusztus", "2026. augusztus"),
        ("Az ülés november 14-én lesz.", "november 14-én"),
        ("Datum narození: 17. 8. 1984", "17. 8. 1984"),
        ("termín po 4. 11. 2025 odpoledne", "4. 11. 2025"),
        ("PNR X7K2 FRA-LIS 09JUN26 LH1166", "09JUN26"),
        ("Exp. 07 ENE 27 lote 442", "07 ENE 27"),
        ("signed this 12th day of March, 2024 in Dublin", "12th day of March, 2024"),
        ("a los 3 días del mes de mayo de 2023, comparecen", "3 días del mes de mayo de 2023"),
        ("Rapat hari Kamis, 14 Agustus 2025 pukul 10.00", "Kamis, 14 Agustus 2025"),
        ("Tarikh: 2 Mac 2024", "2 Mac 2024"),
        ("schůzka ve čtvrtek 5. června 2025", "čtvrtek 5. června 2025"),
        ("Data wpływu: 9 kwietnia 2024 r., godz. 12", "9 kwietnia 2024 r."),
        ("tavataan perjantaina 6. kesäkuuta 2025", "perjantaina 6. kesäkuuta 2025"),
    ],
)
def test_dates_of_the_seventh_round(text, date):
    assert spans(text, "DATE") == [date]


@pytest.mark.parametrize(
    "text",
    [
        "Upgrade from version 2.10.1850 to the next one.",  # a version number, not a date
        "In 1868 the line opened.",  # a bare year
        "Population 1852 in the census table.",
        "SKU 14MAR7 in stock",  # one digit after the month: a code
        "the 3rd day of rain",  # "day of" without a month
        "Zimmer 14. 13. 2025",  # month 13
        "Kamis malam kami makan bersama",  # a weekday with no date after it
    ],
)
def test_not_dates(text):
    assert spans(text, "DATE") == []


def test_the_polish_rok_is_taken_only_after_a_year():
    assert spans("Wpłynęło 2 maja 2024 r. do biura", "DATE") == ["2 maja 2024 r."]
    # "r." after a date without a year stays outside (no year to qualify)
    assert spans("od 2 maja r. bieżącego", "DATE") == ["2 maja"]


@pytest.mark.parametrize(
    "text, login",
    [
        ("Assignee: tkowalczyk\nPriority: high", "tkowalczyk"),
        ("Benutzerkonto: fhuemer (neu)", "fhuemer"),
        ("Cuenta corporativa: mlopez; equipo portátil", "mlopez"),
        ("Usuario de red: jperez2", "jperez2"),
        ("mein LINE ID ist mika_0704 oder Telefon", "mika_0704"),
        ("Telegram ID: @ignored or WeChat ID wxid_77kq ok", "wxid_77kq"),
        ("(login Vinted: anna_sells99)", "anna_sells99"),
        ("Autor: Joana Marques Pereira (jmpereira) em 2 de março", "jmpereira"),
        ("Interne Notiz (k-huber):\nPasswort zurückgesetzt", "k-huber"),
        ("Nota interna (lrossi): cliente richiamato", "lrossi"),
        ("vintage_finds_88: is the lamp still for sale?\nSam: yes it is", "vintage_finds_88"),
        ("Tom.K: Hi there, still available?", "Tom.K"),
        ("From harbour_rat: hello, I can pick it up tomorrow", "harbour_rat"),
        ("Lucie_B : Bonjour, le canapé est-il encore là ?", "Lucie_B"),
        ("surfergirl2000: can you post it to Leeds please", "surfergirl2000"),
    ],
)
def test_logins_of_the_seventh_round(text, login):
    assert login in spans(text, "USERNAME")


@pytest.mark.parametrize(
    "text",
    [
        "Assignee: Marta Nowak",  # a capitalised name: the tagger's, not a login
        "Assignee: everyone",  # an ordinary word
        "Note (optional): add the receipt here",
        "Nota (urgente): llamar al cliente",
        "Lyon (lyon) is the city",  # a town and its lower-case echo
        "login correcto desde la oficina central hoy",  # "login" + a word: no service name
        "max_connections: the number of open sockets",  # a configuration key
        "config.sub: recognize the new target",  # a file of a changelog
        "  parse_args: fix the crash on empty input",  # an indented function name
        "utf8: handle the new code points",  # letters + one digit: a software name
        "Step2: open the lid and pour",
        "index.html: the start page of the site",
        "e.g.: this is only an example",
    ],
)
def test_not_logins(text):
    assert spans(text, "USERNAME") == []


def test_find_addresses_runs_once_per_text(monkeypatch):
    """The redactor's recognizers and the CRF's district rule both ask for the streets of a text: the
    patterns run once (memoised on the text), and a caller that edits the list it got changes nothing."""
    text = "Ship to 221B Baker Street, London NW1 6XE."
    recognizers._find_addresses.cache_clear()
    calls = []
    real = recognizers._ADDRESS_PATTERNS
    counting = tuple(_Counting(p, calls) for p in real)
    monkeypatch.setattr(recognizers, "_ADDRESS_PATTERNS", counting)
    first = find_addresses(text)
    n = len(calls)
    first.clear()
    again = find_addresses(text)
    assert len(calls) == n == len(real) and [text[s.start : s.end] for s in again] == [
        "221B Baker Street"
    ]
    recognizers._find_addresses.cache_clear()


class _Counting:
    def __init__(self, pat, calls):
        self.pat, self.calls = pat, calls

    def finditer(self, text):
        self.calls.append(1)
        return self.pat.finditer(text)


@pytest.mark.parametrize(
    "text, code",
    [
        ("Deliver to 14 Wattle Street, Katoomba 2780", "2780"),
        ("Clinic: 9 Kauri Road, Te Awamutu 3800\nPhone: 07 871 0000", "3800"),
        ("meet me at 771 Bayou Ln, 70433. then we go", "70433"),
        ("Blk 88 Tampines Street 81 #03-22, Singapore 520088", "520088"),
        ("Alamat: Blk 5 Jalan Besar #02-11, S(208786)", "208786"),
    ],
)
def test_postcodes_of_the_seventh_round(text, code):
    assert code in spans(text, "POSTCODE")


@pytest.mark.parametrize(
    "text",
    [
        "Office: 12 King Street, Suite 1200",  # a unit, not a town and its code
        "Ship to 40 High Street, Room 2210",
        "Ship to 40 High Street, Oxford 2024 edition",  # the number does not end the line
        "Prices from 1200 in Singapore dollars",
    ],
)
def test_not_postcodes(text):
    assert spans(text, "POSTCODE") == []


@pytest.mark.parametrize(
    "text, nid",
    [
        ("NRIC: S1234567D", "S1234567D"),  # check letter valid
        ("Work pass holder (G1234567X) reported", "G1234567X"),
        ("NIK: 3201014509870002", "3201014509870002"),
        ("No. BPJS Kesehatan: 0001234567890", "0001234567890"),
        ("KRA PIN: P051234567Q", "P051234567Q"),
        ("Name: J. Otieno\nID No.: 23456781", "23456781"),
        ("adóazonosító jel: 8123456786", "8123456786"),
        ("Nr dowodu osobistego: ABC 123456", "ABC 123456"),
        ("Pronajímatel: Jan Nováková, r. č. 755512/1211", "755512/1211"),
        ("nar. 3. 4. 1980, 800403/3015, bytem", "800403/3015"),
    ],
)
def test_national_ids_of_the_seventh_round(text, nid):
    assert nid in spans(text, "NATIONAL_ID")


@pytest.mark.parametrize(
    "text",
    [
        "code S1234567A here",  # wrong check letter, no label
        "Order ID No.: 28471936",  # an order's id
        "adóazonosító jel: 8123456787",  # wrong check digit
        "invoice 123456/7890 paid",  # fails the mod-11 check
        "Reference 3201014509870002 paid",  # 16 digits without the NIK label
    ],
)
def test_not_national_ids(text):
    assert spans(text, "NATIONAL_ID") == []


@pytest.mark.parametrize(
    "text, value",
    [
        ("Paiement sur le compte BE12 3456 7890 1234", "BE12 3456 7890 1234"),  # check digits wrong
        ("Cuenta: ES12 0049 1500 0527 1018 6453", "ES12 0049 1500 0527 1018 6453"),
        ("IBAN (Gehalt): DE12500105170648489891", "DE12500105170648489891"),
        ("IBAN: GB82 WEST 1234 5698 7654 32", "GB82 WEST 1234 5698 7654 32"),  # valid: as before
    ],
)
def test_ibans_after_an_account_label_even_with_a_slip(text, value):
    assert spans(text, "IBAN") == [value]


@pytest.mark.parametrize(
    "text",
    [
        "Ref DE12 3456 7890 1234 5678 90",  # a failing checksum and no account label
        "Account AB12 3456 7890 1234 5678",  # no such country in the IBAN registry
        "IBAN: DE12 3456",  # too short for its country
    ],
)
def test_not_ibans(text):
    assert spans(text, "IBAN") == []


@pytest.mark.parametrize(
    "text, street",
    [
        ("Címünk: Petőfi utca 7., 2. emelet", "Petőfi utca 7"),
        ("a Kossuth tér 3–5 alatt", "Kossuth tér 3–5"),
        ("Toimisto: Hämeenkatu 21 B 4, Tampere", "Hämeenkatu 21"),
        ("Läntinen Brahenkatu 8, Helsinki", "Läntinen Brahenkatu 8"),
        ("Osoite Kalevantie 4, Turku", "Kalevantie 4"),
        ("Sídlo: Vinohradská třída 12/1600, Praha", "Vinohradská třída 12/1600"),
    ],
)
def test_streets_of_the_seventh_round(text, street):
    assert spans(text, "ADDRESS") == [street]


@pytest.mark.parametrize(
    "text",
    ["A 2 út 45 kilométere", "Tie 12 on suljettu", "katu 5 is lower case", "Route 66 tér"],
)
def test_not_streets(text):
    assert spans(text, "ADDRESS") == []
