"""The opacus PRV diagnostic is capped in memory (issue 28 item 3): a note, never an exception or a kill."""

import math
import time

import pytest

from privnlp.accounting import DPLedger, ledger


def test_huge_prv_diagnostic_is_skipped_with_a_note_before_allocating():
    # sigma = 1, q = 1, 10k steps: opacus would discretise on 3.7e8 points (~10 GiB) and can be OOM-killed
    rt = ((1.0, 1.0, 10000),)
    assert ledger._prv_domain_points(rt, 1e-5) > 50 * ledger.PRV_DIAGNOSTIC_MAX_POINTS
    t0 = time.perf_counter()
    with pytest.raises(ledger.DiagnosticSkipped, match="points"):
        ledger._eps_opacus(rt, 1e-5, "prv")
    assert time.perf_counter() - t0 < 5.0  # decided before any allocation


def test_skipped_diagnostic_is_a_note_and_the_reported_epsilon_is_unchanged(monkeypatch):
    led = DPLedger()
    led.record(1.0, 0.02, 50)
    full = led.cross_check(1e-5)
    assert not math.isnan(full.opacus)
    ledger._eps_opacus.cache_clear()
    monkeypatch.setattr(ledger, "PRV_DIAGNOSTIC_MAX_POINTS", 10)
    capped = led.cross_check(1e-5)
    ledger._eps_opacus.cache_clear()
    assert capped.epsilon == full.epsilon
    assert math.isnan(capped.opacus) and capped.relative_gap == 0.0
    assert "skipped" in capped.diagnostics["opacus.prv.skipped"]
