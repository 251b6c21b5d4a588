"""Slow reproductions (``make repro``): the paper's effects on the bundled corpus, and the MiniLM tagger.

Numbers are written to ``cards/attacks/pii_residual/results.json``-style dicts in the test output; the
assertions state what we measured, not the paper's claim where it does not reproduce (see
``docs/readme/55-pii-redaction.md``).
"""

from __future__ import annotations

import json
import warnings

import pytest

pytestmark = pytest.mark.slow


def test_noisy_label_effect_and_regex_baseline():
    from privnlp.mechanisms.pii.experiments import noisy_label_effect

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = noisy_label_effect(patterns=True, rng=0)
    print(
        json.dumps(
            {
                k: {m: v[m] for m in ("strict_f1", "partial_f1")}
                for k, v in res.items()
                if isinstance(v, dict)
            }
        )
    )
    # the tagger works on documents *without* known fields: far above the regex recognizers alone
    assert res["tagger"]["strict_f1"] > res["regex_only"]["strict_f1"] + 0.1
    # measured (seed 0, word dropout 0.25, 10 epochs): tagger strict F1 0.80 vs noisy labels 0.84 on held-out
    # users: the paper's Table 4 -> 5 effect does NOT reproduce with this annotator, whose misses are systematic
    # (the same kinds of mention are unlabelled in every training document); within 0.06
    assert res["tagger"]["strict_f1"] > res["noisy_labels"]["strict_f1"] - 0.06


def test_tagger_beats_labels_with_random_boundary_noise():
    """The paper's effect where its noise is (fuzzy noun-chunk matches: boundaries off at random): with half the
    labels' entities one token short or long, training and held-out alike, the tagger learns the majority
    boundary of each context. Measured (seed 0): labels strict 0.48 / partial 0.71, tagger 0.67 / 0.78."""
    from privnlp.mechanisms.pii.experiments import noisy_label_effect

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = noisy_label_effect(patterns=True, boundary_noise=0.5, rng=0)
    print(
        json.dumps(
            {
                k: {m: res[k][m] for m in ("strict_f1", "partial_f1")}
                for k in ("noisy_labels", "tagger")
            }
        )
    )
    assert res["tagger"]["strict_f1"] > res["noisy_labels"]["strict_f1"] + 0.1
    assert res["tagger"]["partial_f1"] > res["noisy_labels"]["partial_f1"]


def test_f1_grows_with_sites():
    """Figure 5 in the paper's federated/central setting: 80 training users (10 per site) divided at random among
    8 sites, the first K pooled, 12 epochs. Measured (seed 0, 3 divisions): strict F1 0.681 / 0.722 / 0.763 /
    0.777 for 1 / 2 / 4 / 8 sites (sd 0.04 / 0.01 / 0.02 / 0.01)."""
    from privnlp.mechanisms.pii.experiments import sites_curve

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = sites_curve((1, 2, 4, 8), setting="central", repeats=3, rng=0)
    print(json.dumps(rows))
    f1 = [r["strict_f1"] for r in rows]
    assert f1[-1] > f1[0] + 0.05  # 8 sites (all the data) vs 1 site (1/8 of it)
    assert all(b > a - 0.01 for a, b in zip(f1, f1[1:]))  # no step down beyond noise


def test_minilm_token_classifier_trains():
    from privnlp.mechanisms.pii.experiments import noisy_label_effect

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = noisy_label_effect(
            n_users=16,
            records_per_user=8,
            heldout_users=4,
            rounds=2,
            model="minilm",
            lr=0.05,
            batch_size=8,
            rng=0,
        )
    print(
        json.dumps(
            {
                k: {m: v[m] for m in ("strict_f1", "partial_f1")}
                for k, v in res.items()
                if isinstance(v, dict)
            }
        ),
        res["train_seconds"],
    )
    assert res["tagger"]["partial_f1"] > 0.3
