"""The bundled private corpus: determinism, exact gold spans, BIO tags, non-IID users."""

import collections
import datetime as dt
import json
import re

import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.data import (
    LABELS,
    PrivateCorpus,
    Span,
    generate_corpus,
    read_jsonl_corpus,
    spans_to_bio,
    tokenize,
)
from privnlp.metrics import bio_to_spans


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(40, 10, seed=3)


SSN = re.compile(r"^\d{3}-\d{2}-\d{4}$")
PHONE = re.compile(r"^(\+1[ -])?(\(\d{3}\) |\d{3}[-. ])\d{3}[-. ]\d{4}$")
EMAIL = re.compile(r"^[a-z0-9._]+@[a-z0-9.-]+\.[a-z]{2,}$")
ADDRESS = re.compile(r"^\d+ .+, .+, [A-Z]{2} \d{5}$")
PERSON = re.compile(r"^[A-Z][A-Za-z'\-]+( [A-Z][A-Za-z'\-]+)*$")
DATE_FORMATS = ("%B %d, %Y", "%m/%d/%Y", "%Y-%m-%d", "%d %B %Y", "%b %d, %Y", "%m-%d-%Y")


def _is_date(s):
    for f in DATE_FORMATS:
        try:
            dt.datetime.strptime(s, f)
            return True
        except ValueError:
            pass
    return False


def test_deterministic_per_seed():
    a = generate_corpus(6, 4, seed=11)
    b = generate_corpus(6, 4, seed=11)
    c = generate_corpus(6, 4, seed=12)
    assert a.records == b.records
    assert a.texts() != c.texts()
    # user u's records do not depend on how many users are generated
    assert generate_corpus(3, 4, seed=11).records == a.records[:12]


def test_shape_and_api(corpus):
    assert isinstance(corpus, PrivateCorpus) and len(corpus.records) == 400
    assert len(corpus.users) == 40 and corpus.users[0] == "user0000"
    assert all(len(v) == 10 for v in corpus.by_user().values())
    assert len({r.id for r in corpus.records}) == 400
    assert corpus.texts()[0] == corpus.records[0].text
    assert {r.kind for r in corpus.records} == {"email", "note", "chat"}
    with pytest.raises(Exception):
        corpus.records[0].text = "x"  # frozen


def test_gold_spans_exact_and_well_typed(corpus):
    labels = collections.Counter()
    for r in corpus.records:
        prev_end = 0
        bounds = {b for _, s, e in tokenize(r.text) for b in (s, e)}
        for sp in sorted(r.spans, key=lambda s: s.start):
            ent = r.text[sp.start : sp.end]
            assert ent and ent == ent.strip(), (r.id, sp)
            assert sp.start >= prev_end, f"overlapping spans in {r.id}"
            prev_end = sp.end
            assert sp.start in bounds and sp.end in bounds, "span boundary inside a token"
            assert sp.label in LABELS
            labels[sp.label] += 1
            check = {
                "SSN": SSN.match,
                "PHONE": PHONE.match,
                "EMAIL": EMAIL.match,
                "ADDRESS": ADDRESS.match,
                "PERSON": PERSON.match,
                "DATE": _is_date,
            }.get(sp.label)
            if check is not None:
                assert check(ent), (sp.label, ent)
            if sp.label in ("ORG", "LOC"):
                assert ent[0].isupper() or ent[0].isdigit(), ent
    assert set(labels) >= {"PERSON", "SSN", "PHONE", "ADDRESS", "DATE", "ORG", "EMAIL"}


def test_bio_tags_match_spans(corpus):
    for r in corpus.records:
        toks, tags = r.tokens_and_tags()
        assert len(toks) == len(tags)
        offs = tokenize(r.text)
        back = [(offs[s][1], offs[e - 1][2], lab) for s, e, lab in bio_to_spans(tags)]
        assert back == [(s.start, s.end, s.label) for s in sorted(r.spans, key=lambda s: s.start)]


def test_spans_to_bio_hand_example():
    toks, tags = spans_to_bio(
        "Call Ann Lee at 555-1234.", [Span(5, 12, "PERSON"), Span(16, 24, "PHONE")]
    )
    assert toks == ["Call", "Ann", "Lee", "at", "555", "-", "1234", "."]
    assert tags == ["O", "B-PERSON", "I-PERSON", "O", "B-PHONE", "I-PHONE", "I-PHONE", "O"]


def test_users_are_non_iid(corpus):
    by = corpus.by_user()
    kinds = {u: collections.Counter(r.kind for r in rs) for u, rs in by.items()}
    tv = max(
        0.5 * sum(abs(kinds[a][k] - kinds[b][k]) / 10 for k in ("email", "note", "chat"))
        for a in by
        for b in by
    )
    assert tv >= 0.6
    # a user's own habits recur: the most common PERSON entity of a user repeats across their records
    reps = 0
    for rs in by.values():
        c = collections.Counter(
            r.text[s.start : s.end] for r in rs for s in r.spans if s.label in ("PHONE", "EMAIL")
        )
        reps += bool(c) and c.most_common(1)[0][1] >= 2
    assert reps >= len(by) // 2


def test_vocabulary_moderate():
    c = generate_corpus(60, 10, seed=0)
    vocab = {t.lower() for r in c.records for t in r.tokens_and_tags()[0]}
    assert 1500 <= len(vocab) <= 20000


def test_kinds_filter_and_validation():
    c = generate_corpus(3, 5, seed=0, kinds=("chat",))
    assert {r.kind for r in c.records} == {"chat"}
    with pytest.raises(InvalidArgument, match="kinds"):
        generate_corpus(2, 2, kinds=("tweet",))
    with pytest.raises(InvalidArgument, match="n_users"):
        generate_corpus(0, 2)
    with pytest.raises(InvalidArgument, match="records_per_user"):
        generate_corpus(2, -1)


def test_jsonl_and_conll_roundtrip(tmp_path):
    c = generate_corpus(3, 3, seed=5)
    c.to_jsonl(tmp_path / "c.jsonl")
    back = read_jsonl_corpus(tmp_path / "c.jsonl")
    assert back.records == c.records
    first = json.loads((tmp_path / "c.jsonl").read_text().splitlines()[0])
    assert set(first) == {"id", "user_id", "kind", "text", "spans"}
    c.to_conll(tmp_path / "c.conll")
    lines = (tmp_path / "c.conll").read_text().splitlines()
    n_tok = sum(len(r.tokens_and_tags()[0]) for r in c.records)
    assert sum(1 for ln in lines if ln and not ln.startswith("# id")) == n_tok
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, privnlp.data, privnlp.metrics; print('torch' in sys.modules, 'faker' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "False"]
