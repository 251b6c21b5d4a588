"""Hand-written PII evaluation sets: loading and entity-level scoring (issue 32).

The texts live outside the package, in ``benchmarks/pii_eval/`` (``test.txt``: measured only;
``validation.txt``: the only one tuning may read), written inline as ``[[TYPE:exact text]]`` under
``### <kind> <locale>`` headers. :func:`load_evalset` strips the markup and keeps ``(start, end, type)``.

Scoring (:func:`score_spans`), per PII type and overall, at the entity level:

* **recall** (redaction): a gold item counts as caught when every one of its word characters lies
  inside some predicted span, whatever type the span was given (what matters for privacy: the item is
  gone from the output); ``typed_recall`` also asks that a span overlapping it carries its type;
* **precision**: a predicted span counts as correct when it overlaps a gold item and every one of its
  word characters lies inside gold items (a span that also takes a non-PII word is wrong: the redacted
  text would lose that word); per type, a predicted span counts for the type it was given;
* **kept words**: the share of non-PII word tokens that survive redaction unchanged.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privnlp.core.errors import InvalidArgument, MalformedInput

from .types import PIISpan

__all__ = [
    "EvalDoc",
    "EvalScore",
    "load_evalset",
    "parse_evalset",
    "score_spans",
    "default_evalset_dir",
    "measured_recall",
    "handwritten_card_json",
]

_HEADER = re.compile(r"^### (\S+) (\S+)\s*$")
_ITEM = re.compile(r"\[\[([A-Z_]+):(.+?)\]\]", re.S)


@dataclass(frozen=True)
class EvalDoc:
    """One hand-written text with its gold PII items ``(start, end, type)``."""

    id: str
    kind: str
    locale: str
    text: str
    gold: tuple[tuple[int, int, str], ...]


def handwritten_card_json() -> Path:
    """Where ``benchmarks/pii_redaction.py --evalset`` writes its measurements (the card's folder)."""
    return (
        Path(__file__).resolve().parents[3]
        / "cards"
        / "mechanisms"
        / "pii_redaction"
        / "handwritten.json"
    )


def measured_recall(pipeline: str = "recognizers + CRF tagger") -> dict[str, float] | None:
    """Recall per type of ``pipeline`` measured on the hand-written test set (``None`` when the
    measurement file is absent, e.g. an installed wheel)."""
    p = handwritten_card_json()
    if not p.is_file():
        return None
    d = json.loads(p.read_text(encoding="utf-8"))
    per = d.get("pipelines", {}).get(pipeline, {}).get("per_type", {})
    return {k: float(v["recall"]) for k, v in per.items() if v.get("recall") == v.get("recall")}


def default_evalset_dir() -> Path:
    """``benchmarks/pii_eval`` of the source tree (not shipped in the wheel)."""
    return Path(__file__).resolve().parents[3] / "benchmarks" / "pii_eval"


def parse_evalset(raw: str, name: str = "evalset") -> list[EvalDoc]:
    """Parse the markup format (see the module docstring)."""
    docs: list[EvalDoc] = []
    head: tuple[str, str] | None = None
    body: list[str] = []

    def flush() -> None:
        if head is None:
            return
        marked = "\n".join(body).strip("\n").rstrip()
        out, gold, pos = [], [], 0
        for m in _ITEM.finditer(marked):
            out.append(marked[pos : m.start()])
            a = sum(len(x) for x in out)
            out.append(m.group(2))
            gold.append((a, a + len(m.group(2)), m.group(1)))
            pos = m.end()
        out.append(marked[pos:])
        text = "".join(out)
        if "[[" in text or "]]" in text:
            raise MalformedInput(f"{name}: unbalanced [[...]] in text {len(docs) + 1}")
        docs.append(EvalDoc(f"{name}-{len(docs) + 1:03d}", head[0], head[1], text, tuple(gold)))

    for line in raw.splitlines():
        m = _HEADER.match(line)
        if m:
            flush()
            head, body = (m.group(1), m.group(2)), []
        elif head is not None:
            body.append(line)
    flush()
    return docs


def load_evalset(split: str = "test", directory: str | Path | None = None) -> list[EvalDoc]:
    """The hand-written set ``split`` (``"test"`` or ``"validation"``) from ``directory``
    (default :func:`default_evalset_dir`)."""
    if split not in ("test", "validation"):
        raise InvalidArgument(f"split must be 'test' or 'validation'; got {split!r}")
    p = Path(directory or default_evalset_dir()) / f"{split}.txt"
    if not p.is_file():
        raise InvalidArgument(f"evaluation set {p} does not exist (a source checkout has it)")
    return parse_evalset(p.read_text(encoding="utf-8"), split)


@dataclass(frozen=True)
class EvalScore:
    """Entity-level scores on an evaluation set, overall and per type (see the module docstring)."""

    recall: float
    typed_recall: float
    precision: float
    kept_words: float
    n_gold: int
    n_pred: int
    per_type: Mapping[str, Mapping[str, float]]
    missed: tuple[tuple[str, str, str], ...]  # (doc id, type, text)
    wrong: tuple[tuple[str, str, str], ...]  # (doc id, predicted type, text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "recall": self.recall,
            "typed_recall": self.typed_recall,
            "precision": self.precision,
            "kept_words": self.kept_words,
            "n_gold": self.n_gold,
            "n_pred": self.n_pred,
            "per_type": {k: dict(v) for k, v in self.per_type.items()},
        }

    def table(self) -> str:
        """A Markdown table: recall, typed recall, precision and counts per type."""
        rows = [
            "| type | gold | recall | typed recall | predicted | precision |",
            "|---|---|---|---|---|---|",
        ]
        for k, v in sorted(self.per_type.items()):
            rows.append(
                f"| {k} | {int(v['n_gold'])} | {_fmt(v['recall'])} | {_fmt(v['typed_recall'])} "
                f"| {int(v['n_pred'])} | {_fmt(v['precision'])} |"
            )
        rows.append(
            f"| **all** | {self.n_gold} | **{self.recall:.3f}** | {self.typed_recall:.3f} "
            f"| {self.n_pred} | **{self.precision:.3f}** |"
        )
        return "\n".join(rows)


def _fmt(x: float) -> str:
    return "–" if x != x else f"{x:.2f}"


def _word_chars(text: str, a: int, b: int) -> set[int]:
    return {i for i in range(a, b) if text[i].isalnum()}


def score_spans(docs: Sequence[EvalDoc], predictions: Sequence[Iterable[PIISpan]]) -> EvalScore:
    """Score predicted spans (one iterable per document) against the gold items."""
    if len(docs) != len(predictions):
        raise InvalidArgument(
            f"predictions must hold one entry per document ({len(docs)}); got {len(predictions)}"
        )
    g_n: dict[str, int] = defaultdict(int)
    g_hit: dict[str, int] = defaultdict(int)
    g_typed: dict[str, int] = defaultdict(int)
    p_n: dict[str, int] = defaultdict(int)
    p_ok: dict[str, int] = defaultdict(int)
    missed, wrong = [], []
    words_total = words_kept = 0
    for doc, preds in zip(docs, predictions):
        preds = [p for p in preds if p.end > p.start]
        covered: set[int] = set()
        for p in preds:
            covered |= set(range(p.start, p.end))
        gold_chars: set[int] = set()
        for a, b, _ in doc.gold:
            gold_chars |= _word_chars(doc.text, a, b)
        for a, b, t in doc.gold:
            g_n[t] += 1
            wc = _word_chars(doc.text, a, b)
            if wc <= covered:
                g_hit[t] += 1
                if any(p.label == t and p.start < b and a < p.end for p in preds):
                    g_typed[t] += 1
            else:
                missed.append((doc.id, t, doc.text[a:b]))
        for p in preds:
            p_n[p.label] += 1
            wc = _word_chars(doc.text, p.start, p.end)
            hits = any(p.start < b and a < p.end for a, b, _ in doc.gold)
            if hits and wc <= gold_chars:
                p_ok[p.label] += 1
            else:
                wrong.append((doc.id, p.label, doc.text[p.start : p.end]))
        for m in re.finditer(r"\w+", doc.text):
            if not (set(range(m.start(), m.end())) & gold_chars):
                words_total += 1
                words_kept += not (set(range(m.start(), m.end())) & covered)
    types = sorted(set(g_n) | set(p_n))
    per = {
        t: {
            "n_gold": float(g_n[t]),
            "recall": g_hit[t] / g_n[t] if g_n[t] else float("nan"),
            "typed_recall": g_typed[t] / g_n[t] if g_n[t] else float("nan"),
            "n_pred": float(p_n[t]),
            "precision": p_ok[t] / p_n[t] if p_n[t] else float("nan"),
        }
        for t in types
    }
    ng, npred = sum(g_n.values()), sum(p_n.values())
    return EvalScore(
        recall=sum(g_hit.values()) / ng if ng else float("nan"),
        typed_recall=sum(g_typed.values()) / ng if ng else float("nan"),
        precision=sum(p_ok.values()) / npred if npred else float("nan"),
        kept_words=words_kept / words_total if words_total else float("nan"),
        n_gold=ng,
        n_pred=npred,
        per_type=per,
        missed=tuple(missed),
        wrong=tuple(wrong),
    )
