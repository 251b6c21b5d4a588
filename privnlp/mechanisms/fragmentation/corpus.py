"""Reading and tokenising parallel corpora for phrase-pair fragmentation.

Paper: ``../shared/papers/phrase-pair-fragmentation-nmt.txt`` (Sec. 4: the in-domain data is
split by documents; we keep document ids where the input has them).

Formats:
* Moses-style file pair: ``SRC`` and ``TGT``, one sentence per line, same number of lines;
* TSV: ``source<TAB>target[<TAB>doc_id]`` (one file);
* JSONL: one object per line with ``source``/``src``, ``target``/``tgt`` and optionally
  ``doc_id``/``doc``/``document``.

Tokenisation uses sacremoses (the Moses tokenizer, with ``escape=False``) unless the input is
declared pre-tokenised (whitespace split). Empty lines and mismatched line counts raise
:class:`~privnlp.core.errors.MalformedInput` naming the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from privnlp.core.errors import InvalidArgument, MalformedInput, check_range
from privnlp.core.rng import as_numpy

__all__ = ["ParallelText", "read_parallel", "tokenize_lines", "from_corpus", "detect_format"]


@dataclass(frozen=True)
class ParallelText:
    """Tokenised parallel text: per sentence a tuple of source / target tokens, plus doc ids.

    Attributes:
        source: per sentence, the source tokens (at least one).
        target: per sentence, the target tokens (at least one).
        doc_ids: per sentence, its document id (``None`` = sentences are independent).

    Raises:
        MalformedInput: the sides have different numbers of sentences, ``doc_ids`` has another length, or a
            sentence is empty.
    """

    source: tuple[tuple[str, ...], ...]
    target: tuple[tuple[str, ...], ...]
    doc_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.source) != len(self.target):
            raise MalformedInput(
                f"source and target must have the same number of sentences; got "
                f"{len(self.source)} source vs {len(self.target)} target"
            )
        if self.doc_ids is not None and len(self.doc_ids) != len(self.source):
            raise MalformedInput(
                f"doc_ids must have one id per sentence; got {len(self.doc_ids)} ids for "
                f"{len(self.source)} sentences"
            )
        for side, sents in (("source", self.source), ("target", self.target)):
            for i, s in enumerate(sents):
                if len(s) == 0:
                    raise MalformedInput(
                        f"{side} sentence {i + 1} is empty; every sentence needs at least one token"
                    )

    def __len__(self) -> int:
        return len(self.source)

    @classmethod
    def from_strings(
        cls,
        source: Sequence[str],
        target: Sequence[str],
        doc_ids: Sequence[str] | None = None,
        *,
        tokenize: bool = False,
        src_lang: str = "en",
        tgt_lang: str = "en",
    ) -> ParallelText:
        """Build from sentence strings (whitespace split unless ``tokenize``)."""
        if len(source) != len(target):
            raise MalformedInput(
                f"source and target must have the same number of sentences; got "
                f"{len(source)} source vs {len(target)} target"
            )
        src = tokenize_lines(source, lang=src_lang, tokenize=tokenize, name="source")
        tgt = tokenize_lines(target, lang=tgt_lang, tokenize=tokenize, name="target")
        return cls(src, tgt, tuple(doc_ids) if doc_ids is not None else None)

    def subset(self, indices: Sequence[int]) -> ParallelText:
        idx = [int(i) for i in indices]
        return ParallelText(
            tuple(self.source[i] for i in idx),
            tuple(self.target[i] for i in idx),
            tuple(self.doc_ids[i] for i in idx) if self.doc_ids is not None else None,
        )

    def split_by_document(
        self, test_fraction: float, *, rng
    ) -> tuple[ParallelText, ParallelText, list[int], list[int]]:
        """Split into (train, test) keeping documents together (sentence-level if no doc ids)."""

        check_range(
            "test_fraction", test_fraction, 0.0, 1.0, lo_inclusive=False, hi_inclusive=False
        )
        g = as_numpy(rng)
        docs = (
            list(self.doc_ids) if self.doc_ids is not None else [str(i) for i in range(len(self))]
        )
        uniq = sorted(set(docs))
        g.shuffle(uniq)
        n_test = max(1, int(round(test_fraction * len(uniq))))
        test_docs = set(uniq[:n_test])
        test_idx = [i for i, d in enumerate(docs) if d in test_docs]
        train_idx = [i for i, d in enumerate(docs) if d not in test_docs]
        return self.subset(train_idx), self.subset(test_idx), train_idx, test_idx


def from_corpus(corpus) -> ParallelText:
    """Convert a :class:`privnlp.data.parallel.ParallelCorpus` (already tokenised).

    Args:
        corpus: an object with whitespace-tokenised ``source`` / ``target`` strings and optional ``doc_ids``.

    Returns:
        The tokenised parallel text.

    Raises:
        MalformedInput: the sides differ in length or a sentence is empty.
    """
    return ParallelText(
        tuple(tuple(s.split()) for s in corpus.source),
        tuple(tuple(t.split()) for t in corpus.target),
        tuple(corpus.doc_ids) if corpus.doc_ids else None,
    )


_TOKENIZERS: dict[str, object] = {}


def tokenize_lines(
    lines: Iterable[str], *, lang: str = "en", tokenize: bool = True, name: str = "input"
) -> tuple[tuple[str, ...], ...]:
    """Tokenise with sacremoses (Moses tokenizer, no HTML escaping) or by whitespace."""
    tok = None
    if tokenize:
        from sacremoses import MosesTokenizer

        tok = _TOKENIZERS.get(lang)
        if tok is None:
            tok = _TOKENIZERS[lang] = MosesTokenizer(lang=lang)
    out = []
    for i, line in enumerate(lines):
        line = line.rstrip("\n").rstrip("\r")
        toks = tuple(tok.tokenize(line, escape=False)) if tok is not None else tuple(line.split())
        if not toks:
            raise MalformedInput(
                f"{name} line {i + 1} is empty; remove empty lines (every sentence needs a token)"
            )
        out.append(toks)
    return tuple(out)


def detect_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    return {".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}.get(suffix, "moses")


def _read_lines(path: Path) -> list[str]:
    if not path.exists():
        raise MalformedInput(f"input file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise MalformedInput(f"{str(path)!r} is not valid UTF-8 ({e})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_parallel(
    src: str | Path,
    tgt: str | Path | None = None,
    *,
    fmt: str | None = None,
    tokenize: bool = True,
    src_lang: str = "en",
    tgt_lang: str = "en",
) -> ParallelText:
    """Read a parallel corpus (Moses pair ``src``+``tgt``, or one TSV / JSONL file ``src``).

    Args:
        src: the source file (Moses), or the single TSV (``source<TAB>target[<TAB>doc_id]``) / JSONL
            (``{"source", "target", "doc_id"}``) file.
        tgt: the target file of a Moses pair (``None`` for TSV / JSONL).
        fmt: ``"moses"``, ``"tsv"`` or ``"jsonl"`` (default: from the suffix, or ``"moses"`` when ``tgt`` is given).
        tokenize: tokenise with the Moses tokenizer (sacremoses) instead of splitting on whitespace.
        src_lang: the source language code for the tokenizer.
        tgt_lang: the target language code for the tokenizer.

    Returns:
        The tokenised parallel text (with doc ids when the file has them).

    Raises:
        InvalidArgument: unknown ``fmt``, or a Moses pair without ``tgt``.
        MalformedInput: a missing or non-UTF-8 file, mismatched line counts, a malformed line, an empty
            sentence, doc ids on only some lines, or no sentences.
    """
    src = Path(src)
    fmt = fmt or (detect_format(src) if tgt is None else "moses")
    if fmt not in ("moses", "tsv", "jsonl"):
        raise InvalidArgument(f"fmt must be one of 'moses', 'tsv', 'jsonl'; got {fmt!r}")
    doc_ids: list[str] | None = None
    if fmt == "moses":
        if tgt is None:
            raise InvalidArgument(
                "tgt is required for a Moses-style file pair (or pass a .tsv/.jsonl file)"
            )
        s_lines, t_lines = _read_lines(src), _read_lines(Path(tgt))
        if len(s_lines) != len(t_lines):
            raise MalformedInput(
                f"mismatched line counts: {str(src)!r} has {len(s_lines)} lines but "
                f"{str(tgt)!r} has {len(t_lines)}; a Moses file pair needs one sentence per line on both sides"
            )
        s_name, t_name = str(src), str(tgt)
    elif fmt == "tsv":
        s_lines, t_lines, docs = [], [], []
        for i, line in enumerate(_read_lines(src)):
            parts = line.rstrip("\r").split("\t")
            if len(parts) not in (2, 3):
                raise MalformedInput(
                    f"{str(src)!r} line {i + 1}: expected 'source<TAB>target[<TAB>doc_id]', "
                    f"got {len(parts)} tab-separated fields"
                )
            s_lines.append(parts[0])
            t_lines.append(parts[1])
            docs.append(parts[2] if len(parts) == 3 else None)
        if any(d is not None for d in docs):
            if any(d is None for d in docs):
                raise MalformedInput(
                    f"{str(src)!r}: either every line or no line has a doc_id column"
                )
            doc_ids = docs  # type: ignore[assignment]
        s_name = t_name = str(src)
    else:
        s_lines, t_lines, docs = [], [], []
        for i, line in enumerate(_read_lines(src)):
            if not line.strip():
                raise MalformedInput(f"{str(src)!r} line {i + 1} is empty; remove empty lines")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise MalformedInput(
                    f"{str(src)!r} line {i + 1} is not valid JSON ({e.msg})"
                ) from None
            s = obj.get("source", obj.get("src")) if isinstance(obj, dict) else None
            t = obj.get("target", obj.get("tgt")) if isinstance(obj, dict) else None
            if not isinstance(s, str) or not isinstance(t, str):
                raise MalformedInput(
                    f"{str(src)!r} line {i + 1}: expected an object with string fields "
                    "'source'/'src' and 'target'/'tgt'"
                )
            s_lines.append(s)
            t_lines.append(t)
            d = obj.get("doc_id", obj.get("doc", obj.get("document")))
            docs.append(None if d is None else str(d))
        if any(d is not None for d in docs):
            if any(d is None for d in docs):
                raise MalformedInput(f"{str(src)!r}: either every line or no line has a doc_id")
            doc_ids = docs  # type: ignore[assignment]
        s_name = t_name = str(src)
    if not s_lines:
        raise MalformedInput(f"{str(src)!r} contains no sentences")
    s_tok = tokenize_lines(s_lines, lang=src_lang, tokenize=tokenize, name=f"{s_name} (source)")
    t_tok = tokenize_lines(t_lines, lang=tgt_lang, tokenize=tokenize, name=f"{t_name} (target)")
    return ParallelText(s_tok, t_tok, tuple(doc_ids) if doc_ids is not None else None)
