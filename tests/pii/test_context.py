"""The gazetteer-and-context rules of the PII tagger (issue 32, item 2): names and towns the context makes
certain are found, ordinary words (also when they are names elsewhere) are left alone."""

from __future__ import annotations

import pytest

from privnlp.data.corpus import tokenize
from privnlp.mechanisms.pii.context import ContextRules, fold, word_zipf


@pytest.fixture(scope="module")
def rules():
    first = ["Laura", "Sara", "Marcus", "Pablo", "Tobias", "Léa", "Florence", "Anna"]
    last = ["Ramos", "Hoffmann", "Mercier", "Turner", "Bilbao"]
    return ContextRules(first, last, towns=["Harrogate"])


def found(rules: ContextRules, text: str) -> list[tuple[str, str]]:
    toks = tokenize(text)
    return [(text[s.start : s.end], s.label) for s in rules.spans(text, toks, lambda i, j: 0.5)]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Laura: oye, ¿me pasas el número?", ("Laura", "PERSON")),  # chat speaker
        ("ci vediamo sabato? Sara: sì, certo", ("Sara", "PERSON")),  # speaker after a sentence end
        ("Vorname: Tobias\nNachname: Hoffmann", ("Hoffmann", "PERSON")),  # form label
        ("Nom : Mercier   Prénom : Léa", ("Mercier", "PERSON")),
        (
            "Besprechung mit Herrn Fischer am Montag",
            ("Fischer", "PERSON"),
        ),  # title, unknown surname
        ("Cześć Ania, przesyłam numer", ("Ania", "PERSON")),  # greeting, unknown first name
        ("Call with Tanaka-san tomorrow", ("Tanaka", "PERSON")),  # honorific after
        ("Hey support, this is Will Ramos. The app", ("Will Ramos", "PERSON")),  # first + surname
        ("1:1 with Marcus in HR", ("Marcus", "PERSON")),  # a known, unambiguous first name
        ("train from Reading is delayed", ("Reading", "LOC")),  # ambiguous town after "from"
        ("He's in Mobile this week", ("Mobile", "LOC")),
        ("the Denver team", ("Denver", "LOC")),  # a large town, no context needed
        ("visitar la oficina de Bilbao", ("Bilbao", "LOC")),  # also a surname: needs the "de"
        ("ci vediamo a Torino", ("Torino", "LOC")),  # an Italian name of a large city
        ("Caller from San Antonio says", ("San Antonio", "LOC")),  # multi-word town
    ],
)
def test_context_makes_a_name_or_town(rules, text, want):
    assert want in found(rules, text)


@pytest.mark.parametrize(
    "text",
    [
        "Dear Customer, thank you",  # a frequent word after a greeting
        "Reading the manual helps.",  # ambiguous town, no place word
        "Will you send it?",  # ambiguous first name at a sentence start
        "Standup: we shipped it",  # a label, not a chat speaker
        "Card: declined",
        "Subject: lunch",
        "Pozdrawiam serdecznie",  # an ordinary Polish word
        "Florence said hello",  # a town that is a first name: a name here, not a town
    ],
)
def test_ordinary_words_are_not_towns(rules, text):
    got = found(rules, text)
    assert all(lab != "LOC" for _, lab in got), got
    if text != "Florence said hello":
        assert got == [], got


def test_word_frequencies_and_folding():
    assert word_zipf("the") > 6 and word_zipf("Pozdrawiam") > 4 and word_zipf("Xqzvbn") == 0
    assert fold("Théo") == "theo" and fold("Łódź") == "łodz"  # Ł has no decomposition: kept


def test_chat_transcript_speakers_but_not_form_labels(rules):
    chat = "Kasia: jestem w Poznaniu do piątku\nBartek: ok, zadzwoń 512 345 678"
    got = found(rules, chat)
    assert ("Kasia", "PERSON") in got and ("Bartek", "PERSON") in got
    assert ("Poznaniu", "LOC") in got  # Polish locative of Poznań after "w"
    form = "NIF: 123456789\nMorada: Rua de Santa Catarina 312, Porto"
    assert all(lab != "PERSON" for _, lab in found(rules, form))


def test_named_place_of_care_and_line_breaks(rules):
    t = "Seen at Queen Elizabeth Hospital on Monday."
    assert ("Queen Elizabeth Hospital", "LOC") in found(rules, t)
    assert found(rules, "Take him to the Hospital now") == []
    t = "Full name: Oliver Bramwell\nDate of birth: 04/08/1979"
    assert ("Oliver Bramwell", "PERSON") in found(rules, t)  # the name stops at the line break
