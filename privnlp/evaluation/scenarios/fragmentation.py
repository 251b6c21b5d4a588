"""Scenario ``fragmentation.reconstruction``: a data owner releases its parallel corpus (or
phrase fragments of it) to an honest-but-curious translation company.

Paper: ``../shared/papers/phrase-pair-fragmentation-nmt.txt`` (Sec. 2 threat model, Sec. 4
setup: split by documents, max phrase length 4/7, 50% of occurrences discarded, tags).

* ``mechanism=None`` (undefended): the full training sentence pairs are released.
* otherwise ``mechanism.fragment(train, rng=...)`` produces the release.

One trial per run: the :class:`~privnlp.core.observations.FragmentSet` with the original source
sentences and the planted (drug, side effect) pairs as ground truth. Utility: coverage of the
held-out (test documents) n-grams by the released fragments, source and target side.
:func:`leakage_grid` reports the attack per (max length, discard fraction, tagging).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from privnlp.attacks.text.fragment_reconstruction import FragmentGroundTruth, FragmentReconstruction
from privnlp.core.observations import FragmentSet
from privnlp.core.protocols import Scenario, ScenarioRun, Trial
from privnlp.core.registry import SCENARIOS
from privnlp.core.rng import as_numpy, seed_of
from privnlp.data.parallel import generate_parallel
from privnlp.mechanisms.fragmentation.align import align
from privnlp.mechanisms.fragmentation.corpus import from_corpus
from privnlp.mechanisms.fragmentation.mechanism import PhraseFragmentation
from privnlp.mechanisms.fragmentation.utility import ngram_coverage

__all__ = ["FragmentationReconstruction", "leakage_grid"]

_SIZES = {"quick": 600, "full": 3000}


def _ground_truth(corpus: Any):
    return FragmentGroundTruth.from_corpus(corpus)


@SCENARIOS.register("fragmentation.reconstruction")
class FragmentationReconstruction(Scenario):
    """Toy parallel corpus -> release (full sentences or fragments) -> reconstruction trial."""

    from privnlp.mechanisms.fragmentation.mechanism import THREAT_MODEL as threat_model  # noqa: N811

    primary_utility = "ngram_coverage_mean"  # x axis of the privacy-utility sweep in the reports
    utility_higher_is_better = {
        "ngram_coverage_1": True,
        "ngram_coverage_2": True,
        "ngram_coverage_3": True,
        "ngram_coverage_4": True,
        "ngram_coverage_mean": True,
        "target_ngram_coverage_mean": True,
        "released_pairs": True,
    }

    def __init__(
        self, preset: str = "quick", n: int | None = None, test_fraction: float = 0.1
    ) -> None:
        super().__init__(preset)
        self.n = n
        self.test_fraction = test_fraction

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        g = as_numpy(rng)
        n = int(self.n or _SIZES.get(self.preset, _SIZES["quick"]))
        corpus = generate_parallel(n, seed=seed_of(g))
        _, _, train_idx, test_idx = from_corpus(corpus).split_by_document(self.test_fraction, rng=g)
        train, test = corpus.subset(train_idx), corpus.subset(test_idx)
        if mechanism is None:
            obs = FragmentSet(
                source=train.source,
                target=train.target,
                tagged=False,
                settings={"mechanism": None, "released": "full sentences"},
            )
        else:
            obs = mechanism.fragment(from_corpus(train), rng=g).to_observation()
        util = ngram_coverage(obs.source, test.source)
        util.update(ngram_coverage(obs.target, test.target, prefix="target_ngram_coverage"))
        util["released_pairs"] = float(len(obs.source))
        config = {
            "preset": self.preset,
            "n_sentences": n,
            "n_train": len(train),
            "n_test": len(test),
            "n_planted": len(train.planted),
            "settings": dict(obs.settings),
        }
        return ScenarioRun(trials=(Trial(obs, _ground_truth(train)),), utility=util, config=config)


def leakage_grid(
    n: int = 1000,
    *,
    seed: int = 0,
    max_lengths: Sequence[int] = (4, 7, 1000),
    discard_fractions: Sequence[float] = (0.0, 0.5),
    tags: Sequence[bool] = (False, True),
    aligner: str = "gold",
    min_overlap: int = 2,
    test_fraction: float = 0.1,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Reconstruction metrics + n-gram coverage per (max length, discard fraction, tagging).

    ``aligner="gold"`` uses the toy corpus' gold alignments (isolates the release settings from
    alignment noise); ``"eflomal"``/``"fast_align_py"``/``"auto"`` align first (once).
    The first row (``max_length=None``) is the undefended release of full sentences.
    """

    corpus = generate_parallel(n, seed=seed)
    _, _, tr, te = from_corpus(corpus).split_by_document(
        test_fraction, rng=np.random.default_rng(seed)
    )
    train, test = corpus.subset(tr), corpus.subset(te)
    pt = from_corpus(train)
    gt = _ground_truth(train)
    if aligner == "gold":
        alignments = train.alignments
    else:
        alignments = align(pt.source, pt.target, aligner=aligner, symmetrization="union").symmetric
    attack = FragmentReconstruction(min_overlap=min_overlap)
    rows = []
    base = attack.run(FragmentSet(source=train.source, target=train.target), rng=0).score(gt)
    rows.append(
        {
            "max_length": None,
            "discard_fraction": 0.0,
            "tag": False,
            "released": len(train),
            **base,
            **ngram_coverage(train.source, test.source),
        }
    )
    combos = [(L, d, t) for L in max_lengths for d in discard_fractions for t in tags]
    it = combos
    if progress:
        it = tqdm(combos, desc="fragmentation grid")
    for L, d, t in it:
        mech = PhraseFragmentation(max_length=L, discard_fraction=d, tag=t)
        rel = mech.fragment(pt, rng=np.random.default_rng(seed), alignments=alignments)
        sc = attack.run(rel.to_observation(), rng=0).score(gt)
        rows.append(
            {
                "max_length": L,
                "discard_fraction": d,
                "tag": t,
                "released": rel.n_released,
                **sc,
                **ngram_coverage(rel.source, test.source),
            }
        )
    return rows
