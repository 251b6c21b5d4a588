"""The residual-PII attack's estimate on a corpus without gold labels (``privnlp redact --report``)."""

from __future__ import annotations

import pytest

from privnlp.attacks.pii.residual import estimate_residual
from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.pii import LeakyPIIRedactionFirstMention, PIIRedactor

DOCS = [
    "Jane Doe called. Later Jane Doe wrote from jane@x.org; jane@x.org again.",
    "Mail jane@x.org or call +44 20 7946 0958.",
]
FIELDS = [{"PERSON": ["Jane Doe"]}, None]


def _run(red):
    res = red.redact_many(DOCS, FIELDS)
    found = [[(s.label, d[s.start : s.end]) for s in r.spans] for d, r in zip(DOCS, res)]
    return [r.text for r in res], found


def test_cross_reference_catches_the_leaky_twin():
    real_txt, real_found = _run(PIIRedactor())
    est = estimate_residual(DOCS, real_txt, real_found)
    assert est.cross_reference_residual == 0.0 and est.n_values == 3
    # the leaky twin replaces only the first mention of each entity: the attacker, holding the values
    # the redactor itself found, reads the other copies
    leaky = LeakyPIIRedactionFirstMention(regex=True)._redactor(None)
    leak_txt, leak_found = _run(leaky)
    est2 = estimate_residual(DOCS, leak_txt, leak_found)
    assert est2.cross_reference_residual > 0.3


def test_expected_missed_from_measured_recall():
    found = [[("PERSON", "Ann"), ("PERSON", "Bob"), ("EMAIL", "a@b.org")]]
    est = estimate_residual(["Ann Bob a@b.org"], ["x y z"], found, {"PERSON": 0.8, "EMAIL": 1.0})
    assert est.expected_missed == {"PERSON": pytest.approx(0.5), "EMAIL": 0.0}
    assert est.expected_residual_rate == pytest.approx(0.5 / 3.5)
    assert estimate_residual(["a"], ["a"], [[]]).expected_residual_rate is None
    with pytest.raises(InvalidArgument, match="same length"):
        estimate_residual(["a"], [], [[]])
