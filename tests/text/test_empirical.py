"""Bayesian adversary, empirical privacy-utility trend and Algorithm 2 on the bundled corpus
(paper: vickrey-mechanism-metric-dp.txt, Section 3 and Figure 2)."""

from __future__ import annotations

import numpy as np
import pytest

from privnlp.attacks.text.bayesian import (
    BayesianInversion,
    estimate_channel,
    estimate_channels_vickrey,
    expected_inference_error,
    expected_utility_loss,
    privacy_stats,
    sentiment_flip_loss,
)
from privnlp.core.observations import PerturbedText
from privnlp.data.sentiment import LEXICON
from privnlp.mechanisms.text import Vickrey
from privnlp.mechanisms.text.tuning import select_parameters

TS = (0.0, 0.25, 0.5, 0.75)


@pytest.fixture(scope="module")
def curves(lexicon_emb):
    emb = lexicon_emb
    prior = emb.counts / emb.counts.sum()
    dl = sentiment_flip_loss(emb.words, LEXICON)
    eps_grid = np.geomspace(5, 200, 12)
    E = np.zeros((len(TS), len(eps_grid)))
    L = np.zeros_like(E)
    for k, eps in enumerate(eps_grid):
        for j, ch in enumerate(
            estimate_channels_vickrey(emb, eps, TS, np.arange(len(emb)), 200, rng=k)
        ):
            E[j, k] = expected_inference_error(ch, prior)
            L[j, k] = expected_utility_loss(ch, dl, prior)
    return eps_grid, E, L


def test_vickrey_beats_laplace_at_same_epsilon(curves):
    eps, E, L = curves
    mid = (E[0] > 0.05) & (E[0] < 0.95)  # where the adversary is neither blind nor perfect
    assert mid.sum() >= 3
    for j in (1, 2, 3):
        assert np.all(E[j, mid] > E[0, mid] + 0.005), (TS[j], E[j, mid], E[0, mid])
        assert np.mean(E[j, mid] - E[0, mid]) > 0.05
    # ordering in t (t = 0.25 < 0.5 < 0.75) as in Figure 2(A)
    assert np.all(np.diff(E[:, mid], axis=0) > 0)


def test_vickrey_beats_laplace_at_equal_utility_loss(curves):
    eps, E, L = curves
    for lvl in (0.01, 0.02, 0.05):
        e = []
        for j in range(len(TS)):
            o = np.argsort(L[j])
            assert L[j].min() < lvl < L[j].max()
            e.append(np.interp(lvl, L[j][o], E[j][o]))
        assert all(e[j] > e[0] + 0.02 for j in (1, 2, 3)), (lvl, e)


def test_channel_stats_and_limits(lexicon_emb):
    sup = np.arange(len(lexicon_emb))
    ch = estimate_channel(Vickrey(1e5, t=0.0, embeddings=lexicon_emb), sup, 50, rng=0)
    assert expected_inference_error(ch) < 1e-9  # no noise: Laplace returns the word itself
    st = privacy_stats(ch)
    assert np.allclose(st["N_w"], 1.0) and np.allclose(st["S_w_effective"], 1.0)
    ch = estimate_channel(Vickrey(1e-3, t=0.5, embeddings=lexicon_emb), sup, 200, rng=0)
    assert expected_inference_error(ch) > 0.9
    D = lexicon_emb.pairwise_distances()
    assert expected_inference_error(ch, distances=D) > 0.5


def test_attack_succeeds_undefended_fails_on_strong_defense(lexicon_emb):
    words = [
        lexicon_emb.words[i] for i in np.random.default_rng(0).integers(0, len(lexicon_emb), 300)
    ]
    att = BayesianInversion(n_samples=200, prior="uniform")
    weak = Vickrey(1e4, t=0.0, embeddings=lexicon_emb)
    obs = PerturbedText(texts=tuple(weak.perturb_words(words, rng=1)), mechanism=weak)
    s_weak = att.run(obs, rng=2).score(words)
    assert s_weak["inference_accuracy"] > 0.95 and s_weak["observed_map_accuracy"] > 0.95
    base = att.run(PerturbedText(texts=tuple(words), mechanism=None), rng=0).score(words)
    assert base["inference_accuracy"] == 1.0
    strong = Vickrey(2.0, t=0.5, embeddings=lexicon_emb)
    obs = PerturbedText(texts=tuple(strong.perturb_words(words, rng=1)), mechanism=strong)
    s = att.run(obs, rng=2).score(words)
    assert s["inference_accuracy"] < 0.1 and s["observed_map_accuracy"] < 0.15


def test_algorithm2_selects_feasible_vickrey(lexicon_emb):
    emb = lexicon_emb
    prior = emb.counts / emb.counts.sum()
    dl = sentiment_flip_loss(emb.words, LEXICON)
    res = select_parameters(
        emb, loss=dl, max_loss=0.05, prior=prior, epsilon0=1.0, n_samples=150, rng=0
    )
    assert res.utility_loss <= 0.05 and res.t > 0
    lap = [p for p in res.points if p.t == 0.0 and p.epsilon == res.epsilon][0]
    assert res.inference_error > lap.inference_error
    assert res.epsilon in {2.0**k for k in range(12)}


def test_registry_and_scenario():
    import privnlp.attacks as A
    import privnlp.mechanisms as M
    from privnlp.evaluation.scenarios import get

    for n in ("vickrey", "vickrey_k", "laplace_metric", "mahalanobis"):
        cls = M.get(n)
        assert (
            cls.paired_attacks == ("bayesian_inversion",) and cls.scenario == "text.licenses"
        )  # real text (issue #16)
        assert cls.example("quick").claim().kind.value == "metric_dp"
    assert A.get("bayesian_inversion").headline_metric == "inference_accuracy"
    run = get("text.perturbation")().run(None, rng=0)
    assert run.utility["fraction_unchanged"] == 1.0 and len(run.trials) >= 2
    run = get("text.perturbation")().run(M.get("vickrey")(20.0, t=0.5, vocab_limit=20_000), rng=0)
    assert run.utility["fraction_unchanged"] < 1.0
