"""The reconstruction attack succeeds undefended, degrades under the paper's settings, catches the leaky twin."""

from __future__ import annotations

import numpy as np
import pytest

import privnlp.attacks
import privnlp.mechanisms
from privnlp.attacks.text.fragment_reconstruction import (
    FragmentGroundTruth,
    FragmentReconstruction,
    assemble,
    release_order_contigs,
)
from privnlp.core.claims import ClaimKind
from privnlp.core.observations import FragmentSet
from privnlp.core.registry import LEAKY_TWINS, SCENARIOS
from privnlp.mechanisms.fragmentation import LeakyPhraseFragmentation, PhraseFragmentation


@pytest.fixture(scope="session")
def scores(toy, toy_text):
    gt = FragmentGroundTruth.from_corpus(toy)
    attack = FragmentReconstruction()
    out = {"full": attack.run(FragmentSet(source=toy.source, target=toy.target), rng=0).score(gt)}
    for L, d, tag in [
        (1000, 0.0, False),
        (7, 0.0, False),
        (7, 0.5, True),
        (4, 0.5, False),
        (4, 0.5, True),
    ]:
        rel = PhraseFragmentation(L, d, tag=tag).fragment(
            toy_text, rng=np.random.default_rng(0), alignments=toy.alignments
        )
        out[(L, d, tag)] = attack.run(rel.to_observation(), rng=0).score(gt)
    rel = LeakyPhraseFragmentation(7, 0.5, tag=True).fragment(
        toy_text, rng=np.random.default_rng(0), alignments=toy.alignments
    )
    out["leaky"] = attack.run(rel.to_observation(), rng=0).score(gt)
    for k, v in out.items():
        print(k, {m: round(x, 3) for m, x in v.items()})
    return out


def test_assemble_toy():
    frags = ["<P> the red car </P>", "red car is", "car is fast .", "a b c"]
    assert ("the", "red", "car", "is", "fast", ".") in assemble(frags)
    # ambiguous continuation: no merge
    assert sorted(assemble(["x a b", "a b y", "a b z"])) == [
        ("a", "b", "y"),
        ("a", "b", "z"),
        ("x", "a", "b"),
    ]


def test_full_reconstruction_without_defense(scores):
    for key in ("full", (1000, 0.0, False)):
        assert scores[key]["full_reconstruction_rate"] == 1.0
        assert scores[key]["sensitive_link_rate"] == 1.0
        assert scores[key]["rougeL_mean"] == 1.0


def test_degrades_with_paper_settings(scores):
    fr = lambda k: scores[k]["full_reconstruction_rate"]  # noqa: E731
    ls = lambda k: scores[k]["longest_span_mean"]  # noqa: E731
    assert fr((7, 0.0, False)) < 0.5 and fr((7, 0.5, True)) < fr((7, 0.0, False))
    assert fr((4, 0.5, False)) <= 0.05 and fr((4, 0.5, True)) <= 0.05
    assert ls((1000, 0.0, False)) > ls((7, 0.0, False)) > ls((7, 0.5, True)) > ls((4, 0.5, True))
    # planted drug/side effect pairs (4-8 words apart) are never released together at max length 4
    assert scores[(4, 0.5, False)]["sensitive_link_rate"] == 0.0


def test_leaky_twin_is_caught(scores):
    h = FragmentReconstruction.headline_metric
    assert LEAKY_TWINS.get("phrase_fragmentation") is LeakyPhraseFragmentation
    assert scores["leaky"][h] > scores[(7, 0.5, True)][h] + 0.05


def test_release_order_is_exploited_only_when_there_is_one():
    """A release in extraction order (the twin forgets to shuffle) gives the sentences back; the same
    fragments shuffled carry no order (nothing is read off them)."""
    frags = [
        "child",
        "a child took it",
        "it",
        "in",
        "in the",
        "in the morning",
        "morning .",
        ".",
        "the",
        "the man",
        "man took",
        "took x",
        "x .",
        ".",
    ]
    assert release_order_contigs(frags) == [
        ("a", "child", "took", "it", "in", "the", "morning", "."),
        ("the", "man", "took", "x", "."),
    ]
    g = np.random.default_rng(0)
    words = [f"w{i}" for i in range(300)]
    shuffled = [" ".join(words[i : i + 3]) for i in g.permutation(297)]
    assert release_order_contigs(shuffled) == []


def test_registry_and_scenario():
    mech_cls = privnlp.mechanisms.get("phrase_fragmentation")
    att_cls = privnlp.attacks.get("fragment_reconstruction")
    assert (
        mech_cls.paired_attacks == ("fragment_reconstruction",)
        and mech_cls.scenario == "fragmentation.reconstruction"
    )
    assert (
        att_cls.observation_type is FragmentSet
        and att_cls.headline_metric == "full_reconstruction_rate"
    )
    mech = mech_cls.example("quick")
    assert mech.claim().kind == ClaimKind.HEURISTIC and mech.threat_models
    sc = SCENARIOS.get("fragmentation.reconstruction")("quick", n=300)
    base = sc.run(None, rng=np.random.default_rng(0))
    dfd = sc.run(mech, rng=np.random.default_rng(0))
    sb = att_cls().run(base.trials[0].observation, rng=0).score(base.trials[0].ground_truth)
    sd = att_cls().run(dfd.trials[0].observation, rng=0).score(dfd.trials[0].ground_truth)
    assert sb["full_reconstruction_rate"] == 1.0 and sd["full_reconstruction_rate"] < 0.1
    assert base.utility["ngram_coverage_4"] > dfd.utility["ngram_coverage_4"]
    assert 0.0 < dfd.utility["ngram_coverage_mean"] <= 1.0
