"""pii_redaction vs its leaky twin vs no redaction on the pii.redaction scenario (regex-only redactor: fast)."""
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
    return {k: float(np.mean([s[k] for s in scores])) for k in scores[0]}, run


def test_registered_and_twin_caught():
    real_cls, twin_cls = MECHANISMS.get("pii_redaction"), LEAKY_TWINS.get("pii_redaction")
    assert issubclass(twin_cls, real_cls)
    real, twin = real_cls(rounds=0), twin_cls(rounds=0)  # regex recognizers only (no tagger training here)
    assert real.claim().kind.value == "heuristic" and twin.claim() == real.claim()
    none, _ = _residual(None)
    r, run = _residual(real)
    t, _ = _residual(twin)
    assert none["residual_pii_recall"] == pytest.approx(1.0)
    assert r["residual_pii_recall"] < none["residual_pii_recall"] - 0.1
    assert t["residual_pii_recall"] > r["residual_pii_recall"] + 0.03  # repeated mentions survive in the twin
    assert 0 <= r["reid_accuracy"] <= 1 and r["reid_chance"] == pytest.approx(1 / 6)
    assert run.utility["redaction_precision"] > 0.8
