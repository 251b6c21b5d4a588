"""FL-NER Table 2 recomputed (stored values), the cross-check never raising, pre-training configuration checks."""

from __future__ import annotations

import math

import pytest

from privnlp.accounting import DPLedger, check_accounting_configuration, epsilon_for
from privnlp.accounting.reproductions import (
    FL_NER_SETTINGS,
    FL_NER_TABLE2,
    tf_privacy_legacy_epsilon,
)
from privnlp.core.errors import InvalidPrivacyParameter

Q = 32 / 14987
STEPS = 4684  # ceil(10 * 14987 / 32)

#: our values at delta = 1e-5 (docs/readme/30-private-training.md, "FL-NER Table 2"); dp_accounting 0.4.x
STORED = {
    1.0: {"prv": 0.7341796504606144, "rdp": 1.0318331155317124, "legacy": 1.3758162622153944},
    50.0: {
        "prv": 0.007879481816576675,
        "rdp": 0.007879481816576675,
        "legacy": 0.024718266547618464,
    },
}


def test_fl_ner_table2_row_sigma_1_against_stored_value():
    assert FL_NER_SETTINGS == {"n": 14987, "batch_size": 32, "epochs": 10, "delta": 1e-5}
    assert FL_NER_TABLE2[1.0] == 0.688
    est = epsilon_for([(1.0, Q, STEPS)], 1e-5, "prv")
    assert est.epsilon == pytest.approx(STORED[1.0]["prv"], rel=1e-3)
    assert epsilon_for([(1.0, Q, STEPS)], 1e-5, "rdp").epsilon == pytest.approx(
        STORED[1.0]["rdp"], rel=1e-3
    )


def test_fl_ner_table2_sigma_50_paper_value_is_the_legacy_order_floor():
    # the paper's 0.022 at sigma = 50 is TF Privacy's floor log(1/delta)/(512 - 1) = 0.0225, not the mechanism's
    legacy = tf_privacy_legacy_epsilon(50.0, Q, STEPS, 1e-5)
    assert legacy == pytest.approx(STORED[50.0]["legacy"], rel=1e-3)
    assert math.log(1e5) / 511 <= legacy < 1.1 * math.log(1e5) / 511
    ours = epsilon_for([(50.0, Q, STEPS)], 1e-5, "rdp").epsilon
    assert ours == pytest.approx(STORED[50.0]["rdp"], rel=1e-3) and ours < FL_NER_TABLE2[50.0] / 2


def test_cross_check_never_raises_and_records_the_disagreement():
    led = DPLedger()
    led.record(10.0, 1 / 64, 20)
    est = led.cross_check(1e-5, "rdp", rtol=0.0)  # old behaviour: RuntimeError (0.104 vs 0.022)
    assert est.epsilon < 0.03 and est.opacus > 3 * est.epsilon
    assert "cross_check" in est.diagnostics and est.source.startswith("dp_accounting")


def test_inconsistent_configuration_fails_before_training():
    assert check_accounting_configuration(1.0, 0.01, 100, 1e-5, "rdp") == pytest.approx(
        epsilon_for([(1.0, 0.01, 100)], 1e-5, "rdp").epsilon
    )
    assert check_accounting_configuration(1.0, 0.01, None, 1e-5) is None
    for bad in (
        dict(noise_multiplier=float("nan")),
        dict(noise_multiplier=-1.0),
        dict(sample_rate=1.5),
        dict(sample_rate=0.0),
        dict(delta=1.0),
    ):
        kw = dict(noise_multiplier=1.0, sample_rate=0.01, steps=10, delta=1e-5) | bad
        with pytest.raises(InvalidPrivacyParameter, match=next(iter(bad))):
            check_accounting_configuration(**kw)
