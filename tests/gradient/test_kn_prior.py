"""The Kneser-Ney bigram prior of LAMP's realistic preset (``LAMP(prior="kn-bigram")``)."""

from __future__ import annotations

import numpy as np
import pytest

from privnlp.attacks.gradient.lamp import LAMP, KneserNeyBigram, _lm_nll
from privnlp.core.errors import InvalidArgument

ROWS = [[1, 2, 3, 4], [1, 2, 5], [2, 3, 4, 1], [6, 2, 3]]


def test_conditionals_are_distributions():
    """Sum_w P(w|v) = 1 for a seen context, an unseen context and every token in between (tolerance 1e-9)."""
    lm = KneserNeyBigram(ROWS, vocab_size=9, discount=0.75)
    w = np.arange(9)
    for v in range(9):  # 0, 7, 8 never occur as a left context
        assert abs(np.exp(lm.log_prob(np.full(9, v), w)).sum() - 1.0) < 1e-9
    assert np.all(
        np.isfinite(lm.log_prob(np.zeros(9, int), w))
    )  # unseen tokens keep probability > 0


def test_kneser_ney_numbers():
    """P(3|2): c(2,3) = 3, c(2) = 4, N1+(2 .) = 2 (3, 5): (3 - .75)/4 + .75*2/4 * P_cont(3)."""
    lm = KneserNeyBigram(ROWS, vocab_size=9, discount=0.75)
    distinct = {
        (a, b) for r in ROWS for a, b in zip(r[:-1], r[1:])
    }  # 7 distinct bigrams; 3 follows only 2
    p_cont = (sum(1 for _, b in distinct if b == 3) + 0.5) / (len(distinct) + 0.5 * 9)
    assert (
        abs(
            np.exp(lm.log_prob(np.array([2]), np.array([3])))[0]
            - ((3 - 0.75) / 4 + 0.75 * 2 / 4 * p_cont)
        )
        < 1e-12
    )


def test_prefers_the_seen_order():
    lm = KneserNeyBigram(ROWS * 5, vocab_size=9)
    assert _lm_nll(lm, [[1, 2, 3, 4]])[0] < _lm_nll(lm, [[4, 3, 2, 1]])[0]
    assert _lm_nll(lm, [[5]])[0] == 0.0  # nothing to score


def test_bad_prior_arguments():
    with pytest.raises(InvalidArgument, match="prior"):
        LAMP(prior="bigram")
    with pytest.raises(InvalidArgument, match="discount"):
        KneserNeyBigram(ROWS, vocab_size=9, discount=1.0)
    with pytest.raises(InvalidArgument, match="bigram"):
        KneserNeyBigram([[1]], vocab_size=9)
