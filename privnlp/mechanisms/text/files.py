"""Streaming file sanitization (txt / JSONL / CSV) with atomic output and a JSON sidecar.

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` (each word of each record is perturbed
independently with Algorithm 1 / 3 or a baseline). Record order and count are preserved; the
output is written to a temp file in the target folder and renamed only when every record went
through, so a bad record (not UTF-8, not JSON, missing field) leaves no partial output.
"""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from privnlp.core.errors import InvalidArgument, MalformedInput
from privnlp.core.report import atomic_write_text
from privnlp.core.rng import as_numpy

__all__ = ["FileReport", "sanitize_file", "sidecar_path", "FORMATS"]

FORMATS = ("txt", "jsonl", "csv")


@dataclass(frozen=True)
class FileReport:
    """What :func:`sanitize_file` did."""

    input: str
    output: str
    sidecar: str
    fmt: str
    records: int
    words: int
    perturbed: int
    changed: int
    oov: int
    kept: int
    max_words_per_record: int


def sidecar_path(output: str | os.PathLike) -> Path:
    return Path(str(output) + ".privnlp.json")


def _guess_fmt(path: Path) -> str:
    suf = path.suffix.lower()
    return {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}.get(suf, "txt")


def _lines(fh: io.TextIOBase, path: Path) -> Iterator[tuple[int, str]]:
    n = 0
    while True:
        try:
            line = fh.readline()
        except UnicodeDecodeError as e:
            raise MalformedInput(f"{path}: not valid UTF-8 after line {n} ({e.reason} at byte {e.start})") from e
        if not line:
            return
        n += 1
        yield n, line


def sanitize_file(input: str | os.PathLike, output: str | os.PathLike, mechanism: Any, *, rng: Any,
                  fmt: str | None = None, field: str = "text", chunk_records: int = 512, progress: bool = True,
                  seed: int | None = None) -> FileReport:
    """Sanitize ``input`` into ``output`` with ``mechanism`` (a :class:`WordMetricDP`).

    ``fmt``: ``txt`` (one record per line), ``jsonl`` (``field`` of each object) or ``csv``
    (column ``field``); guessed from the suffix if ``None``. The sidecar ``OUTPUT.privnlp.json``
    holds the per-word and per-record claims, the parameters and the counts.
    """
    src, dst = Path(input), Path(output)
    if not src.is_file():
        raise InvalidArgument(f"input {str(src)!r} is not a file")
    fmt = fmt or _guess_fmt(src)
    if fmt not in FORMATS:
        raise InvalidArgument(f"fmt must be one of {FORMATS}; got {fmt!r}")
    if src.resolve() == dst.resolve():
        raise InvalidArgument("output must differ from input")
    g = as_numpy(rng)
    mechanism.resolve_embeddings()  # fail early (bad embeddings) before creating anything
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    counts = dict(records=0, words=0, perturbed=0, changed=0, oov=0, kept=0, max_words_per_record=0)
    try:
        from tqdm.auto import tqdm
        bar = tqdm(total=src.stat().st_size, unit="B", unit_scale=True, desc="sanitize", disable=not progress)
        with open(src, "r", encoding="utf-8", errors="strict", newline="") as fin, \
                os.fdopen(fd, "w", encoding="utf-8", newline="") as fout:
            if fmt == "txt":
                _run_txt(fin, fout, src, mechanism, g, chunk_records, counts, bar)
            elif fmt == "jsonl":
                _run_jsonl(fin, fout, src, mechanism, g, chunk_records, counts, bar, field)
            else:
                _run_csv(fin, fout, src, mechanism, g, chunk_records, counts, bar, field)
        bar.close()
        side = sidecar_path(dst)
        meta = {
            "input": str(src), "output": str(dst), "format": fmt, "field": field if fmt != "txt" else None,
            "mechanism": mechanism.name, "params": mechanism.params(), "seed": seed,
            "embeddings": {"source": mechanism.resolve_embeddings().source, "n_words": len(mechanism.resolve_embeddings()),
                           "dim": mechanism.resolve_embeddings().dim,
                           "sha256_16": mechanism.resolve_embeddings().fingerprint()},
            "claim_per_word": mechanism.claim().to_dict(),
            "claim_per_record": mechanism.claim(n_words=counts["max_words_per_record"]).to_dict(),
            "counts": counts,
        }
        os.replace(tmp, dst)
        atomic_write_text(side, json.dumps(meta, indent=2, default=str) + "\n")
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return FileReport(str(src), str(dst), str(side), fmt, **counts)


def _account(counts: dict, res: list) -> None:
    for r in res:
        counts["records"] += 1
        counts["words"] += r.n_words
        counts["perturbed"] += r.n_perturbed
        counts["changed"] += r.n_changed
        counts["oov"] += r.n_oov
        counts["kept"] += r.n_kept
        counts["max_words_per_record"] = max(counts["max_words_per_record"], r.n_perturbed + r.n_oov)


def _run_txt(fin, fout, src, mech, g, chunk, counts, bar) -> None:
    buf: list[tuple[str, str]] = []

    def flush() -> None:
        res = mech.sanitize_many([b for b, _ in buf], rng=g)
        _account(counts, res)
        fout.write("".join(r.text + nl for r, (_, nl) in zip(res, buf)))
        buf.clear()
    for _, line in _lines(fin, src):
        bar.update(len(line.encode("utf-8")))
        body = line.rstrip("\r\n")
        buf.append((body, line[len(body):]))
        if len(buf) >= chunk:
            flush()
    if buf:
        flush()


def _run_jsonl(fin, fout, src, mech, g, chunk, counts, bar, field) -> None:
    buf: list[Any] = []

    def flush() -> None:
        recs = [r for r in buf if r is not None]
        out_res = mech.sanitize_many([r[field] for r in recs], rng=g)
        _account(counts, out_res)
        it = iter(out_res)
        for r in buf:
            if r is None:
                fout.write("\n")
                continue
            r = dict(r)
            r[field] = next(it).text
            fout.write(json.dumps(r, ensure_ascii=False) + "\n")
        buf.clear()
    for n, line in _lines(fin, src):
        bar.update(len(line.encode("utf-8")))
        if not line.strip():
            buf.append(None)
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise MalformedInput(f"{src}: line {n} is not JSON ({e.msg}); is this a JSONL file? "
                                 "use --format txt/csv for other files") from e
        if not isinstance(rec, dict):
            raise MalformedInput(f"{src}: line {n} is a JSON {type(rec).__name__}, expected an object with field {field!r}")
        if field not in rec:
            raise MalformedInput(f"{src}: line {n} has no field {field!r} (fields: {sorted(rec)[:10]}); pick one with --field")
        if not isinstance(rec[field], str):
            raise MalformedInput(f"{src}: line {n}: field {field!r} must be a string; got {type(rec[field]).__name__}")
        buf.append(rec)
        if len(buf) >= chunk:
            flush()
    if buf:
        flush()


def _run_csv(fin, fout, src, mech, g, chunk, counts, bar, field) -> None:
    try:
        reader = csv.DictReader(fin)
        names = reader.fieldnames
    except UnicodeDecodeError as e:
        raise MalformedInput(f"{src}: not valid UTF-8 ({e.reason})") from e
    if not names or field not in names:
        raise MalformedInput(f"{src}: CSV has no column {field!r} (columns: {names}); pick one with --field")
    writer = csv.DictWriter(fout, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    buf: list[dict] = []

    def flush() -> None:
        res = mech.sanitize_many([r[field] or "" for r in buf], rng=g)
        _account(counts, res)
        for r, s in zip(buf, res):
            r[field] = s.text
            writer.writerow(r)
        buf.clear()
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except UnicodeDecodeError as e:
            raise MalformedInput(f"{src}: not valid UTF-8 near line {reader.line_num} ({e.reason})") from e
        except csv.Error as e:
            raise MalformedInput(f"{src}: CSV error near line {reader.line_num}: {e}") from e
        if None in row:
            raise MalformedInput(f"{src}: line {reader.line_num} has more cells than the header")
        buf.append(row)
        if len(buf) >= chunk:
            flush()
    if buf:
        flush()
