"""Exposure formula, extrapolation, masked secrets and the canary_exposure attack."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privnlp.attacks.memorization import (
    CanaryExposure,
    canary_exposure,
    canary_template,
    exact_exposure,
    exposure_from_rank,
    extrapolated_exposure,
    make_masked_secret,
    rank_with_ties,
    skewnorm_log_cdf,
)
from privnlp.core.errors import InvalidArgument
from privnlp.core.observations import BlackBoxLM


def test_rank_hand_computed_ties_count_against_canary():
    # log-perplexities (lower = more likely); canary scores 2.0
    ref = [1.0, 2.0, 2.0, 3.0, 5.0]
    assert rank_with_ties(2.0, ref) == 4  # 1.0 and both ties are ranked ahead
    assert rank_with_ties(0.5, ref) == 1
    assert rank_with_ties(9.0, ref) == 6
    assert rank_with_ties(float("nan"), ref) == 6  # a NaN canary never gets credit
    assert rank_with_ties(1.5, [1.0, float("nan")]) == 3
    e = exact_exposure(2.0, ref)
    assert e.rank == 4 and e.space_size == 6
    assert e.exposure == pytest.approx(math.log2(6) - 2.0)
    # a constant model: the canary ties with everything -> exposure 0
    assert exact_exposure(1.0, [1.0] * 7).exposure == 0.0
    assert exposure_from_rank(1, 1024) == 10.0
    with pytest.raises(InvalidArgument):
        exposure_from_rank(0, 10)
    with pytest.raises(InvalidArgument):
        exact_exposure(1.0, [1.0, 2.0], space_size=10)


def test_extrapolated_close_to_enumerated():
    g = np.random.default_rng(0)
    from scipy import stats

    space = stats.skewnorm.rvs(3.0, loc=40.0, scale=4.0, size=200_000, random_state=g)
    for q in (0.01, 0.001, 1e-4):  # tolerance: 1 bit (a factor 2 in rank) at |R| = 2e5
        canary = float(np.quantile(space, q)) - 1e-9
        exact = exact_exposure(canary, space[space != canary], space.size + 1)
        sample = g.choice(space, 5000, replace=False)
        ext = extrapolated_exposure(canary, sample, space.size + 1)
        assert abs(ext.exposure - exact.exposure) < 1.0, (q, ext.exposure, exact.exposure)


def test_skewnorm_log_cdf_stable_in_far_tail():
    v = skewnorm_log_cdf(-60.0, 2.0, 0.0, 1.0)
    assert math.isfinite(v) and v < -1000
    ext = extrapolated_exposure(-1e3, np.random.default_rng(1).normal(50, 5, 500), 10**9)
    assert ext.exposure == pytest.approx(math.log2(10**9))  # capped at log2 |R|
    assert ext.raw_exposure > ext.exposure


def test_masked_secret_formats():
    g = np.random.default_rng(0)
    for fmt, n in (("HS", 2), ("HSH", 3), ("HHSHH", 5)):
        c = make_masked_secret(fmt, rng=g)
        assert len(c.text.split()) == n and c.space_size == 32
        assert c.secret in c.text.split()
    with pytest.raises(InvalidArgument):
        make_masked_secret("SS", rng=g)


def test_template_hides_secret():
    t = canary_template("my pin code is {digits:4}")
    assert t.secret == "" and t.values == () and t.space_size == 10**4


def test_memorized_canary_has_high_exposure(canary_lms):
    with_c, without = canary_lms
    c = with_c["canaries"][0]
    hi = canary_exposure(with_c["model"], with_c["tokenizer"], c, rng=0)
    lo = canary_exposure(without["model"], without["tokenizer"], c, rng=0)
    assert hi.method == "exact" and hi.exposure > 8.0, hi
    assert lo.exposure < 5.0, lo
    # sampled + skew-normal extrapolation agrees with the enumeration on the non-memorizing model
    ext = canary_exposure(
        without["model"], without["tokenizer"], c, method="extrapolated", n_samples=500, rng=0
    )
    assert abs(ext.exposure - lo.exposure) < 1.5, (ext, lo)


def test_attack_scorer_end_to_end(canary_lms):
    with_c, without = canary_lms
    c = with_c["canaries"][0]
    for out, expect_hi in ((with_c, True), (without, False)):
        obs = BlackBoxLM(
            model=out["model"], tokenizer=out["tokenizer"], meta={"canary_pattern": c.pattern}
        )
        res = CanaryExposure().run(obs, rng=np.random.default_rng(0))
        assert c.secret not in repr(obs.meta)
        s = res.score(c)
        assert s["log2_space"] == pytest.approx(math.log2(10**3))
        if expect_hi:
            assert s["exposure"] > 8 and s["extracted"] == 1.0
        else:
            assert s["exposure"] < 5 and s["extracted"] == 0.0
        assert res.score(c.text)["exposure"] == s["exposure"]


def test_bad_observation():
    with pytest.raises(InvalidArgument):
        CanaryExposure().run(BlackBoxLM(model=None, tokenizer=None), rng=0)
    with pytest.raises(InvalidArgument):
        CanaryExposure(n_samples=1)
