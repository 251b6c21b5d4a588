"""Redaction of PII: typed placeholders or consistent surrogates, from a tagger + regex recognizers
(+ known fields when the user has them).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` (the PII tagger trained on noisy labels
is what finds the mentions). Spans are reported in Presidio's shape (``entity_type``, ``start``, ``end``,
``score``) so results can be compared with Presidio's analyzer.

* ``mode="placeholder"``: every mention becomes ``[NAME]`` (``PERSON``) / ``[DATE]`` / ``[EMAIL]`` ...;
* ``mode="surrogate"``: every mention becomes a fake value from ``Faker`` (seeded per document); the same
  real value maps to the same fake one within a document, and a person's first / last name alone map to
  the first / last name of the same surrogate (``Jane Doe`` -> ``Mary Smith``, ``Jane`` -> ``Mary``).

Overlapping detections are merged (the union is redacted: never less than any recognizer flagged).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, MalformedInput
from privnlp.core.report import atomic_write_text

from .recognizers import PIISpan, digits, recognize
from .spans import merge_for_redaction

__all__ = [
    "PIIRedactor",
    "RedactionResult",
    "RedactionSummary",
    "redact_file",
    "PLACEHOLDERS",
    "MODES",
]

MODES = ("placeholder", "surrogate")
PLACEHOLDERS = {"PERSON": "[NAME]", "NAME": "[NAME]"}
REGEX_LABELS = ("EMAIL", "PHONE", "SSN", "CREDIT_CARD", "DATE")


@dataclass(frozen=True)
class RedactionResult:
    """The redacted text, the detected spans (offsets in the *input* text) and what replaced each.

    Attributes:
        text: the redacted text.
        spans: the detected PII spans, offsets in the input text.
        replacements: ``(original, replacement, label)`` per replaced mention.
    """

    text: str
    spans: tuple[PIISpan, ...]
    replacements: tuple[tuple[str, str, str], ...] = ()  # (original, replacement, label)

    def presidio(self) -> list[dict]:
        return [s.to_presidio() for s in self.spans]

    def counts(self) -> dict[str, int]:
        return dict(Counter(s.label for s in self.spans))


def _norm(label: str, s: str) -> str:
    if label in ("PHONE", "SSN", "CREDIT_CARD"):
        return label + ":" + digits(s)
    return label + ":" + " ".join(s.lower().replace("'s", "").split())


class _Surrogates:
    """Per-document consistent fake values (Faker, seeded)."""

    def __init__(self, seed: int) -> None:
        from faker import Faker

        self.fake = Faker("en_US")
        self.fake.seed_instance(int(seed))
        self.map: dict[str, str] = {}
        self.name_parts: dict[str, str] = {}

    def __call__(self, label: str, original: str) -> str:
        key = _norm(label, original)
        if key in self.map:
            return self.map[key]
        f = self.fake
        if label in ("PERSON", "NAME"):
            parts = original.split()
            if len(parts) > 1:
                fk = [self.name_parts.get(p.lower()) for p in parts]
                if fk[0] is None:
                    fk[0] = f.first_name()
                for i in range(1, len(parts)):
                    if fk[i] is None:
                        fk[i] = f.last_name()
                for p, q in zip(parts, fk):
                    self.name_parts.setdefault(p.lower(), q)
                out = " ".join(fk)  # type: ignore[arg-type]
            else:
                out = self.name_parts.get(original.lower()) or f.first_name()
                self.name_parts.setdefault(original.lower(), out)
        elif label == "DATE":
            out = f.date(pattern="%m/%d/%Y")
        elif label == "PHONE":
            out = f"{f.random_int(201, 989)}-{f.random_int(200, 999)}-{f.random_int(0, 9999):04d}"
        elif label == "EMAIL":
            out = f.email()
        elif label == "SSN":
            out = f.ssn()
        elif label == "ADDRESS":
            out = f.address().replace("\n", ", ")
        elif label == "ORG":
            out = f.company()
        elif label == "LOC":
            out = f.city()
        elif label == "CREDIT_CARD":
            out = f.credit_card_number()
        else:
            out = f"[{label}]"
        self.map[key] = out
        return out


class PIIRedactor:
    """Find PII (tagger + regex recognizers + known fields) and replace it.

    Args:
        tagger: a :class:`~privnlp.mechanisms.pii.tagger.PIITagger` (``None``: regex / known fields only).
        regex: run the regex recognizers (e-mail, phone, SSN, card numbers with Luhn, dates).
        mode: ``"placeholder"`` or ``"surrogate"``.
        annotator: an :class:`~privnlp.mechanisms.pii.AutoAnnotator` used when known fields are passed.
        labels: only these labels are redacted (default: all).
    """

    def __init__(
        self,
        tagger: Any = None,
        regex: bool = True,
        mode: str = "placeholder",
        annotator: Any = None,
        labels: Sequence[str] | None = None,
        placeholders: Mapping[str, str] | None = None,
    ) -> None:
        if mode not in MODES:
            raise InvalidArgument(f"mode must be one of {MODES}; got {mode!r}")
        self.tagger = tagger
        self.regex = regex
        self.mode = mode
        self.annotator = annotator
        self.labels = None if labels is None else tuple(labels)
        self.placeholders = dict(PLACEHOLDERS if placeholders is None else placeholders)
        self._first_mention_only = False  # the leaky twin's bug (privnlp.mechanisms.pii.mechanism)

    def analyze(
        self, text: str, fields: Mapping[str, Sequence[str]] | None = None
    ) -> list[PIISpan]:
        """Merged, non-overlapping PII spans of ``text`` (Presidio's ``AnalyzerEngine.analyze`` analogue)."""
        if not isinstance(text, str):
            raise MalformedInput(f"text must be a string; got {type(text).__name__}")
        if not text.strip():
            return []
        spans: list[PIISpan] = []
        if self.regex:
            spans += recognize(text, REGEX_LABELS)
        if self.tagger is not None:
            spans += self.tagger.spans(text)
        if fields:
            from .annotate import AutoAnnotator

            spans += list((self.annotator or AutoAnnotator()).annotate(text, fields).spans)
        if self.labels is not None:
            spans = [s for s in spans if s.label in self.labels]
        return merge_for_redaction(spans)

    def redact(
        self, text: str, fields: Mapping[str, Sequence[str]] | None = None, *, seed: int = 0
    ) -> RedactionResult:
        spans = self.analyze(text, fields)
        sur = _Surrogates(seed) if self.mode == "surrogate" else None
        pieces, pos, reps, seen = [], 0, [], set()
        kept: list[PIISpan] = []
        for s in spans:
            orig = text[s.start : s.end]
            key = _norm(s.label, orig)
            if self._first_mention_only and key in seen:
                continue
            seen.add(key)
            rep = (
                sur(s.label, orig)
                if sur is not None
                else self.placeholders.get(s.label, f"[{s.label}]")
            )
            pieces += [text[pos : s.start], rep]
            pos = s.end
            reps.append((orig, rep, s.label))
            kept.append(s)
        pieces.append(text[pos:])
        return RedactionResult("".join(pieces), tuple(kept), tuple(reps))

    def redact_many(
        self,
        texts: Sequence[str],
        fields: Sequence[Mapping[str, Sequence[str]] | None] | None = None,
        *,
        rng: Any = 0,
        progress: bool = False,
    ) -> list[RedactionResult]:
        """Redact every text; surrogate seeds are drawn per document from ``rng`` (non-private randomness)."""
        from privnlp.core.rng import as_numpy

        texts = list(texts)
        if fields is not None and len(fields) != len(texts):
            raise InvalidArgument(
                f"fields must hold one entry per text ({len(texts)}); got {len(fields)}"
            )
        g = as_numpy(rng)
        seeds = g.integers(0, 2**62, size=len(texts))
        it: Any = range(len(texts))
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(it, desc="redact", unit="doc")
        return [
            self.redact(texts[i], None if fields is None else fields[i], seed=int(seeds[i]))
            for i in it
        ]


# ------------------------------------------------------------------------------------------------ files
@dataclass(frozen=True)
class RedactionSummary:
    output: str
    sidecar: str
    n_documents: int
    n_empty: int
    counts: Mapping[str, int]
    spans_path: str | None = None
    warnings: tuple[str, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "spans": self.spans_path,
            "n_documents": self.n_documents,
            "n_empty": self.n_empty,
            "counts": dict(self.counts),
            "warnings": list(self.warnings),
            "config": dict(self.config),
        }


_EXT = {".txt": "txt", ".text": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}


def _read_rows(path: Path, fmt: str, field_: str | None) -> tuple[list[Any], list[str]]:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidArgument(f"input: {path} does not exist") from None
    except UnicodeDecodeError as e:
        raise MalformedInput(f"input: {path} is not valid UTF-8 ({e})") from None
    if fmt == "txt":
        if field_ is not None:
            raise InvalidArgument("--field is not used for txt files (one document per line)")
        rows = raw.split("\n")
        if rows and rows[-1] == "":
            rows = rows[:-1]
        return rows, rows
    if field_ is None:
        raise InvalidArgument(
            f"--field is required for {fmt} input (the column / key holding the text)"
        )
    if fmt == "jsonl":
        rows, texts = [], []
        for i, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                rows.append(None)
                texts.append("")
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise MalformedInput(f"{path}, line {i}: not JSON ({e.msg})") from None
            if not isinstance(obj, dict) or field_ not in obj:
                raise MalformedInput(
                    f"{path}, line {i}: no field {field_!r} (keys: {sorted(obj)[:8] if isinstance(obj, dict) else type(obj).__name__})"
                )
            if obj[field_] is not None and not isinstance(obj[field_], str):
                raise MalformedInput(
                    f"{path}, line {i}: field {field_!r} is a {type(obj[field_]).__name__}, not text"
                )
            rows.append(obj)
            texts.append(obj[field_] or "")
        return rows, texts
    reader = csv.DictReader(io.StringIO(raw, newline=""))
    if reader.fieldnames is None or field_ not in reader.fieldnames:
        raise MalformedInput(f"{path}: no column {field_!r} (columns: {reader.fieldnames})")
    rows = list(reader)
    return rows, [r[field_] or "" for r in rows]


def _write_rows(
    path: Path, fmt: str, field_: str | None, rows: list[Any], new_texts: list[str], header: Any
) -> None:
    if fmt == "txt":
        atomic_write_text(path, "".join(t.replace("\n", " ") + "\n" for t in new_texts))
        return
    if fmt == "jsonl":
        lines = []
        for row, t in zip(rows, new_texts):
            if row is None:
                lines.append("")
                continue
            row = dict(row)
            row[field_] = t if row[field_] is not None else None
            lines.append(json.dumps(row, ensure_ascii=False))
        atomic_write_text(path, "\n".join(lines) + "\n")
        return
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=header)
    w.writeheader()
    for row, t in zip(rows, new_texts):
        w.writerow({**row, field_: t})
    atomic_write_text(path, buf.getvalue())


def load_known_fields(path: str | os.PathLike) -> dict[str, dict[str, list[str]]]:
    """A known-fields file: JSON ``{doc_id: {LABEL: [values]}}`` or JSONL rows ``{"id": ..., "fields": {...}}``
    (or ``{"id": ..., LABEL: [values], ...}``)."""
    from .annotate import validate_fields

    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidArgument(f"known fields: {p} does not exist") from None
    raw_s = raw.strip()
    out: dict[str, dict[str, list[str]]] = {}
    if raw_s.startswith("{") and p.suffix.lower() == ".json":
        try:
            obj = json.loads(raw_s)
        except json.JSONDecodeError as e:
            raise MalformedInput(f"known fields: {p} is not JSON ({e.msg})") from None
        for k, v in obj.items():
            out[str(k)] = {a: list(b) for a, b in validate_fields(v, where=f"{p}[{k!r}]").items()}
        return out
    for i, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise MalformedInput(f"known fields: {p}, line {i}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict) or "id" not in obj:
            raise MalformedInput(
                f"known fields: {p}, line {i}: needs an 'id' key naming the document"
            )
        f = obj.get("fields", {k: v for k, v in obj.items() if k != "id"})
        out[str(obj["id"])] = {
            a: list(b) for a, b in validate_fields(f, where=f"{p}, line {i}").items()
        }
    return out


def redact_file(
    input: str | os.PathLike,
    output: str | os.PathLike,
    *,
    field: str | None = None,
    fmt: str | None = None,
    redactor: PIIRedactor | None = None,
    known_fields: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    id_field: str = "id",
    spans_path: str | os.PathLike | None = None,
    seed: int = 0,
    progress: bool = False,
) -> RedactionSummary:
    """Redact a txt (one document per line) / JSONL / CSV file; other columns / keys are kept as they are.

    Writes ``output`` atomically, a sidecar ``OUTPUT.redaction.json`` (counts per type, warnings, config)
    and, with ``spans_path``, one JSON line per document with its spans in Presidio's shape.
    ``known_fields``: ``{doc id: {LABEL: [values]}}``; documents are matched by ``id_field`` (JSONL / CSV) or by
    line number (``"1"``, ``"2"``, ... for txt). Documents without an entry are still redacted (tagger + regex).

    Args:
        input: the file to redact.
        output: where the redacted file is written (must differ from ``input``).
        field: the JSONL key / CSV column holding the text.
        fmt: ``"txt"``, ``"jsonl"`` or ``"csv"`` (default: from the extension).
        redactor: the redactor (default: ``PIIRedactor()``, regex recognizers only).
        known_fields: ``{doc id: {LABEL: [values]}}`` (see above).
        id_field: the JSONL key / CSV column holding the document id.
        spans_path: also write the spans of every document here (JSON Lines).
        seed: the seed of the surrogate choices (not privacy noise).
        progress: show a progress bar.

    Returns:
        The summary (counts per type, warnings, paths).

    Raises:
        InvalidArgument: ``output`` equals ``input``, an unknown ``fmt``, a missing ``input``, or ``field``
            given for txt / missing for JSONL and CSV.
        MalformedInput: the input cannot be parsed (a record without ``field``, bad JSON / CSV, not UTF-8).
    """
    import warnings

    inp, out = Path(input), Path(output)
    if inp.resolve() == out.resolve():
        raise InvalidArgument("output must differ from input (nothing is redacted in place)")
    fmt = fmt or _EXT.get(inp.suffix.lower())
    if fmt not in ("txt", "jsonl", "csv"):
        raise InvalidArgument(
            f"fmt must be txt, jsonl or csv (or use one of the extensions {sorted(_EXT)}); "
            f"got {fmt!r} for {inp}"
        )
    redactor = redactor or PIIRedactor()
    rows, texts = _read_rows(inp, fmt, field)
    header = None
    if fmt == "csv":
        header = csv.DictReader(io.StringIO(inp.read_text(encoding="utf-8"), newline="")).fieldnames
    msgs: list[str] = []
    fields_list = None
    if known_fields is not None:
        if fmt == "txt":
            ids = [str(i + 1) for i in range(len(texts))]
        else:
            ids = [
                str(r.get(id_field))
                if r is not None and r.get(id_field) is not None
                else f"#{i + 1}"
                for i, r in enumerate(rows)
            ]
        fields_list = [known_fields.get(i) for i in ids]
        absent = sum(f is None for f in fields_list)
        extra = sorted(set(known_fields) - set(ids))
        if absent == len(ids) and known_fields:
            msgs.append(
                f"no document id matches the known-fields file (ids are read from {id_field!r}"
                f"{' = line numbers' if fmt == 'txt' else ''}; first known id: {next(iter(known_fields))!r}): "
                "documents were redacted with the tagger / regex only"
            )
        elif absent or extra:
            msgs.append(
                f"known fields: {absent} documents have no entry, {len(extra)} entries match no document "
                f"(first: {extra[:3]})"
            )
    n_empty = sum(1 for t in texts if not t.strip())
    if n_empty:
        msgs.append(f"{n_empty} empty documents (kept as they are)")
    results = redactor.redact_many(
        texts, fields_list, rng=np.random.default_rng(seed), progress=progress
    )
    for m in msgs:
        warnings.warn(m, UserWarning, stacklevel=2)
    new_texts = [r.text for r in results]
    spath = None
    if spans_path is not None:
        spath = str(spans_path)
        atomic_write_text(
            spans_path,
            "".join(
                json.dumps({"index": i, "spans": r.presidio()}) + "\n"
                for i, r in enumerate(results)
            ),
        )
    _write_rows(out, fmt, field, rows, new_texts, header)
    counts = Counter()
    for r in results:
        counts.update(r.counts())
    cfg = {
        "mode": redactor.mode,
        "regex": redactor.regex,
        "tagger": None if redactor.tagger is None else getattr(redactor.tagger, "kind", "custom"),
        "format": fmt,
        "field": field,
        "seed": seed,
        "known_fields": known_fields is not None,
    }
    sidecar = Path(str(out) + ".redaction.json")
    summary = RedactionSummary(
        str(out),
        str(sidecar),
        len(texts),
        n_empty,
        dict(sorted(counts.items())),
        spath,
        tuple(msgs),
        cfg,
    )
    atomic_write_text(sidecar, json.dumps(summary.to_dict(), indent=2) + "\n")
    return summary
