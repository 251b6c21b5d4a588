"""Issue #28 item 1: the word mechanisms' metric-DP claims name who sees the sanitized text."""

from __future__ import annotations

import pytest

from privnlp.core.claims import Adversary
from privnlp.mechanisms.text.mechanisms import LaplaceMetric, Mahalanobis, Vickrey


@pytest.mark.parametrize(
    "mech",
    [
        lambda: Vickrey(7.0, vocab_limit=2000),
        lambda: LaplaceMetric(7.0, vocab_limit=2000),
        lambda: Mahalanobis(7.0, vocab_limit=2000),
    ],
)
def test_metric_dp_claim_names_the_data_recipient(mech):
    m = mech()
    c = m.claim()
    assert [a.adversary for a in c.adversaries] == [Adversary.DATA_RECIPIENT.value]
    (b,) = c.adversaries
    assert b.epsilon == c.epsilon == 7.0 and b.delta == 0.0 and not b.amplified
    assert c.strongest_adversary() is b
    # the composed claim of a text keeps the per-word epsilon and states the record-level sum
    t = m.claim(n_words=9)
    assert t.adversaries[0].epsilon == 7.0 and "n <= 9 words" in t.adversaries[0].note
