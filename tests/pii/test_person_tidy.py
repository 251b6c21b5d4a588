"""PERSON spans from every source tidied once at the end of ``PIIRedactor.analyze`` (issue 32, after the fifth
blind set was scored: development): cut at a column gap, no leading greeting / title, no all-caps form label on
its own. Examples written for this test (none copied from an evaluation set)."""

from __future__ import annotations

import pytest

from privnlp.mechanisms.pii.redact import _tidy_persons
from privnlp.mechanisms.pii.types import PIISpan


def _tidy(text: str, part: str) -> list[str]:
    a = text.index(part)
    return [
        text[s.start : s.end]
        for s in _tidy_persons(text, [PIISpan(a, a + len(part), "PERSON", 0.9, "t")])
    ]


@pytest.mark.parametrize(
    "text, part, want",
    [
        ("Hola Marisol, te escribo por la fianza", "Hola Marisol", ["Marisol"]),
        ("Grüezi Frau Baumgartner, danke", "Grüezi Frau Baumgartner", ["Baumgartner"]),
        ("Kære Søren Holm", "Kære Søren Holm", ["Søren Holm"]),
        ("Dear Ms. Okafor,", "Dear Ms. Okafor", ["Okafor"]),
        ("Sayın Mehmet Aydın", "Sayın Mehmet Aydın", ["Mehmet Aydın"]),
        (
            "Titular: Lucas Ferreira Lima   CPF 529.982.247-25",
            "Lucas Ferreira Lima   CPF",
            ["Lucas Ferreira Lima"],
        ),
        ("Anna Kowalska\tID 44051401359", "Anna Kowalska\tID", ["Anna Kowalska"]),
    ],
)
def test_person_spans_tidied(text, part, want):
    assert _tidy(text, part) == want


@pytest.mark.parametrize(
    "text, part, want",
    [
        (
            "Don Whitaker called twice",
            "Don Whitaker",
            ["Don Whitaker"],
        ),  # a first name, not the title
        ("Cara Mendes signed", "Cara Mendes", ["Cara Mendes"]),
        ("Mary-Jane O'Neill", "Mary-Jane O'Neill", ["Mary-Jane O'Neill"]),
        ("Hola", "Hola", ["Hola"]),  # nothing left after the greeting: the span is kept as tagged
        ("Jan de Vries", "Jan de Vries", ["Jan de Vries"]),
    ],
)
def test_person_spans_kept(text, part, want):
    assert _tidy(text, part) == want


@pytest.mark.parametrize("label", ["BSN", "DOB", "PPSN", "PAYE"])
def test_form_label_codes_are_not_names(label):
    text = f"{label}: 123456782"
    assert _tidy(text, label) == []


def test_other_labels_untouched():
    text = "Hola Madrid"
    span = PIISpan(0, len(text), "LOC", 0.9, "t")
    assert _tidy_persons(text, [span]) == [span]
