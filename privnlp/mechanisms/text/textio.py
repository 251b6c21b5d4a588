"""Text in, text out: tokenise into word spans, perturb selected words, detokenise in place.

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` (Algorithm 1 perturbs each word of a
string ``s = w1 ... wn`` independently). Everything that is not a word token (whitespace,
punctuation) is copied verbatim, so the released text keeps the layout of the input.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import regex  # Unicode word characters incl. combining marks (stdlib ``re`` splits "nai\u0308ve")

__all__ = ["WORD_RE", "word_spans", "nfc", "SanitizedText"]

#: a word token: a run of Unicode word characters (letters, digits, underscore *and combining marks*,
#: UTS #18 ``\w`` as the ``regex`` library implements it, so NFD "nai\u0308ve" and Devanagari vowel
#: signs stay inside their word), with inner apostrophes ("don't", "o'neil", "john’s"), inner hyphens
#: ("well-known") and number separators ("3.5", "1,000"); the mechanism splits a token into
#: vector-vocabulary units when the whole token has no vector (see ``WordMetricDP.pieces``)
WORD_RE = regex.compile(r"\w+(?:(?:['’\-]|(?<=\d)[.,](?=\d))\w+)*")


def nfc(s: str) -> str:
    """``s`` in Unicode normal form C (the form vocabulary lookups use; ASCII returned as is)."""
    return s if s.isascii() else unicodedata.normalize("NFC", s)


def word_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the word tokens of ``text``.

    Args:
        text: the text.

    Returns:
        ``(start, end)`` character offsets, in order.
    """
    return [m.span() for m in WORD_RE.finditer(text)]


@dataclass(frozen=True)
class SanitizedText:
    """A sanitized text and what happened to its words.

    Attributes:
        text: the released text.
        n_words: word tokens in the input.
        n_perturbed: words that went through the mechanism (in-vocabulary, selected by the policy).
        n_changed: perturbed words whose output differs from the (normalised) input.
        n_oov: out-of-vocabulary words (handled by the OOV policy).
        n_kept: words released verbatim (not selected by the policy, or OOV with ``oov="keep"``).
        oov_words: the out-of-vocabulary units of the input, in order (for the data owner's OOV report;
            never written to a released file).
    """

    text: str
    n_words: int
    n_perturbed: int
    n_changed: int
    n_oov: int
    n_kept: int
    oov_words: tuple[str, ...] = ()
