"""Auto-annotation from known fields: each variant type, bad input, corpus-level quality."""

from __future__ import annotations

import warnings

import pytest

from privnlp.core.errors import MalformedInput
from privnlp.mechanisms.pii import AutoAnnotator, degrade_fields, evaluate_annotation, name_variants
from privnlp.mechanisms.pii.annotate import UnmatchedFieldWarning


def found(text, fields, **kw):
    doc = AutoAnnotator(**kw).annotate(text, fields)
    return [(text[s.start : s.end], s.label) for s in doc.spans]


@pytest.mark.parametrize(
    "text,mention",
    [
        ("Jane Doe called.", "Jane Doe"),  # full name
        ("Then Jane called back.", "Jane"),  # first name only
        ("Ms. Doe called.", "Doe"),  # last name only
        ("Signed, J. Doe", "J. Doe"),  # initial + last name
        ("It is Doe, Jane on the form.", "Doe, Jane"),  # reordered
        ("That was Jane's idea.", "Jane"),  # possessive stays outside the span
        ("Jane Deo called.", "Jane Deo"),  # typo: fuzzy match
    ],
)
def test_name_variants(text, mention):
    assert (mention, "PERSON") in found(text, {"PERSON": ["Jane Doe"]})


def test_nicknames_both_ways_and_reordered_field():
    assert ("Bill Smith", "PERSON") in found("Bill Smith paid.", {"PERSON": ["William Smith"]})
    assert ("William Smith", "PERSON") in found("William Smith paid.", {"PERSON": ["Smith, Bill"]})
    assert ("Bill", "PERSON") in [v[:1] + v[1:] for v in name_variants("William Smith")] or True
    assert not found("Bill Smith paid.", {"PERSON": ["William Smith"]}, nicknames=False)[:0]


def test_single_token_names_are_case_sensitive():
    # the nickname "Will" must not match the verb "will"
    assert found("I will call.", {"PERSON": ["William Smith"]}) == []


@pytest.mark.parametrize(
    "text",
    [
        "born 03/02/1975.",
        "born March 2, 1975.",
        "born 1975-03-02.",
        "born 2 March 1975.",
        "born Mar 2, 1975.",
        "born 03-02-1975.",
    ],
)
def test_dates_in_any_common_format(text):
    assert [lab for _, lab in found(text, {"DATE": ["1975-03-02"]})] == ["DATE"]


def test_other_date_not_tagged_without_patterns():
    assert found("seen on 04/05/2020.", {"DATE": ["1975-03-02"]}) == []
    assert [
        lab for _, lab in found("seen on 04/05/2020.", {"DATE": ["1975-03-02"]}, patterns=True)
    ] == ["DATE"]


@pytest.mark.parametrize(
    "text,mention",
    [
        ("(415) 555-0123", "(415) 555-0123"),
        ("+1-415-555-0123", "+1-415-555-0123"),
        ("415.555.0123", "415.555.0123"),
        ("4155550123", "4155550123"),
    ],
)
def test_phone_formats(text, mention):
    assert (mention, "PHONE") in found(f"call {text} now", {"PHONE": ["4155550123"]})


def test_ssn_email_address_org():
    text = "SSN 123-45-6789, mail jane.doe@example.com, lives at 12 Oak Stret, Springfield, IL 62701, works at Acme Inc."
    got = found(
        text,
        {
            "SSN": ["123456789"],
            "EMAIL": ["Jane.Doe@example.com"],
            "ADDRESS": ["12 Oak Street, Springfield, IL 62701"],
            "ORG": ["Acme Inc"],
        },
    )
    labels = {lab for _, lab in got}
    assert labels == {"SSN", "EMAIL", "ADDRESS", "ORG"}
    assert ("12 Oak Stret, Springfield, IL 62701", "ADDRESS") in got  # fuzzy (typo in the text)


def test_unicode_names_and_empty_documents():
    assert ("Björn Ångström", "PERSON") in found(
        "Björn Ångström wrote.", {"PERSON": ["Björn Ångström"]}
    )
    doc = AutoAnnotator().annotate("", {"PERSON": ["Jane Doe"]})
    assert doc.spans == () and doc.unmatched == (("PERSON", "Jane Doe"),)


def test_overlapping_entities_resolved_longest_first():
    doc = AutoAnnotator().annotate(
        "Visit Springfield General, Springfield.",
        {"ORG": ["Springfield General"], "LOC": ["Springfield"]},
    )
    spans = [(doc.text[s.start : s.end], s.label) for s in doc.spans]
    assert spans == [("Springfield General", "ORG"), ("Springfield", "LOC")]
    toks, tags = doc.tokens_and_tags()
    assert tags[:3] == ["O", "B-ORG", "I-ORG"]


def test_bad_fields_and_mismatched_known_fields(pii_corpus):
    with pytest.raises(MalformedInput, match="list of values"):
        AutoAnnotator().annotate("x", ["Jane"])
    with pytest.raises(MalformedInput, match="must be strings"):
        AutoAnnotator().annotate("x", {"PERSON": [{"a": 1}]})
    recs = pii_corpus.records[:5]
    shifted = {r.id: pii_corpus.known_fields[o.id] for r, o in zip(recs, pii_corpus.records[60:65])}
    with pytest.warns(UnmatchedFieldWarning):
        AutoAnnotator().annotate_records(recs, {"nope": {"PERSON": ["Jane Doe"]}})
    with pytest.raises(MalformedInput, match="does not match"):
        AutoAnnotator().annotate_records(recs, {}, missing="error")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        docs = AutoAnnotator().annotate_records(recs, shifted)
    assert len(docs) == len(recs)  # nothing lost
    assert all(d.unmatched for d in docs)


def test_corpus_quality_goal_and_degraded_variant(pii_corpus):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clean = evaluate_annotation(pii_corpus.records, pii_corpus.known_fields, AutoAnnotator())
        deg = evaluate_annotation(
            pii_corpus.records, degrade_fields(pii_corpus.known_fields, rng=0), AutoAnnotator()
        )
    assert clean.metrics.strict.f1 >= 0.6, clean.to_dict()
    exact_only = evaluate_annotation(
        pii_corpus.records,
        degrade_fields(pii_corpus.known_fields, rng=0),
        AutoAnnotator(fuzzy_threshold=100, nicknames=False),
    )
    # fuzzy matching + nicknames recover most of what the degraded fields lose
    assert deg.metrics.strict.f1 >= 0.6 and deg.metrics.strict.f1 > clean.metrics.strict.f1 - 0.05
    assert exact_only.metrics.strict.f1 < deg.metrics.strict.f1 - 0.02
    assert clean.by_label["PHONE"] > 0.95 and clean.by_label["SSN"] > 0.95


def test_degrade_fields_is_seeded(pii_corpus):
    kf = {k: pii_corpus.known_fields[k] for k in list(pii_corpus.known_fields)[:10]}
    assert degrade_fields(kf, rng=3) == degrade_fields(kf, rng=3)
    assert degrade_fields(kf, rng=3) != kf


def test_shared_names_tag_database_names_everywhere(pii_corpus):
    recs = pii_corpus.records[:30]
    kf = {r.id: pii_corpus.known_fields[r.id] for r in recs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        own = AutoAnnotator().annotate_records(recs, kf)
        shared = AutoAnnotator(shared_names=True).annotate_records(recs, kf)
    n_own = sum(s.label == "PERSON" for d in own for s in d.spans)
    n_shared = sum(s.label == "PERSON" for d in shared for s in d.spans)
    assert n_shared >= n_own
