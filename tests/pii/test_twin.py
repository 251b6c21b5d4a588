"""pii_redaction vs its leaky twin vs no redaction on the pii.redaction scenario (regex-only redactor: fast);
``residual_recall`` on hand-made documents."""

from __future__ import annotations

import numpy as np
import pytest

from privnlp.attacks.pii import ResidualPII
from privnlp.core.registry import LEAKY_TWINS, MECHANISMS
from privnlp.evaluation.scenarios.pii import PIIRedactionScenario


def _residual(mech):
    run = PIIRedactionScenario("quick", lm=False).run(mech, rng=np.random.default_rng(0))
    atk = ResidualPII()
    scores = [atk.run(t.observation, rng=0).score(t.ground_truth) for t in run.trials]
    return {k: float(np.mean([s[k] for s in scores])) for k in scores[0]} | {
        "per_trial_repeated": [s["residual_repeated_recall"] for s in scores]
    }, run


def test_registered_and_twin_caught():
    real_cls, twin_cls = MECHANISMS.get("pii_redaction"), LEAKY_TWINS.get("pii_redaction")
    assert issubclass(twin_cls, real_cls)
    real, twin = (
        real_cls(rounds=0),
        twin_cls(rounds=0),
    )  # regex recognizers only (no tagger training here)
    assert real.claim().kind.value == "heuristic" and twin.claim() == real.claim()
    none, _ = _residual(None)
    r, run = _residual(real)
    t, _ = _residual(twin)
    assert none["residual_pii_recall"] == pytest.approx(1.0)
    assert r["residual_pii_recall"] < none["residual_pii_recall"] - 0.1
    assert (
        t["residual_pii_recall"] > r["residual_pii_recall"] + 0.03
    )  # repeated mentions survive in the twin
    # the headline (residual recall over the entities a document names twice or more) separates them in every
    # trial, not only on average (measured regex-only, seeds 0/1: real 0.33-0.50, twin 0.67-0.75 per trial)
    assert ResidualPII.headline_metric == "residual_repeated_recall"
    assert none["residual_repeated_recall"] == pytest.approx(1.0)
    assert t["residual_repeated_recall"] > r["residual_repeated_recall"] + 0.2
    assert min(t["per_trial_repeated"]) > max(r["per_trial_repeated"])
    assert 0 <= r["reid_accuracy"] <= 1 and r["reid_chance"] == pytest.approx(1 / 6)
    assert run.utility["redaction_precision"] > 0.8


def test_residual_recall_counts_repeated_mentions():
    from privnlp.attacks.pii import residual_recall

    mentions = [["Ann Lee", "Ann", "Ann", "555-0101"]]
    first_only = residual_recall(["[NAME]: [NAME] called, Ann again, 555-0101"], mentions)
    # repeated: "Ann" x2, one left -> 1/2; all mentions: "Ann" 1 + "555-0101" 1 of 4
    assert first_only["residual_repeated_recall"] == pytest.approx(0.5)
    assert first_only["residual_pii_recall"] == pytest.approx(0.5)
    assert residual_recall(["[NAME]: [NAME] called, [NAME] again, [PHONE]"], mentions) == {
        "residual_repeated_recall": 0.0,
        "residual_pii_recall": 0.0,
        "residual_token_recall": 0.0,
    }
    assert residual_recall(["x"], [["Bob"]])["residual_repeated_recall"] == 0.0  # nothing repeated
