"""Rule classes added in issue 32's third round, each with examples written for this test (none copied
from the evaluation sets): postcodes, usernames, dates, address grammars, phone vetoes, towns and names
from their context, and the checks that take company names / form labels / state codes out of names."""

from __future__ import annotations

import pytest

from privnlp.data.corpus import tokenize
from privnlp.mechanisms.pii.context import ContextRules
from privnlp.mechanisms.pii.crf import (
    Gazetteers,
    _not_a_name,
    _propagate_names,
    _split_lines,
    tidy_span,
)
from privnlp.mechanisms.pii.recognizers import (
    find_addresses,
    find_dates,
    find_phones,
    find_postcodes,
    find_usernames,
    is_system_account,
    recognize,
)
from privnlp.mechanisms.pii.redact import _leftovers
from privnlp.mechanisms.pii.types import PIISpan


def texts(spans, text):
    return [text[s.start : s.end] for s in spans]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Deliver to 9 Acacia Close, Toowoomba QLD 4350 today", ["4350"]),  # AU state + code
        ("Bendigo, VIC 3550", ["3550"]),
        ("Customer lives near Akron, zip 44308.", ["44308"]),  # lower-case "zip"
        ("Código postal: 46001\nLocalidad: Valencia", ["46001"]),  # labelled
        ("PLZ / Ort: 80331 München", ["80331"]),
        ("Indirizzo: via Po 3, CAP 10124 Torino", ["10124"]),
        ("Shinjuku-ku, Tokyo 160-0022", ["160-0022"]),  # Japanese, with a ward nearby
        ("〒 604-8005 Nakagyo", ["604-8005"]),
    ],
)
def test_new_postcode_grammars(text, want):
    assert texts(find_postcodes(text), text) == want


@pytest.mark.parametrize(
    "text",
    [
        "the ACT 2020 budget was passed",  # a state code after a lower-case word is no address
        "wear a cap 2000 times",  # "cap" is an English word; only the Italian label CAP counts
        "call (212) 555-0143 from Tokyo",  # NNN-NNNN as a phone's tail
        "ticket 604-8005 closed",  # NNN-NNNN without any Japanese address
    ],
)
def test_postcode_negatives(text):
    assert find_postcodes(text) == []


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2025-02-01 08:00:01 sso LOGIN_OK gebruiker=pjansen ip=10.1.1.1", ["pjansen"]),
        ("auth refused compte=l.moreau src=1.2.3.4", ["l.moreau"]),
        (
            "Code: gitlab.com/zoe-kraus and linkedin.com/in/omar-haddad-7",
            ["zoe-kraus", "omar-haddad-7"],
        ),
        (
            "Mar 14 09:12:55 fs02 smbd[77]: k.lindqvist (ipv4:10.0.0.8:5000) connect",
            ["k.lindqvist"],
        ),
        ("Mar 14 09:12:55 vpn openvpn[9]: 10.2.3.4:3311 [marta.silva] TLS ok", ["marta.silva"]),
    ],
)
def test_new_username_contexts(text, want):
    assert texts(find_usernames(text), text) == want


@pytest.mark.parametrize(
    "text",
    [
        "Mar 14 09:12:55 web nginx.service: reloaded /etc/nginx/index.html",  # units, files
        "Invalid user postgres from 203.0.113.9 port 22",  # a service account
        "gebruiker=svc_reports bron=10.0.0.1",
        "see e.g. the docs at 10:00:00",  # not a login: no second part of 2+ letters after a dot
        "github.com/about",
    ],
)
def test_username_negatives(text):
    assert find_usernames(text) == []


def test_system_accounts():
    assert (
        is_system_account("oracle")
        and is_system_account("svc_backup")
        and is_system_account("@admin")
    )
    assert not is_system_account("jdoe") and not is_system_account("oracle.smith")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Urlaub vom 3.4. bis 17.4. eingetragen", ["3.4.", "17.4."]),
        ("Okt 05 10:11:12 host sshd[1]: ok", ["Okt 05"]),  # localised syslog month
        ("Date of birth: Showa 58, April 2", ["Showa 58, April 2"]),  # Japanese era
        ('1.2.3.4 - - [04/Feb/2025:08:01:02 +0100] "GET /"', ["04/Feb/2025"]),  # web server log
    ],
)
def test_new_date_forms(text, want):
    assert texts(recognize(text, ["DATE"]), text) == want


@pytest.mark.parametrize(
    "text", ["siehe Abschnitt 3.2. unten", "release 1.4. notes", "Okt 05 items left", "set 12 cups"]
)
def test_date_negatives(text):
    assert find_dates(text) == []


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("at 940 Magnolia Creek Blvd SW, Tulsa", ["940 Magnolia Creek Blvd SW"]),
        ("Ship to: 12 Harcourt Street Upper, Dublin", ["12 Harcourt Street Upper"]),
        ("Unit: 7/21 Ocean Pde, Coogee", ["7/21 Ocean Pde"]),
        ("Address: 1-2-3 Ginza, Chuo-ku, Tokyo", ["1-2-3 Ginza"]),
        ("Adres: Laan op Zuid 8, Rotterdam", ["Laan op Zuid 8"]),
        ("Adres: Oude Kerkweg 14, Delft", ["Oude Kerkweg 14"]),
        ("entrega en el piso de calle del Prado 21, Madrid", ["calle del Prado 21"]),
    ],
)
def test_new_address_grammars(text, want):
    assert texts(find_addresses(text), text) == want


def test_address_negatives():
    for text in ("Tel: 075-231-4400 / Kyoto", "Die Seite 12 zeigt", "Meine Tabelle 3 oben"):
        assert find_addresses(text) == []
    # a Japanese block number is no d-m-y date
    assert find_dates("Address: 2-5-11 Umeda, Kita-ku") == []


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("order 4471-22093 shipped", []),
        ("VAT GB 123 4567 89 on the invoice", []),
        ("Bestellung #0612345678 erhalten", []),
        ("Tel. 0612345678 or order 4471-22093", ["0612345678"]),  # a phone word wins
    ],
)
def test_id_labels_veto_phones(text, want):
    assert texts(find_phones(text), text) == want


# ---------------------------------------------------------------------------------------------- context
@pytest.fixture(scope="module")
def rules():
    return ContextRules(["Wiebke", "Anneke"], ["Hollander"], towns=["Ourense"])


def found(rules: ContextRules, text: str) -> list[tuple[str, str]]:
    toks = tokenize(text)
    return [(text[s.start : s.end], s.label) for s in rules.spans(text, toks, lambda i, j: 0.5)]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Municipio: Ourense\nProvincia: Galicia", ("Ourense", "LOC")),  # town label
        ("Nata a Rovigo il 3 marzo", ("Rovigo", "LOC")),
        ("Calle Real 4\n32003 Ourense\nTlf", ("Ourense", "LOC")),  # after a continental postcode
        ("2351 AB Leiderdorp\nNL", ("Leiderdorp", "LOC")),
        (
            "12, 50667 Kerpen-Sindorf. Tel",
            ("Kerpen-Sindorf", "LOC"),
        ),  # the sentence's dot stays out
        ("7 Gum Tree Rd, Kurrajong NSW 2758", ("Kurrajong", "LOC")),  # before state + postcode
        ("99 Elm St, Wayzata, MN 55391", ("Wayzata", "LOC")),
        ("seen at Hospital General Santa Lucía, planta 2", ("Hospital General Santa Lucía", "LOC")),
        ("admitted to St. Brigid's Hospital, Ardee", ("St. Brigid's Hospital", "LOC")),
        ("Elle habite Ourense depuis mai", ("Ourense", "LOC")),
        ("hiya its Wiebke, new number", ("Wiebke", "PERSON")),  # self-introduction
        ("Attendees: Wiebke, Omondi", ("Wiebke", "PERSON")),  # attendee label
        ("Signed: P. Hollander", ("P. Hollander", "PERSON")),  # initial + surname
        ("Name: Anneke R. Hollander", ("Anneke R. Hollander", "PERSON")),  # middle initial
        ("raport dla klienta z Poznania jutro", ("Poznania", "LOC")),  # Polish genitive -ia
        (
            "Message from Hollander Anneke: the parcel",
            ("Hollander Anneke", "PERSON"),
        ),
        (
            "Melding van Anneke de Vries: kapot",
            ("Anneke de Vries", "PERSON"),
        ),  # particle + town-word
        ("An: Frau Wiebke Sommer, Lindenweg 3", ("Wiebke Sommer", "PERSON")),  # word-like surname
        (
            "Groet,\nAnneke van 't Hollander",
            ("Anneke van 't Hollander", "PERSON"),
        ),  # Dutch 't  # surname first
    ],
)
def test_new_context_rules(rules, text, want):
    assert want in found(rules, text), found(rules, text)


@pytest.mark.parametrize(
    "text",
    [
        "Sehr geehrte Frau Dr. Hollander",  # the title "Dr" is no name (the surname is)
        "M. Wiebke Hollander",  # French "M." is Monsieur, not an initial
        "the ACT 2020 budget",
        "call Wiebke Monday",  # a weekday is too frequent a word to be her surname
    ],
)
def test_context_rule_negatives(rules, text):
    got = found(rules, text)
    bad = ("Dr", "M. Wiebke Hollander", "ACT", "Wiebke Monday")
    assert not any(w in bad for w, _ in got), got


@pytest.mark.parametrize(
    ("text", "span", "want"),
    [
        ("From: Wattle Bedding Pty Ltd", "Wattle Bedding", None),  # a company
        ("Member of Ravenhill Chess Club", "Ravenhill Chess", None),  # a club
        ("Invoice - Greenway Roofing Services LLC", "Greenway", None),  # a town-like first word
        (
            "Anneke Hollander, Ltd director",
            "Anneke Hollander",
            "Anneke Hollander",
        ),  # comma: no company
        ("Vervaldatum: 12-05-2026", "Vervaldatum", None),  # a form label at a line start
        ("Wiebke: on my way, see you soon", "Wiebke", "Wiebke"),  # a chat speaker stays
        ("Tobenna: running late but on my way", "Tobenna", "Tobenna"),  # unknown name, chat line
        ("Betriebsfeier im Juni", "Juni", None),  # a month is no town
        ("BSc, University of Exeter", "Exeter", None),  # a town naming an institution
        ("Grado, Universidad de Zamora (2019)", "Universidad de Zamora", None),
        ("order from Wehkamp.nl today", "Wehkamp", None),  # a web shop
        ("LaToya: running late, start without me", "LaToya", "LaToya"),  # a speaker, inner capital
        (
            "IN NO EVENT SHALL THE\nCONTRIBUTORS BE LIABLE",
            "CONTRIBUTORS",
            None,
        ),  # a word in capitals
        ("Laurea, Politecnico di Torino", "Torino", None),
        ("moved from Exeter in May", "Exeter", "Exeter"),
        ("Date: 03/04/2025", "Date", None),  # a label that is also a (rare) first name
        ("Anneke: 12-05", "Anneke", "Anneke"),  # a known, unambiguous first name stays
        ("Bloomington IL 61701", "Bloomington IL", "Bloomington"),  # the state code goes
        ("Melding van Anneke Hollander", "van Anneke Hollander", "Anneke Hollander"),
        ("la sede de Zamora", "de Zamora", "Zamora"),
    ],
)
def test_not_a_name(rules, text, span, want):
    a = text.index(span)
    names = ("Wiebke", "Anneke", "Tobenna", "Date", "Greenway", "LaToya")
    label = "PERSON" if any(n in span for n in names) else "LOC"
    out = _not_a_name(text, PIISpan(a, a + len(span), label, 0.5, "tagger:crf"), rules)
    assert (None if out is None else text[out.start : out.end]) == want


def test_tidy_keeps_glued_surnames_and_double_surnames():
    gaz = Gazetteers.from_dict(
        {"first": ["wiebke"], "last": ["puig", "casals"], "towns": [], "common": ["acqua"]}
    )
    text = "Titular: Wiebke Puig i Casals, IBAN"
    a = text.index("Wiebke")
    out = tidy_span(text, PIISpan(a, a + 22, "PERSON", 0.5, "tagger:crf"), gaz)
    assert [text[p.start : p.end] for p in out] == ["Wiebke Puig i Casals"]
    text = "Wiebke Dell'Acqua\nNata"
    out = tidy_span(text, PIISpan(0, 17, "PERSON", 0.5, "tagger:crf"), gaz, lambda w: w == "Acqua")
    assert [text[p.start : p.end] for p in out] == ["Wiebke Dell'Acqua"]
    # a conjunction between two people stays a cut
    text = "Wiebke y Anneke"
    out = tidy_span(text, PIISpan(0, 15, "PERSON", 0.5, "tagger:crf"), gaz)
    assert [text[p.start : p.end] for p in out] == ["Wiebke", "Anneke"]


def test_speaker_time_lines_and_name_propagation(rules):
    text = "Wiebke Hollander 9:41 AM\nok see you\nOmondi 9:42 AM\nfine"
    got = found(rules, text)
    assert ("Wiebke Hollander", "PERSON") in got and ("Omondi", "PERSON") in got
    assert found(rules, "Total 9:41 AM\nok") == []  # an ordinary word before a time is no speaker
    text = "Present: Omondi Kariuki, Wiebke\n- Omondi to send the notes; Summary to all"
    toks = tokenize(text)
    spans = [
        PIISpan(9, 23, "PERSON", 0.9, "tagger:crf"),
        PIISpan(25, 31, "PERSON", 0.9, "tagger:crf"),
    ]
    out = _propagate_names(text, toks, spans, rules, lambda i, j: 0.4)
    assert [text[s.start : s.end] for s in out] == ["Omondi Kariuki", "Wiebke", "Omondi"]
    assert out[-1].score == 0.4 and out[-1].source == "tagger:context"
    # a frequent-word first name in a list next to a name; the same word alone stays a word
    text = "References from Will and Omondi Kariuki. Will check."
    spans = [PIISpan(25, 39, "PERSON", 0.9, "tagger:crf")]
    out = _propagate_names(text, tokenize(text), spans, rules, lambda i, j: 0.4)
    assert [text[s.start : s.end] for s in out] == ["Will", "Omondi Kariuki"]


def test_split_lines():
    text = "Rotterdam\nPolisnummer: 7"
    pieces = _split_lines(text, PIISpan(0, 21, "LOC", 0.5, "tagger:crf"))
    assert [text[p.start : p.end] for p in pieces] == ["Rotterdam", "Polisnummer"]
    text = "Absender: Hamburg - Auftragsnr. 5"
    pieces = _split_lines(text, PIISpan(10, 31, "LOC", 0.5, "tagger:crf"))
    assert [text[p.start : p.end] for p in pieces] == ["Hamburg", "Auftragsnr"]
    text = "Anne-Marie Hollander"  # a hyphen without spaces stays inside the name
    assert _split_lines(text, PIISpan(0, 20, "PERSON", 0.5, "tagger:crf")) == [
        PIISpan(0, 20, "PERSON", 0.5, "tagger:crf")
    ]


def test_inner_capital_names(rules):
    assert ("DeMarco", "PERSON") in found(rules, "Thanks, DeMarco will call")
    assert ("McTavish", "PERSON") in found(rules, "per McTavish the plan holds")
    assert found(rules, "written in LaTeX and iPhone notes") == []


def test_leftovers_keep_the_town_beside_a_recognizer_span():
    text = "Site: 5/12 Reef Rd, Kiama NSW 2533, Apt 3B, Brisbane"
    span = PIISpan(6, len(text), "ADDRESS", 0.6, "tagger:crf")
    taken = [PIISpan(6, 18, "ADDRESS", 0.75, "regex"), PIISpan(30, 34, "POSTCODE", 0.8, "regex")]
    out = _leftovers(text, span, taken, town=lambda w: w == "Brisbane")
    assert [(text[s.start : s.end], s.label) for s in out] == [
        ("Kiama", "LOC"),
        ("Brisbane", "LOC"),
    ]
    # a shop's name before a phone number is no town
    text = "Agence Soleil - 04 78 00 00 00"
    span = PIISpan(0, len(text), "ADDRESS", 0.6, "tagger:crf")
    assert _leftovers(text, span, [PIISpan(16, 30, "PHONE", 0.8, "regex")], lambda w: False) == []
    # no overlap: unchanged
    assert _leftovers(text, span, [], lambda w: False) == [span]
