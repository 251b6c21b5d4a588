"""``pii_residual``: what a recipient of redacted documents still learns.

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` (a PII tagger trained on noisy labels
misses part of the PII; §6: "it is difficult to achieve a fully reliable NER model for a sensitive task
such as PII extraction"). Two measurements on held-out records whose PII the redactor never saw:

* residual PII recall: the fraction of gold PII mentions (and of their word tokens) still readable
  verbatim in the redacted text (the redactor's miss rate, a lower bound on what a reader sees);
* repeated-mention residual recall (the headline): the same, per mention, over the entities a document
  names more than once (the same string k >= 2 times) — a reader who finds one surviving copy can
  cross-reference it with the rest of the document, and a redactor that stops at the first hit of each
  entity leaves k-1 of the k copies;
* re-identification: each redacted document is linked to its author by TF-IDF nearest neighbour
  (word uni+bigrams, scikit-learn) against the users' other documents, which the adversary holds as
  background knowledge; accuracy is reported next to chance (1 / number of candidate users).

Threat model: a data recipient of the redacted documents with background documents of the same users.
Headline: ``residual_repeated_recall`` (higher = more leakage); ``residual_pii_recall`` over all mentions is
reported next to it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument
from privnlp.core.observations import PerturbedText
from privnlp.core.protocols import Attack, AttackResult
from privnlp.core.registry import ATTACKS

__all__ = [
    "ResidualPII",
    "residual_recall",
    "reidentify",
    "estimate_residual",
    "ResidualEstimate",
    "RESIDUAL_THREAT",
]

RESIDUAL_THREAT = ThreatModel(
    adversary=Adversary.DATA_RECIPIENT,
    observes=("the redacted documents",),
    knows=("other (unredacted) documents of the candidate users",),
    goal="read PII left in the redacted text; link each redacted document to its author",
)


def residual_recall(redacted: Sequence[str], mentions: Sequence[Sequence[str]]) -> dict[str, float]:
    """Fraction of gold mentions (and of their word tokens of >= 3 characters) still in the redacted texts.

    A mention string occurring k times in the original counts min(k, occurrences in the redacted text).
    ``residual_repeated_recall``: the same over the mention strings a document holds k >= 2 times (0 when no
    document repeats a mention).

    Args:
        redacted: the redacted documents.
        mentions: per document, its gold PII mention strings (repeated once per occurrence).

    Returns:
        ``residual_pii_recall``, ``residual_repeated_recall`` and ``residual_token_recall``, each in [0, 1].

    Raises:
        InvalidArgument: ``redacted`` and ``mentions`` of different lengths.
    """
    if len(redacted) != len(mentions):
        raise InvalidArgument(
            f"redacted and mentions must have the same length; got {len(redacted)}, {len(mentions)}"
        )
    n = left = 0
    nr = left_r = 0
    nt = left_t = 0
    for text, ms in zip(redacted, mentions):
        need: dict[str, int] = {}
        for m in ms:
            need[m] = need.get(m, 0) + 1
        for m, k in need.items():
            found = len(re.findall(r"(?<!\w)" + re.escape(m) + r"(?!\w)", text))
            n += k
            left += min(k, found)
            if k >= 2:
                nr += k
                left_r += min(k, found)
        words = set(re.findall(r"\w+", text))
        for m in ms:
            for w in re.findall(r"\w{3,}", m):
                nt += 1
                left_t += w in words
    return {
        "residual_repeated_recall": left_r / nr if nr else 0.0,
        "residual_pii_recall": left / n if n else 0.0,
        "residual_token_recall": left_t / nt if nt else 0.0,
    }


def reidentify(
    targets: Sequence[str], aux_texts: Sequence[str], aux_users: Sequence[str]
) -> list[str]:
    """The author guessed for each target: TF-IDF (word 1-2 grams) cosine nearest user profile.

    Args:
        targets: the redacted documents to attribute.
        aux_texts: background documents of the candidate users (not empty).
        aux_users: the author of each background document.

    Returns:
        One guessed user id per target.

    Raises:
        InvalidArgument: ``aux_texts`` empty or of another length than ``aux_users``.
    """
    from sklearn.feature_extraction.text import (
        TfidfVectorizer,
    )  # heavy (~1 s): only for this attack

    if len(aux_texts) != len(aux_users) or not aux_texts:
        raise InvalidArgument("aux_texts and aux_users must be non-empty and of the same length")
    users = sorted(set(aux_users))
    profiles = [" ".join(t for t, u in zip(aux_texts, aux_users) if u == usr) for usr in users]
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"(?u)\b\w+\b")
    P = vec.fit_transform(profiles)
    T = vec.transform(list(targets))
    sims = (T @ P.T).toarray()
    return [users[int(i)] for i in sims.argmax(1)]


def _score(result: AttackResult, ground_truth: Any) -> dict[str, float]:
    gt = dict(ground_truth)
    out = residual_recall(result.raw["texts"], gt["mentions"])
    guesses = list(result.reconstructions)
    users = list(gt["users"])
    if guesses and users:
        out["reid_accuracy"] = float(np.mean([g == u for g, u in zip(guesses, users)]))
        out["reid_chance"] = 1.0 / max(1, int(result.raw.get("n_candidates", 1)))
    return out


@ATTACKS.register("pii_residual")
class ResidualPII(Attack):
    """Residual PII recall (headline: over the entities a document names more than once) and TF-IDF
    re-identification on redacted documents
    (``wikipii-pii-extraction-federated.txt``; threat model: a recipient of the redacted data holding other
    documents of the same users). Observation: :class:`PerturbedText` whose ``texts`` are the redacted
    documents and whose ``meta`` holds ``aux_texts`` / ``aux_users`` (background documents); ground truth:
    ``{"mentions": [[gold PII strings] per document], "users": [author per document]}``."""

    paper = "wikipii-pii-extraction-federated.txt (PII extraction; residual PII after redaction)"
    observation_type = PerturbedText
    threat_model = RESIDUAL_THREAT
    headline_metric = "residual_repeated_recall"

    def run(self, observation: PerturbedText, *, rng: Any) -> AttackResult:
        if not isinstance(observation, PerturbedText):
            raise InvalidArgument(
                f"pii_residual needs a PerturbedText observation; got {type(observation).__name__}"
            )
        texts = list(observation.texts)
        meta: Mapping[str, Any] = observation.meta
        guesses: list[str] = []
        n_cand = 0
        if meta.get("aux_texts"):
            guesses = reidentify(texts, meta["aux_texts"], meta["aux_users"])
            n_cand = len(set(meta["aux_users"]))
        return AttackResult(
            self.name, tuple(guesses), {"texts": texts, "n_candidates": n_cand}, _score
        )


@dataclass(frozen=True)
class ResidualEstimate:
    """The residual-PII attack's estimate for a corpus without gold labels (``privnlp redact --report``).

    Attributes:
        cross_reference_residual: the adversary holds one detected value (from any document) and reads its
            other copies: the fraction of occurrences of detected values (>= 3 characters) still verbatim
            in the redacted corpus (:func:`residual_recall` with the detected values as mentions).
        expected_missed: per type, the mentions the pipeline is expected to have missed, ``found * (1 - r) / r``
            with ``r`` the type's recall measured on the hand-written evaluation set (``None`` without it).
        expected_residual_rate: expected missed / (found + expected missed) over all types (``None`` without
            the measured recalls).
    """

    cross_reference_residual: float
    n_values: int
    expected_missed: Mapping[str, float] | None
    expected_residual_rate: float | None


def estimate_residual(
    originals: Sequence[str],
    redacted: Sequence[str],
    found: Sequence[Sequence[tuple[str, str]]],
    recall_by_type: Mapping[str, float] | None = None,
) -> ResidualEstimate:
    """Estimate the PII left in a redacted corpus from what the redactor itself found.

    Args:
        originals: the input documents.
        redacted: the redacted documents (same order).
        found: per document, ``(type, text)`` of every detected mention.
        recall_by_type: recall per type measured on labelled text (the hand-written set).

    Returns:
        A :class:`ResidualEstimate`.

    Raises:
        InvalidArgument: the three sequences differ in length.
    """
    if not len(originals) == len(redacted) == len(found):
        raise InvalidArgument("originals, redacted and found must have the same length")
    values = sorted({v for doc in found for _, v in doc if len(v.strip()) >= 3})
    mentions: list[list[str]] = []
    for text in originals:
        m: list[str] = []
        for v in values:
            if v in text:
                m += [v] * len(re.findall(r"(?<!\w)" + re.escape(v) + r"(?!\w)", text))
        mentions.append(m)
    cross = residual_recall(list(redacted), mentions)["residual_pii_recall"] if values else 0.0
    missed = rate = None
    if recall_by_type:
        counts: dict[str, int] = {}
        for doc in found:
            for t, _ in doc:
                counts[t] = counts.get(t, 0) + 1
        missed = {
            t: (c * (1 - recall_by_type[t]) / recall_by_type[t]) if recall_by_type.get(t) else 0.0
            for t, c in counts.items()
        }
        tot = sum(counts.values())
        rate = sum(missed.values()) / (tot + sum(missed.values())) if tot else 0.0
    return ResidualEstimate(float(cross), len(values), missed, rate)
