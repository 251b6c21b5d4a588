"""The span type shared by the recognizers, the annotator, the taggers and the redactor.

Its own module so that :mod:`.recognizers` and :mod:`.spans` both import it without importing each
other (issue 30, item 2).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PIISpan"]


@dataclass(frozen=True)
class PIISpan:
    """A PII mention ``text[start:end]`` of type ``label`` (Presidio: ``entity_type``) with a ``score``.

    Attributes:
        start: first character offset (inclusive).
        end: last character offset (exclusive).
        label: the PII type (``PERSON``, ``EMAIL``, ``PHONE``, ``SSN``, ``CREDIT_CARD``, ``DATE``, ...).
        score: confidence in [0, 1] (a tagger span: its calibrated probability of being a correct span).
        source: what found it (``"regex"``, ``"known_field"``, ``"tagger"``, ...).
    """

    start: int
    end: int
    label: str
    score: float = 1.0
    source: str = ""

    @property
    def entity_type(self) -> str:
        return self.label

    def to_presidio(self) -> dict:
        """Presidio's ``RecognizerResult`` shape."""
        return {
            "entity_type": self.label,
            "start": int(self.start),
            "end": int(self.end),
            "score": round(float(self.score), 4),
        }

    def overlaps(self, other: PIISpan) -> bool:
        return self.start < other.end and other.start < self.end
