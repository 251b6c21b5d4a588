"""The party-view audit: real pi_TEXT views look uniform and open only the label to Bob; the
plaintext baseline and the leaky twins are caught. Tolerances: KS at alpha=1e-3 (Bonferroni)."""

import numpy as np
import pytest

from privnlp.core.registry import ATTACKS, LEAKY_TWINS, MECHANISMS, SCENARIOS


@pytest.fixture(scope="module")
def scenario(alice):
    return SCENARIOS.get("mpc.inference")("quick", encoder="hashed")


def _scores(run):
    att = ATTACKS.get("party_view")()
    return {
        t.observation.party: att.run(t.observation, rng=None).score(t.ground_truth)
        for t in run.trials
    }


def test_uniformity_stats_separate_uniform_from_encoded():
    from privnlp.attacks.mpc import uniformity_stats

    rng = np.random.default_rng(0)
    u = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, 5000, dtype=np.int64)
    assert uniformity_stats(u)["ks_p"] > 1e-3
    enc = np.round(rng.normal(0, 1, 5000) * 2**16).astype(np.int64)
    assert uniformity_stats(enc)["ks_p"] < 1e-10


def test_real_protocol_views_are_uniform(scenario):
    run = scenario.run(MECHANISMS.get("crypten_textcnn")(), rng=0)
    assert run.utility["agreement_with_plaintext"] == 1.0
    s = _scores(run)
    for party in ("alice", "bob"):
        assert s[party]["distinguishing_advantage"] == 0.0, s
        assert s[party]["max_abs_correlation_with_secret"] < 0.1, s
        assert s[party]["unexpected_openings"] == 0.0
    views = {t.observation.party: t.observation for t in run.trials}
    assert set(views["bob"].opened) == {"label"} and views["alice"].opened == {}
    assert any(k.startswith("share/alice_weights/") for k in views["bob"].received)
    assert any(k.startswith("share/bob_input/") for k in views["alice"].received)


def test_plaintext_baseline_leaks(scenario):
    s = _scores(scenario.run(None, rng=0))
    assert s["alice"]["distinguishing_advantage"] > 0.3
    assert s["alice"]["max_abs_correlation_with_secret"] > 0.99


@pytest.mark.parametrize("leak", ["unmasked_shares", "open_intermediate"])
def test_leaky_twins_are_caught(scenario, leak):
    twin = LEAKY_TWINS.get("crypten_textcnn")(leak=leak)
    run = scenario.run(twin, rng=0)
    s = _scores(run)
    assert s["alice"]["distinguishing_advantage"] > 0.3, s
    if leak == "unmasked_shares":
        assert s["alice"]["max_abs_correlation_with_secret"] > 0.99
    else:
        assert s["alice"]["unexpected_openings"] >= 1
    assert s["bob"]["distinguishing_advantage"] == 0.0
