"""The CRF PII tagger (issue 32, item 2): it generalises to names it never saw (apostrophes, accents,
hyphens, lone first names), and its per-span confidence is a calibrated probability, not a constant."""

from __future__ import annotations

import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.pii.crf import CRFTagger, calibrate, tidy_span, train_crf_tagger
from privnlp.mechanisms.pii.evalset import load_evalset
from privnlp.mechanisms.pii.types import PIISpan

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def small_crf(tmp_path_factory):
    path = tmp_path_factory.mktemp("crf") / "m.crfsuite"
    return train_crf_tagger(600, rng=0, path=path, max_iterations=60)


def covered(tagger, text: str, name: str, label: str = "PERSON") -> bool:
    a = text.index(name)
    chars = {i for i in range(a, a + len(name)) if text[i].isalnum()}
    got = {i for s in tagger.spans(text) if s.label == label for i in range(s.start, s.end)}
    return chars <= got


def test_unseen_names_with_apostrophes_accents_hyphens(small_crf):
    cases = [
        ("Hi, my name is Margaret O'Connell and I need help.", "Margaret O'Connell"),
        ("Hola, soy José Luis Martínez. Gracias.", "José Luis Martínez"),
        ("Name: Jean-Baptiste Moreau\nCity: Lyon", "Jean-Baptiste Moreau"),
        ("Deliver to Siobhan Ní Bhriain, 3 Castle Terrace, Cardiff.", "Siobhan"),
    ]
    hits = [covered(small_crf, t, n) for t, n in cases]
    assert sum(hits) >= 3, hits


def test_lone_first_names_in_context(small_crf):
    text = "Attendees: Anna, Peter and Yuki. Anna will draft the plan by Friday."
    found = sum(covered(small_crf, text, n) for n in ("Anna", "Peter", "Yuki"))
    assert found >= 2
    # ordinary words stay: the weekday and the verbs are not names
    assert not any(text[s.start : s.end] in ("Friday", "Attendees") for s in small_crf.spans(text))


def test_confidence_is_a_probability_not_a_constant(small_crf):
    val = load_evalset("validation")
    raw = [s.score for d in val for s in small_crf.raw_spans(d.text)]
    assert all(0.0 <= x <= 1.0 for x in raw) and len({round(x, 3) for x in raw}) >= 5
    small_crf.calibration = calibrate(small_crf, val)
    a, _b, _c = small_crf.calibration
    assert a > 0  # higher marginal -> higher calibrated probability (monotone map)
    assert small_crf.score(0.9) > small_crf.score(0.5) > small_crf.score(0.2)
    cal = [s.score for d in val for s in small_crf.spans(d.text)]
    assert len({round(x, 3) for x in cal}) >= 5


def test_save_load_roundtrip(small_crf, tmp_path):
    text = "Please call Fiona Hughes in Leeds."
    small_crf.save(tmp_path / "t.crfsuite")
    again = CRFTagger.load(tmp_path / "t.crfsuite")
    assert again.spans(text) == small_crf.spans(text)
    (tmp_path / "bad.crfsuite").write_text("x")
    with pytest.raises(InvalidArgument, match="not a privnlp CRF tagger"):
        CRFTagger.load(tmp_path / "bad.crfsuite")


def test_tidy_span_drops_titles_greetings_and_function_words(small_crf):
    g = small_crf.gazetteers
    t = "Dear Mr. Khan, ask Ray if Summer comes."
    s = tidy_span(t, PIISpan(0, 13, "PERSON", 0.9), g)
    assert [t[x.start : x.end] for x in s] == ["Khan"]
    a = t.index("Ray")
    s = tidy_span(t, PIISpan(a, a + len("Ray if Summer"), "PERSON", 0.9), g)
    assert [t[x.start : x.end] for x in s] == ["Ray", "Summer"]
    t3 = "Customer Will Turner called"
    assert [t3[x.start : x.end] for x in tidy_span(t3, PIISpan(0, 20, "PERSON"), g)] == [
        "Will Turner"
    ]
    t4 = "at St. Mary's Hospital"
    assert [t4[x.start : x.end] for x in tidy_span(t4, PIISpan(7, 22, "LOC"), g)] == [
        "Mary's Hospital"
    ]
    t2 = "Sanne de Vries"
    assert [t2[x.start : x.end] for x in tidy_span(t2, PIISpan(0, 14, "PERSON"), g)] == [t2]


def test_cache_key_covers_the_model_inputs_and_calibration_follows_the_validation_file(
    small_crf, tmp_path, monkeypatch
):
    """The bug "the CRF cache key ignores the validation file": the model is keyed on every input that
    changes it, and the calibration is refitted (without retraining) when validation.txt changes."""
    from privnlp.mechanisms.pii import crf

    assert crf._model_key(0, 3000) != crf._model_key(1, 3000) != crf._model_key(0, 2000)
    assert crf._model_key(0, 3000) == crf._model_key(0, 3000)
    # the recognizers feed the training labels (auto-annotation) and replace CRF spans: both keys follow their code
    key, spans_key = crf._model_key(0, 3000), crf._spans_code_key()
    with monkeypatch.context() as m:
        m.setattr(crf, "recognizers", crf.orgs)  # another source in the recognizers' place
        assert crf._model_key(0, 3000) != key and crf._spans_code_key() != spans_key
    monkeypatch.setenv("PRIVNLP_CACHE_DIR", str(tmp_path / "cache"))
    evaldir = tmp_path / "eval"
    evaldir.mkdir()
    val = (crf.default_evalset_dir() / "validation.txt").read_text(encoding="utf-8")
    texts = ["### " + t for t in val.split("### ")[1:]]
    (evaldir / "validation.txt").write_text(
        "".join(texts[:60]), encoding="utf-8"
    )  # fast calibration
    monkeypatch.setattr(crf, "default_evalset_dir", lambda: evaldir)
    trained = []

    def fake_train(n_docs, *, rng, path, clusters=None):  # the module's small model, copied
        trained.append(path)
        small_crf.save(path)
        return CRFTagger.load(path)

    monkeypatch.setattr(crf, "train_crf_tagger", fake_train)
    t1 = crf.crf_tagger()
    assert len(trained) == 1 and t1.calibrated_on is not None
    t2 = crf.crf_tagger()  # cached, same validation file: neither retrained nor recalibrated
    assert len(trained) == 1 and t2.calibrated_on == t1.calibrated_on
    assert t2.calibration == pytest.approx(t1.calibration)
    # other texts: another calibration
    (evaldir / "validation.txt").write_text("".join(texts[60:]), encoding="utf-8")
    t3 = crf.crf_tagger()
    assert len(trained) == 1  # the model is not retrained for a new validation file ...
    assert t3.calibrated_on != t1.calibrated_on  # ... but its calibration is refitted on it
    assert t3.calibration != pytest.approx(t1.calibration)
    # the calibration pool (seventh round): a read blind set joins the fit; test.txt never does
    (evaldir / "test.txt").write_text("".join(texts[:30]), encoding="utf-8")
    assert crf.crf_tagger().calibrated_on == t3.calibrated_on
    (evaldir / "test_blind6.txt").write_text("".join(texts[:40]), encoding="utf-8")
    t4 = crf.crf_tagger()
    assert len(trained) == 1 and t4.calibrated_on != t3.calibrated_on
    assert t4.calibration != pytest.approx(t3.calibration)


#: non-US names in contexts written for this test (issue 32, fifth round: the training documents of ~45
#: locales); the CRF's own spans, no context rule
NAME_CASES = [
    ("Merhaba, ben Elif Karataş. Siparişim gelmedi.", "Elif Karataş"),
    ("Hej! Det är Linnea Sjöberg, ring mig i morgon.", "Linnea Sjöberg"),
    ("Vorname: Jörg\nNachname: Pfeiffer\nWohnort: Kassel", "Pfeiffer"),
    ("Estimada Sra. Villalobos:\nLe escribimos por su pedido.", "Villalobos"),
    ("Passenger NOWICKA/AGNIESZKA seat 12C", "NOWICKA"),
    ("Present: Chinedu Okafor, Priya Raghunathan. Minutes: Chinedu.", "Priya Raghunathan"),
    ("Regards,\nDIOGO FERREIRA", "DIOGO FERREIRA"),
    ("Reservation for Kowalczyk at 8 pm, table for two.", "Kowalczyk"),
]
#: company, product and venue names in the same kinds of documents: never a PERSON
COMPANY_CASES = [
    ("Invoice 004512 from Brandt & Vogel GmbH is overdue.", "Brandt & Vogel GmbH"),
    ("Our Porsche Macan is back in stock.", "Porsche Macan"),
    ("Greenfield Logistics Ltd acquired Moreau Transports S.A. last year.", "Moreau Transports"),
    ("Sent from my Galaxy S9", "Galaxy"),
    ("The team dinner is at the Royal Oak.", "Royal Oak"),
]


def _crf_found(tagger, text: str, word: str) -> bool:
    a = text.index(word)
    chars = {i for i in range(a, a + len(word)) if text[i].isalnum()}
    got = {i for s in tagger.raw_spans(text) if s.label == "PERSON" for i in range(s.start, s.end)}
    return chars <= got


def test_the_crf_finds_non_us_names_in_capitals_and_after_foreign_titles(small_crf):
    hits = [_crf_found(small_crf, t, n) for t, n in NAME_CASES]
    assert sum(hits) >= 6, list(zip([n for _, n in NAME_CASES], hits))


def test_company_product_and_venue_names_are_no_person(small_crf):
    for text, org in COMPANY_CASES:
        a = text.index(org)
        person = [
            text[s.start : s.end]
            for s in small_crf.spans(text)
            if s.label == "PERSON" and s.start < a + len(org) and a < s.end
        ]
        assert not person, (org, person)
