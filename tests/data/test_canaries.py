import math
import re

import numpy as np
import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.data import (
    Record,
    enumerate_space,
    generate_corpus,
    insert_canaries,
    make_canary,
    sample_space,
)


def test_ssn_canary_format_and_space():
    c = make_canary(rng=np.random.default_rng(0))
    assert re.fullmatch(r"my social security number is \d{3}-\d{2}-\d{4}", c.text)
    assert c.text == c.prefix + c.secret and c.prefix == "my social security number is "
    assert c.space_size == 10**9
    assert make_canary(rng=np.random.default_rng(0)) == c
    assert make_canary(rng=np.random.default_rng(1)).secret != c.secret


def test_digits_words_space_enumeration():
    c = make_canary("pin {digits:2} word {words:1}", rng=3, vocabulary=["red", "blue", "green"])
    assert c.space_size == 100 * 3
    cands = list(enumerate_space(c))
    assert len(cands) == 300 == len(set(cands)) and c.text in cands
    assert re.fullmatch(r"pin \d\d word (red|blue|green)", c.text)
    samp = sample_space(c, 200, rng=0)
    assert len(samp) == 200 and c.text not in samp and set(samp) <= set(cands)
    with pytest.raises(InvalidArgument, match="limit"):
        list(enumerate_space(make_canary(rng=0), limit=1000))


def test_bad_patterns():
    with pytest.raises(InvalidArgument, match="placeholder"):
        make_canary("no secret here", rng=0)
    with pytest.raises(InvalidArgument, match="unknown placeholder"):
        make_canary("x {ssn} {name}", rng=0)
    with pytest.raises(InvalidArgument):
        make_canary(rng=None)


def _records(n_users, per_user):
    return [
        Record(f"u{u}-{j}", f"u{u}", "chat", f"text {u} {j}")
        for u in range(n_users)
        for j in range(per_user)
    ]


def test_record_level_rate():
    recs = _records(500, 4)  # 2000 records
    c = make_canary(rng=0)
    res = insert_canaries(recs, c, rate=0.1, unit="record", rng=np.random.default_rng(7))
    n = len(res.inserted_ids)
    sd = math.sqrt(2000 * 0.1 * 0.9)
    assert abs(n - 200) < 4 * sd  # binomial, 4 sigma tolerance
    ids = set(res.inserted_ids)
    for old, new in zip(recs, res.records):
        assert (c.text in new.text) == (old.id in ids)
        assert new.text.startswith(old.text)
    assert set(res.inserted_users) == {r.user_id for r in recs if r.id in ids}
    out, ids2 = res  # unpacks as (records, inserted_ids)
    assert ids2 == res.inserted_ids and out == res.records


def test_user_level_rate_and_repeats():
    recs = _records(1000, 3)
    c = make_canary(rng=0)
    res = insert_canaries(recs, c, rate=0.2, unit="user", repeats=2, rng=np.random.default_rng(1))
    sd = math.sqrt(1000 * 0.2 * 0.8)
    assert abs(len(res.inserted_users) - 200) < 4 * sd
    per_user = {}
    for rid in res.inserted_ids:
        per_user[rid.split("-")[0]] = per_user.get(rid.split("-")[0], 0) + 1
    assert set(per_user) == set(res.inserted_users) and set(per_user.values()) == {2}


def test_repeats_in_record_and_edges():
    corpus = generate_corpus(2, 3, seed=0)
    c = make_canary("the code is {digits:4}", rng=0)
    res = insert_canaries(corpus, c, rate=1.0, repeats=3, rng=0)
    assert all(r.text.count(c.text) == 3 for r in res.records)
    assert all(new.spans == old.spans for new, old in zip(res.records, corpus.records))
    assert insert_canaries(corpus, c, rate=0.0, rng=0).inserted_ids == ()
    with pytest.raises(InvalidArgument, match="rate"):
        insert_canaries(corpus, c, rate=1.5, rng=0)
    with pytest.raises(InvalidArgument, match="unit"):
        insert_canaries(corpus, c, rate=0.5, unit="token", rng=0)
