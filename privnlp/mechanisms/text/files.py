"""Streaming file sanitization (txt / JSONL / CSV) with atomic output and a JSON sidecar.

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` (each word of each record is perturbed
independently with Algorithm 1 / 3 or a baseline). Record order and count are preserved; the
output is written to a temp file in the target folder and renamed only when every record went
through, so a bad record (not UTF-8, not JSON, missing field) leaves no partial output.

Corpus scale: records are read and written as a stream in chunks of ``chunk_records`` (bounded
memory), with a byte progress bar. ``num_proc=N`` sanitizes chunks in N forked worker processes
(at most 2N chunks in flight, results written in order). With ``seed``, record ``i`` (0-based,
counting records that carry text) draws its noise from ``default_rng([seed, i])``, so the output is
identical for every N and chunk size, and equal to ``mechanism.as_map_function(seed=seed)`` under
``datasets.map(batched=True, with_indices=True, num_proc=N)``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privnlp.core.errors import InvalidArgument, MalformedInput, check_range
from privnlp.core.report import atomic_write_text
from privnlp.core.rng import noise_is_seeded

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
    #: the most frequent out-of-vocabulary units ``(unit, count, kind)``, for the data owner (printed
    #: by the CLI, never written to the sidecar: they are words of the private input)
    oov_top: tuple = ()
    #: the worker processes that ran (``num_proc="auto"`` resolved)
    num_proc: int = 1

    @property
    def oov_rate(self) -> float:
        """Out-of-vocabulary units / selected units (perturbed + OOV)."""
        d = self.perturbed + self.oov
        return self.oov / d if d else 0.0


def sidecar_path(output: str | os.PathLike) -> Path:
    return Path(str(output) + ".privnlp.json")


def _guess_fmt(path: Path) -> str:
    suf = path.suffix.lower()
    return {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}.get(suf, "txt")


def _lines(fh: io.TextIOBase, path: Path, line0: int = 0) -> Iterator[tuple[int, str]]:
    """``(line number, line with its end)``; a line ends at LF only (CR, CRLF kept in the line)."""
    n = line0
    while True:
        try:
            line = fh.readline()
        except UnicodeDecodeError as e:
            raise MalformedInput(
                f"{path}: not valid UTF-8 after line {n} ({e.reason} at byte {e.start})"
            ) from e
        if not line:
            return
        n += 1
        yield n, line


_MECH: Any = (
    None  # the mechanism of forked workers (inherited, never pickled: vectors may be a memory map)
)


def _init_worker(scan_threads: int = 1) -> None:
    """A forked worker's first step: one intra-op thread in the libraries the parent already loaded.
    torch's OpenMP pool does not survive fork: a worker whose parent had run a torch matrix product
    (the exact index's prescreen) hung in its first ``torch.mm`` (tests/text/test_real_text.py).
    The batched IVF scan runs on ``scan_threads`` threads in each worker (the cores divided among
    the workers: two workers of one thread each beat one process of two threads, whose per-list
    numpy calls contend for the GIL)."""
    torch = sys.modules.get("torch")  # never imported here: only a parent that loaded it pays
    if torch is not None:
        torch.set_num_threads(1)
    faiss = sys.modules.get("faiss")
    if faiss is not None:
        faiss.omp_set_num_threads(1)
    nn = _MECH.__dict__.get("_nn_index") if _MECH is not None else None
    if nn is not None and hasattr(nn, "num_threads"):
        nn.num_threads = scan_threads  # the worker's copy (fork); the parent's index is unchanged


#: ``num_proc="auto"``: worker processes (one per usable core, at most this many) for an input of
#: at least :data:`AUTO_PROC_BYTES` on the batched approximate index; else one process
AUTO_PROC_MAX = 4
AUTO_PROC_BYTES = 256 << 10


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def auto_num_proc(index_kind: str, size_bytes: int, rng: Any = None) -> int:
    """The ``num_proc`` that ``"auto"`` resolves to (see :data:`AUTO_PROC_MAX`). A caller's own
    ``rng`` stays in this process (``num_proc > 1`` needs OS entropy or ``seed``); off Linux, 1."""
    if rng is not None or index_kind != "faiss" or size_bytes < AUTO_PROC_BYTES:
        return 1
    if not sys.platform.startswith("linux"):  # the workers are forked: only where fork is the norm
        return 1
    return min(usable_cores(), AUTO_PROC_MAX)


def _work(args: tuple) -> tuple[list[str], list[tuple], list[str]]:
    texts, start, seed = args
    if seed is None:
        res = _MECH.sanitize_many(texts)  # OS entropy in each worker
    else:
        res = _MECH.sanitize_many(texts, seed=seed, start=start)
    return (
        [r.text for r in res],
        [(r.n_words, r.n_perturbed, r.n_changed, r.n_oov, r.n_kept) for r in res],
        [w for r in res for w in r.oov_words],
    )


def oov_kind(w: str) -> str:
    """A rough kind of an out-of-vocabulary unit, for the OOV report."""
    if any(c.isdigit() for c in w):
        return "number / code"
    if not w.isascii():
        return "non-ASCII (another script or accents)"
    if len(w) > 1 and w.isupper():
        return "acronym"
    if w[:1].isupper():
        return "capitalised (a name?)"
    return "rare word / typo / jargon"


def oov_report(oov: Counter, n: int = 10) -> tuple:
    return tuple((w, c, oov_kind(w)) for w, c in oov.most_common(n))


def sanitize_file(
    input: str | os.PathLike,
    output: str | os.PathLike,
    mechanism: Any,
    *,
    rng: Any = None,
    fmt: str | None = None,
    field: str = "text",
    chunk_records: int = 512,
    progress: bool = True,
    seed: int | None = None,
    num_proc: int | str = 1,
    ledger: Any = None,
    target_epsilon: float | None = None,
) -> FileReport:
    """Sanitize ``input`` into ``output`` with ``mechanism`` (a :class:`WordMetricDP`).

    ``fmt``: ``txt`` (one record per line), ``jsonl`` (``field`` of each object) or ``csv``
    (column ``field``); guessed from the suffix if ``None``. The sidecar ``OUTPUT.privnlp.json``
    holds the per-word and per-record claims, the parameters, the vectors (source, hash), the
    counts and the OOV rate. Randomness: ``seed`` (per-record generators, reproducible for every
    ``num_proc``), else ``rng`` (``None`` = OS entropy; ``num_proc > 1`` needs ``rng=None``).

    Args:
        input / output: the file to read and the file to write (atomically, with its sidecar).
        mechanism: the word perturbation mechanism (:class:`WordMetricDP`).
        rng: the noise source (``None``: OS entropy; a seed / Generator: seeded simulation).
        fmt: ``txt``, ``jsonl`` or ``csv`` (``None``: from the suffix).
        field: the JSONL key / CSV column holding the text.
        chunk_records: records per chunk (memory / progress granularity).
        progress: show a progress bar with words/s.
        seed: per-record generators derived from this seed (reproducible for any ``num_proc``).
        num_proc: worker processes on this machine, or ``"auto"`` (:func:`auto_num_proc`: one per
            usable core, at most :data:`AUTO_PROC_MAX`, for an input of >= 256 KiB on the faiss
            index; else 1). The output is the same for every value (with ``seed``).
        ledger: a :class:`privnlp.accounting.DPLedger` charged with one ``MetricDPRun`` (this pass:
            per-word epsilon, the metric, the most words of one record); the budget is checked before
            anything is created, the pass recorded once the output is in place.
        target_epsilon: the ledger's per-word budget (``None``: no budget); needs ``ledger``.
    """
    src, dst = Path(input), Path(output)
    if not src.is_file():
        raise InvalidArgument(f"input {str(src)!r} is not a file")
    fmt = fmt or _guess_fmt(src)
    if fmt not in FORMATS:
        raise InvalidArgument(f"fmt must be one of {FORMATS}; got {fmt!r}")
    if src.resolve() == dst.resolve():
        raise InvalidArgument("output must differ from input")
    auto_proc = num_proc == "auto"
    if not auto_proc:
        if isinstance(num_proc, str):
            raise InvalidArgument(
                f"num_proc must be 'auto' or an integer in [1, 1024]; got {num_proc!r}"
            )
        check_range("num_proc", num_proc, 1, 1024, integer=True)
    check_range("chunk_records", chunk_records, 1, 1 << 24, integer=True)
    if seed is not None:
        check_range("seed", seed, 0, 2**63 - 1, integer=True)
        if rng is not None:
            raise InvalidArgument("pass either rng or seed, not both")
    elif not auto_proc and num_proc > 1 and rng is not None:
        raise InvalidArgument(
            "num_proc > 1 needs seed=... (reproducible) or rng=None (OS entropy per worker)"
        )
    if target_epsilon is not None and ledger is None:
        raise InvalidArgument("target_epsilon needs ledger=DPLedger()")
    if ledger is not None:  # refuse before any work (PrivacyBudgetExceeded)
        ledger.check(_metric_run(mechanism, 1), target_epsilon)
    if src.stat().st_size == 0:
        raise MalformedInput(f"{src}: the input file is empty")
    with open(src, "rb") as fh:
        if b"\x00" in fh.read(8192):
            raise MalformedInput(
                f"{src}: looks like a binary file (NUL bytes in the first 8 KiB); expected UTF-8 text"
            )
    g = None if seed is not None else (rng if rng is not None and num_proc == 1 else None)
    seeded = seed is not None or noise_is_seeded(g)
    mechanism.resolve_embeddings()  # fail early (bad embeddings) before creating anything
    # index="auto": exact for small inputs, else an approximate index calibrated to the recall target
    # (about 6 bytes per word of English text; only the speed and recall depend on the estimate)
    expected_words = src.stat().st_size // 6
    kind = mechanism.plan_index(expected_words)
    if auto_proc:
        num_proc = auto_num_proc(kind, src.stat().st_size, rng)
    made = make_parent(dst)  # removed again if the run fails (no leftover output folder)
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    bom = has_bom(src)
    counts = dict(records=0, words=0, perturbed=0, changed=0, oov=0, kept=0, max_words_per_record=0)
    oov: Counter = Counter()
    pool = None
    try:
        from tqdm.auto import tqdm

        t0 = time.perf_counter()
        bar = tqdm(
            total=src.stat().st_size,
            unit="B",
            unit_scale=True,
            desc="sanitize",
            disable=not progress,
        )
        if num_proc > 1:
            global _MECH
            _MECH = mechanism
            pool = mp.get_context("fork").Pool(
                num_proc,
                initializer=_init_worker,
                initargs=(max(1, usable_cores() // num_proc),),
            )

        def run_chunks(chunks: Iterator[list[str]]) -> Iterator[list[str]]:
            """Sanitized texts chunk by chunk, in order (bounded look-ahead with workers)."""
            start = 0
            if pool is None:

                def one(texts: list[str], start: int) -> list:
                    if seed is not None:
                        return mechanism.sanitize_many(texts, seed=seed, start=start)
                    return mechanism.sanitize_many(texts, rng=g)

                def finish(res: list) -> list[str]:
                    _account(
                        counts,
                        [(r.n_words, r.n_perturbed, r.n_changed, r.n_oov, r.n_kept) for r in res],
                    )
                    oov.update(w for r in res for w in r.oov_words)
                    _rate_postfix(bar, counts, t0)
                    return [r.text for r in res]

                for texts in chunks:
                    res = one(texts, start)
                    start += len(texts)
                    yield finish(res)
                return
            pending: deque = deque()
            for texts in chunks:
                pending.append(pool.apply_async(_work, ((texts, start, seed),)))
                start += len(texts)
                if len(pending) >= 2 * num_proc:
                    out, st, ow = pending.popleft().get()
                    oov.update(ow)
                    _account(counts, st)
                    _rate_postfix(bar, counts, t0)
                    yield out
            while pending:
                out, st, ow = pending.popleft().get()
                oov.update(ow)
                _account(counts, st)
                _rate_postfix(bar, counts, t0)
                yield out

        with (
            # newline="\n": a record ends at LF only (CRLF kept; a lone CR, a form feed or U+2028 stays
            # inside its record); a UTF-8 BOM is skipped for parsing and written back
            open(src, encoding="utf-8", errors="strict", newline="\n") as fin,
            os.fdopen(fd, "w", encoding="utf-8", newline="") as fout,
        ):
            if bom:
                fin.read(1)
                fout.write("\ufeff")
            runner = RUNNERS[fmt]
            runner(fin, fout, src, run_chunks, chunk_records, bar, field)
        bar.close()
        if counts["records"] == 0:
            raise MalformedInput(f"{src}: no records to sanitize")
        side = sidecar_path(dst)
        meta = sidecar_meta(src, dst, fmt, field, mechanism, seed, rng, seeded, counts)
        honour_umask(tmp)
        os.replace(tmp, dst)
        atomic_write_text(side, json.dumps(meta, indent=2, default=str) + "\n")
        honour_umask(side)
        if ledger is not None:
            ledger.add(_metric_run(mechanism, max(1, counts["max_words_per_record"])))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        remove_made(made)
        raise
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    return FileReport(
        str(src), str(dst), str(side), fmt, **counts, oov_top=oov_report(oov), num_proc=num_proc
    )


def _metric_run(mechanism: Any, words: int) -> Any:
    """One pass of ``mechanism`` over a dataset as a ledger event."""
    from privnlp.accounting import MetricDPRun  # lazy package: only a caller holding a ledger pays

    return MetricDPRun(
        epsilon=float(mechanism.epsilon), metric=mechanism.metric_name, words=int(words)
    )


def has_bom(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(3) == b"\xef\xbb\xbf"


def make_parent(dst: Path) -> list[Path]:
    """Create ``dst``'s missing parent folders; returns the ones created (deepest last)."""
    missing = []
    p = dst.parent
    while not p.exists():
        missing.append(p)
        p = p.parent
    dst.parent.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def remove_made(made: list[Path]) -> None:
    """Remove the folders :func:`make_parent` created, if still empty (deepest first)."""
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            break


def honour_umask(path: str | os.PathLike) -> None:
    """``mkstemp`` creates files with mode 0600; give the output the mode a plain ``open`` would
    (0666 minus the process umask)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def sidecar_meta(
    src: Path,
    dst: Path,
    fmt: str,
    field: str,
    mechanism: Any,
    seed: int | None,
    rng: Any,
    seeded: bool,
    counts: dict,
) -> dict[str, Any]:
    """The sidecar of a sanitized file (one writer for the single-process and the engine runs)."""
    emb = mechanism.resolve_embeddings()
    sel = counts["perturbed"] + counts["oov"]
    return {
        "input": str(src),
        "output": str(dst),
        "format": fmt,
        "field": field if fmt != "txt" else None,
        "mechanism": mechanism.name,
        "params": mechanism.params(),
        "seed": seed,
        "noise": _noise_note(seed, rng),
        "embeddings": {
            "source": emb.source,
            "n_words": len(emb),
            "dim": emb.dim,
            "sha256_16": emb.fingerprint(),
        },
        "index": mechanism.index_report(),
        "oov_policy": mechanism.oov,
        "oov_rate": counts["oov"] / sel if sel else 0.0,
        "claim_per_word": _seeded(mechanism.claim(), seeded).to_dict(),
        "claim_per_record": _seeded(
            mechanism.claim(n_words=counts["max_words_per_record"]), seeded
        ).to_dict(),
        "counts": counts,
    }


RUNNERS: dict[str, Callable] = {}


def _noise_note(seed: int | None, rng: Any) -> str:
    """The sidecar's ``noise`` entry: seeded whenever the noise is reproducible by a seed holder."""
    if seed is not None:
        return "seeded (reproducible simulation: per-record generators default_rng([seed, i]))"
    if noise_is_seeded(rng):
        return f"seeded (reproducible simulation: rng={type(rng).__name__} given by the caller)"
    return "OS entropy (secure)"


def _seeded(claim: Any, seeded: Any) -> Any:
    """The claim with the "noise seeded" note when the noise was seeded (issue #15's rule);
    ``seeded``: a bool, or a seed (``None`` = not seeded) for older callers."""
    if seeded is None or seeded is False:
        return claim
    return dataclasses.replace(claim, noise_seeded=True)


def _rate_postfix(bar: Any, counts: dict, t0: float) -> None:
    """words/s (whole run so far, loading excluded) on the progress bar."""
    dt = time.perf_counter() - t0
    if dt > 0 and not bar.disable:
        bar.set_postfix_str(f"{counts['words'] / dt:,.0f} words/s", refresh=False)


def _account(counts: dict, res: list) -> None:
    for n_words, n_pert, n_ch, n_oov, n_kept in res:
        counts["records"] += 1
        counts["words"] += n_words
        counts["perturbed"] += n_pert
        counts["changed"] += n_ch
        counts["oov"] += n_oov
        counts["kept"] += n_kept
        counts["max_words_per_record"] = max(counts["max_words_per_record"], n_pert + n_oov)


def _chunked(items: Iterator[Any], chunk: int) -> Iterator[list[Any]]:
    buf: list[Any] = []
    for it in items:
        buf.append(it)
        if len(buf) >= chunk:
            yield buf
            buf = []
    if buf:
        yield buf


def _split_eol(line: str) -> tuple[str, str]:
    body = line.rstrip("\r\n")
    return body, line[len(body) :]


def _run_txt(fin, fout, src, run_chunks: Callable, chunk, bar, field, line0=0, header=True) -> None:
    def records() -> Iterator[tuple[str, str]]:
        for _, line in _lines(fin, src, line0):
            bar.update(len(line.encode("utf-8")))
            yield _split_eol(line)

    recs = _chunked(records(), chunk)
    held: list = []

    def texts() -> Iterator[list[str]]:
        for c in recs:
            held.append(c)
            yield [b for b, _ in c]

    for out in run_chunks(texts()):
        c = held.pop(0)
        fout.write("".join(t + nl for t, (_, nl) in zip(out, c)))


def _run_jsonl(
    fin, fout, src, run_chunks: Callable, chunk, bar, field, line0=0, header=True
) -> None:
    def records() -> Iterator[Any]:
        for n, line in _lines(fin, src, line0):
            bar.update(len(line.encode("utf-8")))
            body, nl = _split_eol(line)
            if not body.strip():
                yield (None, line)
                continue
            try:
                rec = json.loads(body)
            except json.JSONDecodeError as e:
                raise MalformedInput(
                    f"{src}: line {n} is not JSON ({e.msg}); is this a JSONL file? "
                    "use --format txt/csv for other files"
                ) from e
            if not isinstance(rec, dict):
                raise MalformedInput(
                    f"{src}: line {n} is a JSON {type(rec).__name__}, expected an object with field {field!r}"
                )
            if field not in rec:
                raise MalformedInput(
                    f"{src}: line {n} has no field {field!r} (fields: {sorted(rec)[:10]}); pick one with --field"
                )
            if not isinstance(rec[field], str):
                raise MalformedInput(
                    f"{src}: line {n}: field {field!r} must be a string; got {type(rec[field]).__name__}"
                )
            yield (rec, nl)

    recs = _chunked(records(), chunk)
    held: list = []

    def texts() -> Iterator[list[str]]:
        for c in recs:
            held.append(c)
            yield [r[field] for r, _ in c if r is not None]

    for out in run_chunks(texts()):
        c = held.pop(0)
        it = iter(out)
        lines = []
        for r, nl in c:
            if r is None:
                lines.append(nl)  # a blank line is copied as it was
                continue
            r = dict(r)
            r[field] = next(it)
            lines.append(json.dumps(r, ensure_ascii=False) + nl)  # the input's line end (CRLF kept)
        fout.write("".join(lines))


def _run_csv(fin, fout, src, run_chunks: Callable, chunk, bar, field, line0=0, header=True) -> None:
    first = fin.readline()  # the header row (a header never holds a quoted line break here)
    eol = _split_eol(first)[1] or "\n"
    try:
        names = next(csv.reader([first]))
    except (StopIteration, csv.Error) as e:
        raise MalformedInput(f"{src}: CSV error in the header: {e}") from e
    if not names or field not in names:
        raise MalformedInput(
            f"{src}: CSV has no column {field!r} (columns: {names}); pick one with --field"
        )
    reader = csv.DictReader(fin, fieldnames=names)
    writer = csv.DictWriter(fout, fieldnames=names, lineterminator=eol)  # the input's line end
    if header:
        writer.writeheader()

    def records() -> Iterator[dict]:
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except UnicodeDecodeError as e:
                raise MalformedInput(
                    f"{src}: not valid UTF-8 near line {line0 + 1 + reader.line_num} ({e.reason})"
                ) from e
            except csv.Error as e:
                raise MalformedInput(
                    f"{src}: CSV error near line {line0 + 1 + reader.line_num}: {e}"
                ) from e
            if None in row:
                raise MalformedInput(
                    f"{src}: line {line0 + 1 + reader.line_num} has more cells than the header"
                )
            bar.update(sum(len(str(v)) + 1 for v in row.values()))
            yield row

    recs = _chunked(records(), chunk)
    held: list = []

    def texts() -> Iterator[list[str]]:
        for c in recs:
            held.append(c)
            yield [r[field] or "" for r in c]

    for out in run_chunks(texts()):
        c = held.pop(0)
        for r, t in zip(c, out):
            r[field] = t
            writer.writerow(r)


RUNNERS.update(txt=_run_txt, jsonl=_run_jsonl, csv=_run_csv)
