"""Scenario ``vocab.membership``: canary words planted in n documents, a vocabulary released.

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` Section 3.2 (DP WordPiece).

A synthetic corpus (Zipfian pseudo-words, deterministic per seed) gets canary words (random
letter strings, like a rare surname or an ID) planted once in ``n`` documents each, for several
``n``; as many decoy canaries are never planted. The mechanism (``None`` = the non-private
WordPiece on raw occurrence counts) builds a vocabulary; the trial's observation is the
:class:`~privnlp.core.observations.ReleasedVocabulary` (tokens + the released histogram for DP
builds) with the candidates in ``meta``; the ground truth maps each candidate to its ``n``.
Utility (held-out documents): fertility, UNK rate, vocabulary overlap with the non-private build.

:func:`inclusion_sweep` + :func:`plot_inclusion` draw inclusion rate vs n, non-private vs DP at
several epsilons.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privnlp.attacks.text.vocab_membership import VocabMembership
from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.observations import ReleasedVocabulary
from privnlp.core.protocols import Scenario, ScenarioRun, Trial
from privnlp.core.registry import SCENARIOS
from privnlp.core.rng import as_numpy
from privnlp.mechanisms.vocab import DPWordPiece, build_nonprivate_wordpiece, tokenizer_utility

__all__ = [
    "VocabMembershipScenario",
    "synthetic_corpus",
    "plant_canaries",
    "inclusion_sweep",
    "plot_inclusion",
]

_SYLL = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ta",
    "ri",
    "so",
    "pe",
    "du",
    "ba",
    "ge",
    "fo",
    "ha",
    "li",
    "mu",
    "no",
    "ra",
    "se",
    "ti",
    "vo",
    "wa",
    "ye",
    "ze",
    "an",
    "el",
    "in",
    "or",
    "us",
]
_CANARY_LETTERS = "bcdfghjklmnpqrstvwxz"

PRESETS = {
    "quick": dict(
        n_docs=1500,
        n_heldout=200,
        doc_len=(10, 18),
        lexicon=1500,
        ns=(1, 4, 16, 64, 128),
        per_n=4,
        vocab_size=600,
    ),
    "full": dict(
        n_docs=6000,
        n_heldout=500,
        doc_len=(12, 24),
        lexicon=4000,
        ns=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        per_n=10,
        vocab_size=2000,
    ),
}


def synthetic_corpus(
    n_docs: int, *, lexicon: int = 1500, doc_len: tuple[int, int] = (10, 18), rng: Any
) -> list[list[str]]:
    """Documents as word lists over a Zipfian lexicon of pseudo-words (deterministic per rng)."""
    g = as_numpy(rng)
    lex = sorted(
        {"".join(g.choice(_SYLL, size=int(g.integers(1, 4)))) for _ in range(lexicon * 2)}
    )[:lexicon]
    g.shuffle(lex)
    p = 1.0 / np.arange(1, len(lex) + 1) ** 1.07
    p /= p.sum()
    return [
        list(g.choice(lex, size=int(g.integers(doc_len[0], doc_len[1] + 1)), p=p))
        for _ in range(n_docs)
    ]


def plant_canaries(
    docs: list[list[str]], ns: Sequence[int], per_n: int, *, rng: Any
) -> dict[str, int]:
    """Plant ``per_n`` fresh canaries in ``n`` random documents each (in place), plus ``per_n * len(ns)``
    decoys that are never planted. Returns candidate -> n (0 for decoys)."""
    g = as_numpy(rng)
    truth: dict[str, int] = {}
    total = per_n * len(ns) * 2
    while len(truth) < total:
        w = "".join(g.choice(list(_CANARY_LETTERS), size=9))
        truth.setdefault(w, -1)
    words = list(truth)
    i = 0
    for n in ns:
        for _ in range(per_n):
            w = words[i]
            i += 1
            truth[w] = int(n)
            for d in g.choice(len(docs), size=min(int(n), len(docs)), replace=False):
                docs[d].insert(int(g.integers(0, len(docs[d]) + 1)), w)
    for w in words[i:]:
        truth[w] = 0
    return truth


@SCENARIOS.register("vocab.membership")
class VocabMembershipScenario(Scenario):
    """Planted canary words vs a released WordPiece vocabulary (see the module docstring)."""

    threat_model = ThreatModel(
        adversary=Adversary.DATA_RECIPIENT,
        observes=("released WordPiece vocabulary", "released noisy histogram"),
        knows=("candidate canary words",),
        goal="vocabulary membership of canaries",
    )
    utility_higher_is_better = {"fertility": False, "unk_rate": False, "vocab_overlap": True}
    primary_utility = "vocab_overlap"  # x axis of the privacy-utility sweep in the reports

    def __init__(self, preset: str = "quick", **overrides: Any) -> None:
        super().__init__(preset)
        self.overrides = overrides

    def config(self) -> dict[str, Any]:
        cfg = dict(PRESETS.get(self.preset, PRESETS["quick"]))
        cfg.update(self.overrides)
        return cfg

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        cfg = self.config()
        g = as_numpy(rng)
        g_corpus, g_plant, g_mech = (
            (np.random.default_rng(s) for s in g.bit_generator.seed_seq.spawn(3))
            if hasattr(g.bit_generator, "seed_seq")
            else (g, g, g)
        )
        docs = synthetic_corpus(
            cfg["n_docs"] + cfg["n_heldout"],
            lexicon=cfg["lexicon"],
            doc_len=tuple(cfg["doc_len"]),
            rng=g_corpus,
        )
        train, held = docs[: cfg["n_docs"]], docs[cfg["n_docs"] :]
        truth = plant_canaries(train, cfg["ns"], cfg["per_n"], rng=g_plant)
        texts = [" ".join(d) for d in train]
        held_texts = [" ".join(d) for d in held]
        ref = build_nonprivate_wordpiece(texts, cfg["vocab_size"])
        if mechanism is None:
            build, hist = ref, None
        else:
            build = mechanism.build(texts, rng=g_mech)
            hist = dict(build.histogram.counts)
        obs = ReleasedVocabulary(
            tokens=tuple(build.vocab),
            tokenizer=build.tokenizer,
            histogram=hist,
            meta={"candidates": sorted(truth)},
        )
        util = tokenizer_utility(build.tokenizer, held_texts, ref.tokenizer)
        return ScenarioRun(
            trials=(Trial(obs, dict(truth)),),
            utility=util,
            config={**cfg, "mechanism": None if mechanism is None else mechanism.params()},
        )


def inclusion_sweep(
    epsilons: Sequence[float] = (1.0, 4.0, 16.0),
    *,
    seeds: Sequence[int] = (0,),
    preset: str = "quick",
    mechanism_kwargs: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> dict[str, dict[int, float]]:
    """Inclusion rate vs n for the non-private build and ``dp_wordpiece`` at each epsilon (mean
    over ``seeds``). Returns ``{label: {n: rate}}``."""

    sc = VocabMembershipScenario(preset, **overrides)
    cfg = sc.config()
    base = dict(DPWordPiece.example(preset).params())
    base.update(vocab_size=cfg["vocab_size"])
    base.update(mechanism_kwargs or {})
    configs: list[tuple[str, Any]] = [("non-private", None)]
    for e in epsilons:
        configs.append((f"DP eps={e:g}", DPWordPiece(**{**base, "epsilon": float(e)})))
    out: dict[str, dict[int, float]] = {}
    for label, mech in configs:
        acc: dict[int, list[float]] = {}
        for s in seeds:
            run = sc.run(mech, rng=s)
            for t in run.trials:
                sc_ = VocabMembership().run(t.observation).score(t.ground_truth)
                for n in cfg["ns"]:
                    acc.setdefault(int(n), []).append(sc_[f"inclusion_rate@n={n}"])
        out[label] = {n: float(np.mean(v)) for n, v in acc.items()}
    return out


def plot_inclusion(
    sweep: Mapping[str, Mapping[int, float]],
    path: str | os.PathLike,
    title: str = "Canary inclusion in the released vocabulary",
) -> Path:
    """Plot inclusion rate vs n (log x) for every curve of :func:`inclusion_sweep`; save a PNG
    (atomically) and return its path."""
    import matplotlib  # deferred: matplotlib: the plot only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, curve in sweep.items():
        ns = sorted(curve)
        ax.plot(ns, [curve[n] for n in ns], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("documents containing the canary (n)")
    ax.set_ylabel("inclusion rate")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return path
