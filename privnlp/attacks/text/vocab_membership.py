"""Vocabulary-membership attack on a released (DP) WordPiece vocabulary.

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` Section 3.2 (a WordPiece vocabulary "can
leak private information by memorizing certain WordPieces in the training data").

Threat model: a data recipient holds the released tokenizer (and, when published, the released
noisy histogram) and a list of candidate private words (canaries: a unique surname, an ID). It
declares a candidate *present* in the private corpus when the candidate is a whole-word token of
the vocabulary (a non-``##`` piece equal to the word) or a key of the released histogram. Scored
against which candidates were really planted (and in how many documents):

* ``inclusion_rate`` (headline, higher = more leakage): fraction of planted canaries revealed;
* ``false_positive_rate``: fraction of never-planted decoys revealed;
* ``advantage``: inclusion_rate - false_positive_rate;
* ``inclusion_rate@n=<n>``: per number of documents the canary was planted in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument
from privnlp.core.observations import ReleasedVocabulary
from privnlp.core.protocols import Attack, AttackResult
from privnlp.core.registry import ATTACKS

__all__ = ["VocabMembership", "score_vocab_membership"]


def score_vocab_membership(
    result: AttackResult, ground_truth: Mapping[str, int]
) -> dict[str, float]:
    """``ground_truth``: candidate word -> number of documents it was planted in (0 = decoy).

    Args:
        result: the attack's result (the flagged words as reconstructions).
        ground_truth: candidate word -> number of documents it was planted in (0 = decoy).

    Returns:
        ``inclusion_rate`` (planted words flagged), ``false_positive_rate`` (decoys flagged), ``advantage``
        (their difference) and ``inclusion_rate@n=N`` per planting count.
    """
    flagged = set(result.reconstructions)
    planted = [w for w, n in ground_truth.items() if n > 0]
    decoys = [w for w, n in ground_truth.items() if n <= 0]
    tpr = sum(w in flagged for w in planted) / len(planted) if planted else 0.0
    fpr = sum(w in flagged for w in decoys) / len(decoys) if decoys else 0.0
    out = {"inclusion_rate": tpr, "false_positive_rate": fpr, "advantage": tpr - fpr}
    for n in sorted({n for n in ground_truth.values() if n > 0}):
        ws = [w for w, m in ground_truth.items() if m == n]
        out[f"inclusion_rate@n={n}"] = sum(w in flagged for w in ws) / len(ws)
    return out


@ATTACKS.register("vocab_membership")
class VocabMembership(Attack):
    """Flag candidate words that appear whole in the released vocabulary or histogram.

    Args:
        candidates: the words to test; ``None`` = ``observation.meta["candidates"]``.
        use_histogram: also look at the released histogram's keys when the observation has one.
        lowercase: compare lowercased (BERT uncased vocabularies).
    """

    paper = "dp-bert-and-dp-wordpiece.txt (Section 3.2): WordPiece vocabularies memorize rare words"
    observation_type = ReleasedVocabulary
    threat_model = ThreatModel(
        adversary=Adversary.DATA_RECIPIENT,
        observes=("released vocabulary", "released noisy histogram (if published)"),
        knows=("candidate private words",),
        goal="decide which candidate words occur in the private corpus",
    )
    headline_metric = "inclusion_rate"

    def __init__(
        self,
        candidates: Sequence[str] | None = None,
        use_histogram: bool = True,
        lowercase: bool = True,
    ) -> None:
        self.candidates = candidates
        self.use_histogram = use_histogram
        self.lowercase = lowercase

    def run(self, observation: ReleasedVocabulary, *, rng: Any = None) -> AttackResult:
        if not isinstance(observation, ReleasedVocabulary):
            raise InvalidArgument(
                f"observation must be a ReleasedVocabulary; got {type(observation).__name__}"
            )
        cands = (
            self.candidates if self.candidates is not None else observation.meta.get("candidates")
        )
        if not cands:
            raise InvalidArgument(
                "candidates: give candidate words (or observation.meta['candidates'])"
            )
        norm = (lambda s: s.lower()) if self.lowercase else (lambda s: s)
        whole = {norm(t) for t in observation.tokens if not t.startswith("##")}
        hist = set()
        if self.use_histogram and observation.histogram is not None:
            hist = {norm(w) for w in observation.histogram}
        in_vocab = {c: norm(c) in whole for c in cands}
        in_hist = {c: norm(c) in hist for c in cands}
        flagged = tuple(c for c in cands if in_vocab[c] or in_hist[c])
        return AttackResult(
            self.name or "vocab_membership",
            reconstructions=flagged,
            raw={"in_vocab": in_vocab, "in_histogram": in_hist},
            scorer=score_vocab_membership,
        )
