"""Scenario ``text.perturbation``: words of the bundled corpus released through a metric-DP word
perturbation mechanism (or unperturbed for ``mechanism=None``).

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` Section 4 (Product Reviews setup):
words are drawn from the sentiment lexicon of the bundled corpus with the corpus's empirical
word distribution (the informative adversary's prior); each trial's observation is a
:class:`~privnlp.core.observations.PerturbedText` of released words (the mechanism and the prior
are public, in ``meta["prior"]``); the ground truth is the original words. Utility: fraction of
words released unchanged and the sentiment-flip rate (the paper's ``d_L``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.observations import PerturbedText
from privnlp.core.protocols import Scenario, ScenarioRun, Trial
from privnlp.core.registry import SCENARIOS
from privnlp.core.rng import as_numpy

__all__ = ["TextPerturbationScenario"]

PRESETS = {"quick": dict(n_words=400, n_trials=4), "full": dict(n_words=4000, n_trials=10)}


@SCENARIOS.register("text.perturbation")
class TextPerturbationScenario(Scenario):
    """Sentiment-lexicon words (empirical prior of the bundled corpus) released word by word."""

    threat_model = ThreatModel(
        adversary=Adversary.DATA_RECIPIENT,
        observes=("the released (perturbed) words",),
        knows=("the mechanism and its parameters", "the public embeddings", "the word prior of the corpus"),
        goal="recover each original word",
    )
    utility_higher_is_better = {"fraction_unchanged": True, "sentiment_flip_rate": False}
    primary_utility = "fraction_unchanged"   # x axis of the privacy-utility sweep in the reports

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        from privnlp.data.sentiment import LEXICON
        from privnlp.mechanisms.text import bundled_embeddings

        g = as_numpy(rng)
        cfg = PRESETS.get(self.preset, PRESETS["quick"])
        emb = mechanism.resolve_embeddings() if mechanism is not None else bundled_embeddings()
        base = bundled_embeddings()
        lex = [w for w in list(LEXICON["positive"]) + list(LEXICON["negative"]) if w in emb and w in base]
        counts = np.array([base.counts[base.id_of(w)] if base.counts is not None else 1.0 for w in lex])
        prior = counts / counts.sum()
        words = [lex[i] for i in g.choice(len(lex), size=cfg["n_words"], p=prior)]
        released = list(words) if mechanism is None else mechanism.perturb_words(words, rng=g)
        pos, neg = set(LEXICON["positive"]), set(LEXICON["negative"])

        def pol(w: str) -> int:
            return 1 if w in pos else (-1 if w in neg else 0)
        unchanged = float(np.mean([a == b for a, b in zip(words, released)]))
        flips = float(np.mean([pol(a) != pol(b) for a, b in zip(words, released)]))
        meta = {"prior": dict(zip(lex, prior.tolist())), "unit": "word"}
        trials = []
        for chunk in np.array_split(np.arange(len(words)), cfg["n_trials"]):
            obs = PerturbedText(texts=tuple(released[i] for i in chunk), mechanism=mechanism, vocabulary=emb, meta=meta)
            trials.append(Trial(observation=obs, ground_truth=tuple(words[i] for i in chunk)))
        return ScenarioRun(trials=tuple(trials),
                           utility={"fraction_unchanged": unchanged, "sentiment_flip_rate": flips},
                           config={"preset": self.preset, "n_words": cfg["n_words"], "vocabulary": len(emb),
                                   "support": len(lex), "words": "sentiment lexicon, empirical prior"})
