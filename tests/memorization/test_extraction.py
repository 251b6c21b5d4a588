"""Random Sampling / Beam Search memorization tests and Carlini-style extraction."""
from __future__ import annotations

import numpy as np

from privnlp.core.observations import BlackBoxLM
from privnlp.data import make_canary
from privnlp.attacks.memorization import (CanaryExtraction, beam_search_test, federated_secret_sharer,
                                          random_sampling_test, render_partial)


def test_render_partial():
    c = make_canary("my social security number is {ssn}", rng=0)
    sym = [v for vals in c.values for v in vals]
    assert render_partial(c, sym) == c.text
    assert render_partial(c, sym[:4]) == "my social security number is " + "".join(sym[:3]) + "-" + sym[3]
    assert render_partial(c, []) == "my social security number is"
    w = make_canary("the words {words:3} end", rng=0)
    assert render_partial(w, list(w.values[0][:1])) == "the words " + w.values[0][0]


def test_bs_and_rs_extract_memorized_canary_only(canary_lms):
    with_c, without = canary_lms
    c = with_c["canaries"][0]
    assert beam_search_test(with_c["model"], with_c["tokenizer"], c)[0]
    assert not beam_search_test(without["model"], without["tokenizer"], c)[0]
    assert random_sampling_test(with_c["model"], with_c["tokenizer"], c, n_samples=300, rng=0)[0]
    assert not random_sampling_test(without["model"], without["tokenizer"], c, n_samples=300, rng=0)[0]


def test_carlini_extraction_attack(canary_lms):
    with_c, without = canary_lms
    c = with_c["canaries"][0]
    atk = CanaryExtraction(beam_width=16, n_samples=200)
    hit = atk.run(BlackBoxLM(model=with_c["model"], tokenizer=with_c["tokenizer"],
                             meta={"canary_pattern": c.pattern}), rng=0).score(c)
    miss = atk.run(BlackBoxLM(model=without["model"], tokenizer=without["tokenizer"],
                              meta={"canary_pattern": c.pattern}), rng=0).score(c)
    assert hit["extracted"] == 1.0 and hit["edit_distance"] == 0.0 and hit["bs_memorized"] == 1.0
    assert miss["extracted"] == 0.0 and miss["bs_memorized"] == 0.0


def test_federated_secret_sharer_rates():
    from privnlp.data.corpus import Record

    recs = [Record(id=f"r{i}", user_id=f"u{i // 10}", kind="note", text="x", spans=()) for i in range(10000)]
    c = make_canary("my pin code is {digits:4}", rng=0)
    out, sharers, n = federated_secret_sharer(recs, c, p_u=0.5, p_e=0.2, rng=0)
    assert 400 <= len(sharers) <= 600
    assert abs(n - 0.2 * 10 * len(sharers)) < 0.25 * 0.2 * 10 * len(sharers)
    assert all(r.text == "x" for r in out if r.user_id not in sharers)
