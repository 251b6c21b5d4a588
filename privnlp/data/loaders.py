"""Loaders for user files: txt (one record per line), JSONL, CSV, HF ``datasets`` objects, and
Moses-style parallel file pairs (for ``../shared/papers/phrase-pair-fragmentation-nmt.txt``).

Malformed input raises :class:`~privnlp.core.errors.MalformedInput` naming the file, the line
and what is wrong; nothing is silently skipped except blank lines of txt/JSONL files.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path
from typing import Any

from ..core.errors import InvalidArgument, MalformedInput

__all__ = ["load_texts", "load_parallel", "split_records", "TXT_UNITS", "TXT_UNIT_RULES"]

_FORMATS = ("txt", "jsonl", "csv")
#: how a .txt file is cut into records (documents); the DP vocabulary's claim states the rule used
TXT_UNITS = ("line", "paragraph", "file")
TXT_UNIT_RULES = {
    "line": "one record per line of the .txt file: a line ends at LF or CRLF only (form feeds, "
    "vertical tabs, U+0085, U+2028 and U+2029 stay inside their record); blank lines are skipped",
    "paragraph": "one record per paragraph of the .txt file: records are separated by one or more "
    "blank lines (lines ending at LF or CRLF only); form feeds and U+2028 stay inside their record",
    "file": "the whole .txt file is one record",
}
_BLANK_RUN = re.compile(r"(?:\r?\n)(?:[ \t]*\r?\n)+")


def split_records(text: str, unit: str = "line") -> list[str]:
    """Cut the text of a .txt file into records by the rule ``unit`` (see :data:`TXT_UNIT_RULES`).

    Unlike ``str.splitlines()``, which also splits at form feeds (GPL-1 and the LGPLs hold them),
    U+2028 and other Unicode line separators, a record ends only where the rule says.

    Args:
        text: the file's text.
        unit: ``"line"``, ``"paragraph"`` or ``"file"``.

    Returns:
        The non-blank records, in order (line ends stripped).

    Raises:
        InvalidArgument: an unknown ``unit``.
    """
    if unit not in TXT_UNITS:
        raise InvalidArgument(f"unit must be one of {TXT_UNITS}; got {unit!r}")
    if unit == "file":
        parts = [text]
    elif unit == "paragraph":
        parts = _BLANK_RUN.split(text)
    else:
        parts = text.split("\n")
    out = []
    for part in parts:
        part = part.removesuffix("\r") if unit == "line" else part.strip("\r\n")
        if part.strip():
            out.append(part)
    return out


def _jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL (or Moses) file: a line ends at LF (CRLF) only; a raw U+2028 inside a
    JSON string is valid JSON and never splits an object."""
    return [ln.removesuffix("\r") for ln in text.split("\n")]


_EXT = {".txt": "txt", ".text": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}


def _read(path: Path) -> str:
    if not path.exists():
        raise MalformedInput(f"{path}: file not found")
    if path.is_dir():
        raise MalformedInput(f"{path}: is a directory, expected a file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise MalformedInput(
            f"{path}, line {line}: not valid UTF-8 (byte {data[e.start]:#04x} at offset {e.start})"
        ) from None
    if not text.strip():
        raise MalformedInput(f"{path}: empty file (no records)")
    return text


def _is_hf_dataset(obj: Any) -> bool:
    mod = type(obj).__module__ or ""
    return mod.startswith("datasets") and hasattr(obj, "column_names")


def load_texts(
    path: Any, *, field: str | None = None, fmt: str | None = None, txt_unit: str = "line"
) -> list[str]:
    """Load texts from a txt/JSONL/CSV file or an HF ``datasets.Dataset``.

    * txt: one record per non-blank line (``txt_unit="line"``: a line ends at LF / CRLF only, never
      at a form feed or U+2028), per blank-line separated paragraph (``"paragraph"``) or the whole
      file (``"file"``); see :data:`TXT_UNIT_RULES`.
    * JSONL: one JSON object per non-blank line; ``field`` (default ``"text"``) is taken from each.
    * CSV: a header row; ``field`` is the column (default ``"text"``, or the only column).
    * ``datasets.Dataset``: the column ``field`` (default ``"text"``).

    ``fmt`` (``"txt" | "jsonl" | "csv"``) overrides detection from the file extension.

    Args:
        path: a file path (``.txt``, ``.jsonl``, ``.csv``) or a ``datasets.Dataset``.
        field: the JSON key / CSV column / dataset column holding the text (not used for txt).
        fmt: ``"txt"``, ``"jsonl"`` or ``"csv"`` to override the extension.
        txt_unit: how a txt file is cut into records: ``"line"``, ``"paragraph"`` or ``"file"``.

    Returns:
        The texts, in file order (blank lines skipped).

    Raises:
        InvalidArgument: an unknown format or extension, or ``field`` given for a txt file.
        MalformedInput: invalid JSON / CSV, a missing field or column, a non-string value (the message names
            the file and line).
    """
    if _is_hf_dataset(path):
        col = field or "text"
        if col not in path.column_names:
            raise MalformedInput(
                f"dataset has no column {col!r}; columns: {list(path.column_names)}"
            )
        out = []
        for i, v in enumerate(path[col]):
            if not isinstance(v, str):
                raise MalformedInput(
                    f"dataset row {i}: column {col!r} is {type(v).__name__}, expected str"
                )
            out.append(v)
        return out
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument(
            f"path must be a file path or a datasets.Dataset; got {type(path).__name__}"
        )
    p = Path(path)
    if fmt is None:
        fmt = _EXT.get(p.suffix.lower())
        if fmt is None:
            raise InvalidArgument(
                f"cannot infer the format of {p} from its extension; pass fmt= one of {_FORMATS}"
            )
    if fmt not in _FORMATS:
        raise InvalidArgument(f"fmt must be one of {_FORMATS}; got {fmt!r}")
    if txt_unit not in TXT_UNITS:
        raise InvalidArgument(f"txt_unit must be one of {TXT_UNITS}; got {txt_unit!r}")
    text = _read(p)
    if fmt == "txt":
        if field is not None:
            raise InvalidArgument(
                "field is not used for txt files (one record per line); pass field=None"
            )
        return split_records(text, txt_unit)
    if fmt == "jsonl":
        col = field or "text"
        out = []
        for i, ln in enumerate(_jsonl_lines(text), 1):
            if not ln.strip():
                continue
            try:
                obj = json.loads(ln)
            except json.JSONDecodeError as e:
                raise MalformedInput(
                    f"{p}, line {i}: invalid JSON ({e.msg} at column {e.colno})"
                ) from None
            if not isinstance(obj, dict):
                raise MalformedInput(
                    f"{p}, line {i}: expected a JSON object, got {type(obj).__name__}"
                )
            if col not in obj:
                raise MalformedInput(
                    f"{p}, line {i}: missing field {col!r} (fields: {sorted(obj)})"
                )
            if not isinstance(obj[col], str):
                raise MalformedInput(
                    f"{p}, line {i}: field {col!r} is {type(obj[col]).__name__}, expected a string"
                )
            out.append(obj[col])
        return out
    # csv
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except (StopIteration, csv.Error) as e:  # pragma: no cover - empty handled above
        raise MalformedInput(f"{p}, line 1: cannot read the CSV header ({e})") from None
    if field is None:
        field = "text" if "text" in header else (header[0] if len(header) == 1 else None)
        if field is None:
            raise MalformedInput(
                f"{p}, line 1: no 'text' column and several columns {header}; pass field="
            )
    if field not in header:
        raise MalformedInput(f"{p}, line 1: missing column {field!r} (columns: {header})")
    j = header.index(field)
    out = []
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise MalformedInput(
                    f"{p}, line {line}: {len(row)} fields, expected {len(header)} (as in the header)"
                )
            out.append(row[j])
    except csv.Error as e:
        raise MalformedInput(f"{p}, line {reader.line_num}: CSV error ({e})") from None
    if not out:
        raise MalformedInput(f"{p}: no records after the header")
    return out


def load_parallel(
    src_path: str | os.PathLike, tgt_path: str | os.PathLike
) -> tuple[list[str], list[str]]:
    """Load a Moses-style pair of files (line ``i`` of ``src_path`` translates to line ``i`` of ``tgt_path``).

    Args:
        src_path: the source-side file, one sentence per line (UTF-8).
        tgt_path: the target-side file, same number of lines.

    Returns:
        ``(source_lines, target_lines)``, trailing blank line pairs dropped.

    Raises:
        MalformedInput: a file is missing, a directory, empty or not UTF-8; the line counts differ; or a
            line is empty on one side only.
    """
    sp, tp = Path(src_path), Path(tgt_path)
    src = _jsonl_lines(_read(sp).removesuffix("\n"))  # LF / CRLF only, as the txt rule
    tgt = _jsonl_lines(_read(tp).removesuffix("\n"))
    while src and not src[-1].strip() and tgt and not tgt[-1].strip():
        src.pop(), tgt.pop()
    if len(src) != len(tgt):
        raise MalformedInput(
            f"{sp} has {len(src)} lines but {tp} has {len(tgt)}; a parallel pair needs equal "
            f"line counts (first unmatched line: {min(len(src), len(tgt)) + 1})"
        )
    for i, (a, b) in enumerate(zip(src, tgt), 1):
        if bool(a.strip()) != bool(b.strip()):
            which = sp if not a.strip() else tp
            raise MalformedInput(f"{which}, line {i}: empty line whose counterpart is not empty")
    return src, tgt
