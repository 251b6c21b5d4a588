"""The registered mechanism ``pii_redaction`` (auto-annotate -> train a PII tagger -> redact) and its
leaky twin (redacts only the first mention of each entity).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt``. Threat model: a data recipient who gets
the redacted documents (and may hold other documents of the same users) tries to read PII that survived
redaction and to link a redacted document back to its author. The claim is heuristic: redaction is
best-effort, measured by the paired attacks (``pii_residual``: residual PII recall on held-out records
whose PII the redactor never saw + re-identification; ``canary_exposure``: an LM trained on the
redacted corpus), never guaranteed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from privnlp.core.claims import Adversary, PrivacyClaim, ThreatModel
from privnlp.core.errors import InvalidArgument, check_positive, check_range
from privnlp.core.protocols import Mechanism
from privnlp.core.registry import LEAKY_TWINS, MECHANISMS

from .annotate import AutoAnnotator
from .redact import MODES, PIIRedactor

__all__ = ["PIIRedaction", "LeakyPIIRedactionFirstMention", "REDACTED_DATA_RECIPIENT"]

REDACTED_DATA_RECIPIENT = ThreatModel(
    adversary=Adversary.DATA_RECIPIENT,
    observes=("the redacted documents", "models trained on them"),
    knows=("other documents of the same users (background knowledge)", "the redaction method"),
    goal="read PII that survived redaction; link a redacted document to its author; extract canaries from a model",
)


@MECHANISMS.register("pii_redaction")
class PIIRedaction(Mechanism):
    """PII redaction learned without human annotation (WikiPII, ``wikipii-pii-extraction-federated.txt``).

    ``fit(records, known_fields, rng=...)``: auto-annotate the records from their known PII fields (paper
    §2.2, :class:`~privnlp.mechanisms.pii.AutoAnnotator`), train a BiLSTM PII tagger on the noisy labels
    (central for ``sites=1``, FedAvg over ``sites`` sites otherwise; paper §4-5) and return a
    :class:`~privnlp.mechanisms.pii.redact.PIIRedactor` (tagger + regex recognizers) that replaces every
    mention by a typed placeholder or a consistent surrogate. Threat model: a recipient of the redacted
    data with background documents of the same users. Claim: heuristic (no formal guarantee; the paired
    attacks measure residual PII, re-identification and canary exposure).

    Args:
        mode: ``"placeholder"`` (typed ``[PERSON]``-style placeholders) or ``"surrogate"`` (consistent fake values).
        sites: the number of sites the tagger is trained across, an integer in [1, 10**4] (1 = central, more =
            FedAvg).
        rounds: training rounds, an integer in [0, 10**5] (0 = no tagger, regex recognizers only).
        local_epochs: local epochs per round; > 0.
        lr: the tagger's learning rate; > 0.
        min_count: the least count of a word to enter the tagger's vocabulary, an integer in [1, 10**6].
        patterns: the auto-annotator also tags every date / phone / SSN / e-mail the regex recognizers find.
        regex: the redactor also applies the regex recognizers.
        fuzzy_threshold: the rapidfuzz ratio a phrase needs to match a known field, in [50, 100].

    Raises:
        InvalidArgument: an unknown ``mode`` or an argument out of range.
    """

    paper = "wikipii-pii-extraction-federated.txt (auto-annotation from known fields, PII tagger on noisy labels)"
    paired_attacks = ("pii_residual", "canary_exposure")
    threat_models = (REDACTED_DATA_RECIPIENT,)
    scenario = "pii.redaction"

    def __init__(
        self,
        mode: str = "placeholder",
        sites: int = 1,
        rounds: int = 10,
        local_epochs: float = 1.0,
        lr: float = 3.0,
        min_count: int = 4,
        patterns: bool = True,
        regex: bool = True,
        fuzzy_threshold: float = 85.0,
        word_dropout: float = 0.25,
    ) -> None:
        if mode not in MODES:
            raise InvalidArgument(f"mode must be one of {MODES}; got {mode!r}")
        check_range("sites", sites, 1, 10**4, integer=True)
        check_range("rounds", rounds, 0, 10**5, integer=True)
        check_positive("local_epochs", local_epochs)
        check_positive("lr", lr)
        check_range("min_count", min_count, 1, 10**6, integer=True)
        check_range("word_dropout", word_dropout, 0.0, 1.0)
        check_range("fuzzy_threshold", fuzzy_threshold, 50.0, 100.0)
        self.mode = mode
        self.sites = sites
        self.rounds = rounds
        self.local_epochs = local_epochs
        self.lr = lr
        self.min_count = min_count
        self.patterns = patterns
        self.regex = regex
        self.fuzzy_threshold = fuzzy_threshold
        self.word_dropout = word_dropout

    def claim(self) -> PrivacyClaim:
        return PrivacyClaim.heuristic(
            "PII redaction by a tagger trained on auto-annotated (noisy) labels plus regex recognizers: best effort, "
            "no formal guarantee; PII the tagger misses (unseen name formats, free-text identifiers, writing style) "
            "stays in the text; see the measured residual PII recall and re-identification accuracy",
            extra={"mode": self.mode, "sites": self.sites},
        )

    def annotator(self) -> AutoAnnotator:
        return AutoAnnotator(fuzzy_threshold=self.fuzzy_threshold, patterns=self.patterns)

    def fit(
        self, records: Sequence[Any], known_fields: Mapping[str, Any], *, rng: Any
    ) -> PIIRedactor:
        """Auto-annotate ``records`` (``.id``, ``.text``, ``.user_id``) and train the tagger; ``rounds=0``: no
        tagger (regex recognizers only)."""
        tagger = None
        if self.rounds > 0:
            from .tagger import train_tagger  # imports torch: only when a tagger is trained

            ids = {
                str(r.id) for r in records
            }  # the fields of other documents are not this training set's
            docs = self.annotator().annotate_records(
                records, {k: v for k, v in known_fields.items() if k in ids}
            )
            sents = [d.tokens_and_tags() for d in docs]
            run = train_tagger(
                sents,
                groups=[getattr(r, "user_id", str(i)) for i, r in enumerate(records)],
                sites=self.sites,
                rounds=self.rounds,
                local_epochs=self.local_epochs,
                lr=self.lr,
                min_count=self.min_count,
                word_dropout=self.word_dropout,
                rng=rng,
            )
            tagger = run.tagger
        return self._redactor(tagger)

    def _redactor(self, tagger: Any) -> PIIRedactor:
        return PIIRedactor(tagger=tagger, regex=self.regex, mode=self.mode)

    @classmethod
    def example(cls, preset: str = "quick") -> PIIRedaction:
        return cls(rounds=8 if preset == "quick" else 15)


@LEAKY_TWINS.register("pii_redaction")
class LeakyPIIRedactionFirstMention(PIIRedaction):
    """Leaky twin of ``pii_redaction``: same tagger and claim, but it replaces only the *first* mention of each
    entity in a document (a bug seen in find-and-replace redaction loops that stop at the first hit), so a
    name or phone number repeated later in the document survives. ``pii_residual`` must catch it.

    Args:
        mode: ``"placeholder"`` (typed ``[PERSON]``-style placeholders) or ``"surrogate"`` (consistent fake values).
        sites: the number of sites the tagger is trained across, an integer in [1, 10**4] (1 = central, more =
            FedAvg).
        rounds: training rounds, an integer in [0, 10**5] (0 = no tagger, regex recognizers only).
        local_epochs: local epochs per round; > 0.
        lr: the tagger's learning rate; > 0.
        min_count: the least count of a word to enter the tagger's vocabulary, an integer in [1, 10**6].
        patterns: the auto-annotator also tags every date / phone / SSN / e-mail the regex recognizers find.
        regex: the redactor also applies the regex recognizers.
        fuzzy_threshold: the rapidfuzz ratio a phrase needs to match a known field, in [50, 100].

    Raises:
        InvalidArgument: an unknown ``mode`` or an argument out of range.
    """

    def _redactor(self, tagger: Any) -> PIIRedactor:
        red = super()._redactor(tagger)
        red._first_mention_only = True
        return red
