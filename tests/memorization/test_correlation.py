"""ECorr / WCorr statistics, rank combination and NaN / tie handling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privnlp.attacks.memorization import combined_rank, ecorr, rank_desc, spearman, wcorr
from privnlp.attacks.memorization.correlation import _topk_metrics


def test_spearman_constant_is_nan():
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(spearman([1, 2, 3], [5, 5, 5]))
    assert spearman([1, 2, 3], [10, 20, 35]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_rank_desc_nan_last_and_ties_average():
    r = rank_desc([0.5, float("nan"), 0.9, 0.5])
    assert list(r) == [2.5, 4.0, 1.0, 2.5]


def test_combined_rank_matches_equation_10():
    corr = np.array([0.9, 0.1, float("nan"), 0.5])
    final = np.array([-2.0, -1.0, -0.5, -3.0])
    r, order = combined_rank(corr, final)
    # rank(corr): 1, 3, 4, 2 ; rank(final): 3, 2, 1, 4
    assert list(r) == [4.0, 5.0, 5.0, 6.0]
    assert list(order) == [0, 2, 1, 3]  # the tie 5.0 is broken by the higher final exposure


def test_ecorr_picks_the_selected_clients_record():
    g = np.random.default_rng(0)
    t = 30
    s = np.where(g.random(t) < 0.5, 1.0, -1.0)
    s[:2] = [1.0, -1.0]
    victim = np.cumsum(np.concatenate([[0.0], 0.3 * s + g.normal(0, 0.05, t)]))
    other = np.cumsum(np.concatenate([[0.0], g.normal(0, 0.3, t)]))
    const = np.zeros(t + 1)
    traj = np.stack([victim, other, const], axis=1)
    c = ecorr(traj, s)
    assert c[0] > 0.8 and abs(c[1]) < 0.6 and math.isnan(c[2])
    w = wcorr(traj, victim + g.normal(0, 0.01, t + 1))
    assert w[0] > 0.8 and math.isnan(w[2])


def test_topk_metrics():
    m = _topk_metrics(["a-1", "a-2", "a-3"], "a-2", "a-")
    assert m["top1_accuracy"] == 0.0 and m["top5_accuracy"] == 1.0
    assert m["top1_edit_distance"] == 1.0 and m["top5_edit_distance"] == 0.0
