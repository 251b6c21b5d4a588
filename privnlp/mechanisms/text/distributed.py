"""Sanitize a corpus, or count a DP vocabulary, on a Dask cluster (issue #31 item 4).

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` (each word is perturbed independently,
so records can be processed anywhere) and ``../shared/papers/dp-bert-and-dp-wordpiece.txt``
(Sec. 3.2: the DP vocabulary is a contribution-bounded histogram plus one noisy threshold, a
map-reduce). The engine is Dask ``distributed`` (``pip install 'privnlp[distributed]'``), not a
home-made scheduler: the coordinator cuts the input into shards of whole records (byte ranges that
end at a record end), each shard is one Dask task, and Dask retries a shard whose worker died.

Sanitize (:func:`sanitize_file_dask`):

* a shard is a run of whole *chunks* of the single-process run (``chunk_records`` records), and a
  worker sanitizes it with the same chunking, so every nearest-neighbour batch is the one the
  single-process run queries;
* noise: with ``seed``, record ``i`` (0-based, counting records that carry text) draws from
  ``default_rng([seed, i])``, exactly as :func:`~privnlp.mechanisms.text.files.sanitize_file` does,
  so the output is byte-identical to ``privnlp sanitize --seed`` (a reproducible simulation:
  "noise seeded"). Without a seed every worker draws from its own OS entropy (secure; no seed ever
  crosses the process boundary);
* the index is planned once on the coordinator (``index="auto"``: the same choice and calibrated
  ``nprobe`` as the single-process run) and the workers load the trained index from the on-disk
  cache (a cluster of several machines needs the cache folder on shared storage, or the workers
  train the same seeded index themselves);
* each shard is written to a temporary part file and renamed only when complete; the coordinator
  concatenates the parts in order into a temporary output, renames it, and writes one sidecar from
  the counts of the shards that were written. A shard whose worker dies is retried by Dask (up to
  ``distributed.scheduler.allowed-failures``); if it keeps failing the run raises and removes every
  part: no output, no sidecar, never half a file.

DP vocabulary (:func:`build_vocab_dask`): the map (one task per shard) cuts its documents into
words and bounds each document to ``k`` distinct words (sampled with ``default_rng([seed, 0, i])``
for document ``i`` when seeded, else OS entropy), and returns the shard's contributor counts; the
reduce sums them and draws the noisy threshold once on the coordinator
(:meth:`DPWordPiece.build_from_counts`). The result equals ``DPWordPiece.build(texts, seed=seed)``.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import pickle
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, MalformedInput, MissingDependency, check_range
from privnlp.core.report import atomic_write_text
from privnlp.core.rng import check_noise_seed_allowed, secure_numpy
from privnlp.data import loaders
from privnlp.data.loaders import TXT_UNIT_RULES
from privnlp.mechanisms.vocab.histogram import WordSplitter, bound_contributions

from .files import (
    FORMATS,
    RUNNERS,
    FileReport,
    _account,
    _guess_fmt,
    has_bom,
    honour_umask,
    make_parent,
    oov_report,
    remove_made,
    sidecar_meta,
    sidecar_path,
)

__all__ = ["Shard", "plan_shards", "sanitize_file_dask", "build_vocab_dask"]


@dataclass(frozen=True)
class Shard:
    """A byte range of the input holding whole records.

    Attributes:
        index: the shard's position.
        start, end: byte offsets in the file (``end`` exclusive), at record ends.
        first_line: the number of lines before the shard (for error messages).
        first_record: the number of text records before the shard (the seed index of its first).
        records: the number of records in the shard (lines of txt/JSONL incl. blank ones, CSV rows).
    """

    index: int
    start: int
    end: int
    first_line: int
    first_record: int
    records: int


def _client_or_cluster(client: Any, n_workers: int) -> tuple[Any, Any]:
    try:
        from distributed import Client, LocalCluster  # optional: privnlp[distributed]
    except ImportError as e:
        raise MissingDependency("dask[distributed]", "distributed") from e
    if client is not None:
        return client, None
    cluster = LocalCluster(
        n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None
    )
    return Client(cluster), cluster


def plan_shards(
    path: str | os.PathLike,
    fmt: str,
    *,
    records_per_shard: int,
    counts_text: str = "sanitize",
) -> tuple[list[Shard], int]:
    """Cut ``path`` into shards of ``records_per_shard`` records, at record ends only.

    A record is a line (ends at LF; CRLF kept) of a txt / JSONL file or a row of a CSV file (a line
    break inside a quoted field stays inside its row). ``counts_text``: which records carry a seed
    index: ``"sanitize"`` (every txt line; non-blank JSONL lines; every non-empty CSV row, as
    :func:`~privnlp.mechanisms.text.files.sanitize_file` counts) or ``"vocab"`` (non-blank
    lines / rows, as :func:`~privnlp.data.loaders.load_texts` keeps them).

    Returns:
        The shards and the byte offset of the first record (after a BOM and a CSV header).
    """
    check_range("records_per_shard", records_per_shard, 1, 1 << 40, integer=True)
    p = Path(path)
    with open(p, "rb") as fh:
        data_start = 3 if fh.read(3) == b"\xef\xbb\xbf" else 0
        fh.seek(data_start)
        shards: list[Shard] = []
        pos = data_start
        line = 0
        if fmt == "csv":  # the header row is not a record
            hdr = fh.readline()
            pos += len(hdr)
            line += 1
        body0 = pos
        start, first_line, first_rec = pos, line, 0
        n_rec = n_text = 0
        in_quotes = False
        for raw in fh:
            line += 1
            pos += len(raw)
            if fmt == "csv":
                in_quotes ^= raw.count(b'"') % 2 == 1
                if in_quotes:
                    continue  # the row goes on on the next line
                blank = not raw.strip(b"\r\n")
                if blank:  # csv.DictReader skips an empty row: not a record
                    continue
                n_rec += 1
                n_text += 1
            else:
                blank = not raw.strip()
                n_rec += 1
                if counts_text == "vocab" or fmt == "jsonl":
                    n_text += not blank
                else:
                    n_text += 1
            if n_rec == records_per_shard:
                shards.append(Shard(len(shards), start, pos, first_line, first_rec, n_rec))
                start, first_line, first_rec = pos, line, first_rec + n_text
                n_rec = n_text = 0
        if n_rec or (pos > start and not shards):
            shards.append(Shard(len(shards), start, pos, first_line, first_rec, n_rec))
        elif pos > start:  # trailing blank CSV lines: glue them to the last shard
            last = shards[-1]
            shards[-1] = Shard(
                last.index, last.start, pos, last.first_line, last.first_record, last.records
            )
    return shards, body0


def _maybe_fault(spec: str | None, shard: int, part_tmp: str) -> None:
    """Testing hook (``_fault="<shard>:<marker file>"`` of :func:`sanitize_file_dask`): the worker that
    first runs that shard writes half a part and exits abruptly, as a killed worker does;
    ``"<shard>:always"``: every time."""
    if not spec:
        return
    want, _, marker = spec.partition(":")
    if int(want) != shard:
        return
    if marker != "always":
        if os.path.exists(marker):
            return
        Path(marker).write_text("killed once\n")
    with open(part_tmp, "a", encoding="utf-8") as f:  # half a part, never renamed
        f.write("HALF-WRITTEN")
    os._exit(17)  # an abrupt death: no exception, no cleanup (as a killed worker)


_WORKER_MECH: dict[str, Any] = {}  # per worker process: the mechanism, built once


def _one_thread_scan(mech: Any) -> Any:
    """The worker's mechanism with its neighbour index built (from the cache the driver filled) and scanning on one
    thread: a Dask worker runs one task per worker thread, so a task's own scan threads would oversubscribe the cores
    (the index's default of 2 put 4 scan threads on 2 cores under the default two one-thread workers)."""
    nn = mech._nn() if hasattr(mech, "_nn") else None
    if nn is not None and hasattr(nn, "num_threads"):
        nn.num_threads = 1
    return mech


def _sanitize_shard(
    path: str,
    fmt: str,
    field: str,
    header: bytes,
    shard: Shard,
    mech_blob: bytes,
    mech_key: str,
    seed: int | None,
    chunk_records: int,
    parts_dir: str,
    fault: str | None = None,
) -> tuple[str, list[int], dict]:
    mech = _WORKER_MECH.get(mech_key)
    if mech is None:
        mech = _one_thread_scan(pickle.loads(mech_blob))
        _WORKER_MECH.clear()
        _WORKER_MECH[mech_key] = mech
    with open(path, "rb") as fh:
        fh.seek(shard.start)
        raw = fh.read(shard.end - shard.start)
    try:
        text = (header + raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedInput(
            f"{path}: not valid UTF-8 in the lines after line {shard.first_line} "
            f"({e.reason} at byte {shard.start + e.start - len(header)})"
        ) from None
    counts = dict(records=0, words=0, perturbed=0, changed=0, oov=0, kept=0, max_words_per_record=0)
    oov: Counter = Counter()

    def run_chunks(chunks: Iterator[list[str]]) -> Iterator[list[str]]:
        start = shard.first_record
        g = None if seed is not None else secure_numpy()  # OS entropy of this worker
        for texts in chunks:
            if seed is not None:
                res = mech.sanitize_many(texts, seed=seed, start=start)
            else:
                res = mech.sanitize_many(texts, rng=g)
            start += len(texts)
            _account(
                counts, [(r.n_words, r.n_perturbed, r.n_changed, r.n_oov, r.n_kept) for r in res]
            )
            oov.update(w for r in res for w in r.oov_words)
            yield [r.text for r in res]

    class _NoBar:
        disable = True

        def update(self, n: int) -> None:
            pass

    fd, tmp = tempfile.mkstemp(dir=parts_dir, prefix=f".part-{shard.index:06d}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fout:
            fin = io.StringIO(text, newline="\n")
            _maybe_fault(fault, shard.index, tmp)
            RUNNERS[fmt](
                fin,
                fout,
                Path(path),
                run_chunks,
                chunk_records,
                _NoBar(),
                field,
                line0=shard.first_line - (1 if header else 0),
                header=False,
            )
        final = os.path.join(parts_dir, f"part-{shard.index:06d}")
        os.replace(tmp, final)  # a part exists only when complete
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    keys = ("records", "words", "perturbed", "changed", "oov", "kept")
    extra = {"max": counts["max_words_per_record"], "oov": dict(oov.most_common(200))}
    return final, [counts[k] for k in keys], extra


def _worker_copy(mechanism: Any) -> Any:
    """The mechanism as the workers rebuild it: hyperparameters, the planned index with its fixed
    (calibrated) parameter, the vectors (reloaded from their path / the package when not given as an
    object); no built index (each worker loads the cached one)."""
    w = copy.copy(mechanism)
    w.__dict__ = {k: v for k, v in mechanism.__dict__.items() if not k.startswith("_")}
    kind = mechanism.__dict__["_index_kind"]
    w.index = kind
    nn = mechanism._nn()
    if kind == "faiss":
        w.ann_nprobe = nn.resolved_nprobe()
    elif kind == "hnsw":
        w.ann_ef = nn.resolved_ef()
    return w  # embeddings None: the default vectors, loaded (memory-mapped) by each worker


def sanitize_file_dask(
    input: str | os.PathLike,
    output: str | os.PathLike,
    mechanism: Any,
    *,
    seed: int | None = None,
    fmt: str | None = None,
    field: str = "text",
    chunk_records: int = 512,
    chunks_per_shard: int = 1,
    client: Any = None,
    n_workers: int = 2,
    retries: int = 1,
    _fault: str | None = None,
) -> FileReport:
    """Sanitize ``input`` into ``output`` on a Dask cluster (see the module docstring).

    Args:
        input, output: the files (txt / JSONL / CSV, as :func:`~privnlp.mechanisms.text.files.sanitize_file`).
        mechanism: a :class:`~privnlp.mechanisms.text.WordMetricDP`.
        seed: a reproducible simulation ("noise seeded"; output identical to ``sanitize_file(seed=)``);
            ``None``: secure noise from each worker's OS entropy.
        fmt, field: as :func:`~privnlp.mechanisms.text.files.sanitize_file`.
        chunk_records: records per batch (the single-process run's chunk), an integer >= 1.
        chunks_per_shard: chunks per Dask task, an integer >= 1.
        client: a ``distributed.Client``; ``None`` starts a ``LocalCluster`` of ``n_workers`` processes.
        n_workers: worker processes of the local cluster, an integer >= 1.
        retries: Dask retries of a task that raised (a killed worker is rescheduled by the scheduler).

    Returns:
        The :class:`~privnlp.mechanisms.text.files.FileReport` (counts merged once).

    Raises:
        InvalidArgument: bad arguments. MalformedInput: bad input (named file and line; no output).
        MissingDependency: ``dask[distributed]`` not installed.
    """
    src, dst = Path(input), Path(output)
    if not src.is_file():
        raise InvalidArgument(f"input {str(src)!r} is not a file")
    fmt = fmt or _guess_fmt(src)
    if fmt not in FORMATS:
        raise InvalidArgument(f"fmt must be one of {FORMATS}; got {fmt!r}")
    if src.resolve() == dst.resolve():
        raise InvalidArgument("output must differ from input")
    check_range("chunk_records", chunk_records, 1, 1 << 24, integer=True)
    check_range("chunks_per_shard", chunks_per_shard, 1, 1 << 20, integer=True)
    check_range("n_workers", n_workers, 1, 4096, integer=True)
    check_range("retries", retries, 0, 100, integer=True)
    if seed is not None:
        check_range("seed", seed, 0, 2**63 - 1, integer=True)
        check_noise_seed_allowed(seed)
    if src.stat().st_size == 0:
        raise MalformedInput(f"{src}: the input file is empty")
    mechanism.resolve_embeddings()
    mechanism.plan_index(src.stat().st_size // 6)  # the single-process run's choice
    shards, body0 = plan_shards(
        src, fmt, records_per_shard=chunk_records * chunks_per_shard, counts_text="sanitize"
    )
    bom = has_bom(src)
    with open(src, "rb") as fh:
        fh.seek(3 if bom else 0)
        header = fh.read(body0 - (3 if bom else 0)) if fmt == "csv" else b""
    blob = pickle.dumps(_worker_copy(mechanism))
    key = f"{id(mechanism)}-{time.time_ns()}"
    made = make_parent(dst)
    parts = tempfile.mkdtemp(dir=dst.parent, prefix=f".{dst.name}.parts-")
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    os.close(fd)
    cl, cluster = None, None
    futs: list = []
    try:
        cl, cluster = _client_or_cluster(client, n_workers)
        futs = [
            cl.submit(
                _sanitize_shard,
                str(src),
                fmt,
                field,
                header,
                sh,
                blob,
                key,
                seed,
                chunk_records,
                parts,
                _fault,
                key=f"privnlp-sanitize-{key}-{sh.index}",
                retries=retries,
                pure=False,
            )
            for sh in shards
        ]
        results = cl.gather(futs)  # raises if a shard failed for good (no partial merge)
        counts = dict(
            records=0, words=0, perturbed=0, changed=0, oov=0, kept=0, max_words_per_record=0
        )
        oov: Counter = Counter()
        with open(tmp, "wb") as out:
            if bom:
                out.write(b"\xef\xbb\xbf")
            if fmt == "csv":  # the header row as the single-process run writes it
                out.write(_csv_header(header))
            for part, c, extra in results:
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
                for k_, v in zip(("records", "words", "perturbed", "changed", "oov", "kept"), c):
                    counts[k_] += v
                counts["max_words_per_record"] = max(counts["max_words_per_record"], extra["max"])
                oov.update(extra["oov"])
        if counts["records"] == 0:
            raise MalformedInput(f"{src}: no records to sanitize")
        meta = sidecar_meta(src, dst, fmt, field, mechanism, seed, None, seed is not None, counts)
        meta["engine"] = {
            "name": "dask.distributed",
            "shards": len(shards),
            "records_per_shard": chunk_records * chunks_per_shard,
            "noise": "per-record generators default_rng([seed, i]) (seeded)"
            if seed is not None
            else "each worker's OS entropy (secure)",
        }
        honour_umask(tmp)
        os.replace(tmp, dst)
        side = sidecar_path(dst)
        atomic_write_text(side, json.dumps(meta, indent=2, default=str) + "\n")
        honour_umask(side)
    except BaseException:
        if cl is not None and futs:
            cl.cancel(futs)  # shards still running write into a folder that is about to go
        if os.path.exists(tmp):
            os.unlink(tmp)
        shutil.rmtree(parts, ignore_errors=True)
        if not dst.exists():
            remove_made(made)
        raise
    finally:
        shutil.rmtree(parts, ignore_errors=True)
        if cluster is not None:
            cl.close()
            cluster.close()
    return FileReport(str(src), str(dst), str(side), fmt, **counts, oov_top=oov_report(oov))


def _csv_header(header: bytes) -> bytes:
    """The header row as ``csv.DictWriter`` writes it (quoting normalised), the input's line end."""
    text = header.decode("utf-8")
    body = text.rstrip("\r\n")
    eol = text[len(body) :] or "\n"
    names = next(csv.reader([body]))
    buf = io.StringIO(newline="")
    csv.writer(buf, lineterminator=eol).writerow(names)
    return buf.getvalue().encode("utf-8")


# ----------------------------------------------------------------------------- DP vocabulary
def _vocab_shard(
    path: str,
    fmt: str,
    field: str | None,
    header: bytes,
    shard: Shard,
    k: int,
    lowercase: bool,
    seed: int | None,
) -> tuple[Counter, int]:
    with open(path, "rb") as fh:
        fh.seek(shard.start)
        raw = fh.read(shard.end - shard.start)
    text = (header + raw).decode("utf-8")
    texts = _shard_texts(text, fmt, field, path, shard)
    split = WordSplitter(lowercase)
    hist: Counter = Counter()
    g = None if seed is not None else secure_numpy()
    for j, t in enumerate(texts):
        gj = np.random.default_rng([seed, 0, shard.first_record + j]) if seed is not None else g
        hist.update(bound_contributions([split(t)], k, rng=gj)[0])
    return hist, len(texts)


def _shard_texts(text: str, fmt: str, field: str | None, path: str, shard: Shard) -> list[str]:
    if fmt == "txt":
        return loaders.split_records(text, "line")
    if fmt == "jsonl":
        out = []
        col = field or "text"
        for i, ln in enumerate(loaders._jsonl_lines(text), shard.first_line + 1):
            if not ln.strip():
                continue
            try:
                obj = json.loads(ln)
            except json.JSONDecodeError as e:
                raise MalformedInput(f"{path}, line {i}: invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get(col), str):
                raise MalformedInput(f"{path}, line {i}: expected an object with a string {col!r}")
            out.append(obj[col])
        return out
    rows = list(csv.reader(io.StringIO(text, newline="")))
    names, body = rows[0], rows[1:]
    col = field or ("text" if "text" in names else names[0])
    if col not in names:
        raise MalformedInput(f"{path}, line 1: missing column {col!r} (columns: {names})")
    j = names.index(col)
    return [r[j] for r in body if r and any(c.strip() for c in r)]


def build_vocab_dask(
    input: str | os.PathLike,
    mechanism: Any,
    *,
    seed: int | None = None,
    fmt: str | None = None,
    field: str | None = None,
    docs_per_shard: int = 4096,
    client: Any = None,
    n_workers: int = 2,
    retries: int = 1,
) -> Any:
    """Build a DP WordPiece vocabulary from a txt (one document per line) / JSONL / CSV file on a
    Dask cluster: per-document contribution bounding in the map, the noisy threshold once in the
    reduce (``unit="document"``). Equal to ``mechanism.build(load_texts(input), seed=seed)``.

    Returns:
        The :class:`~privnlp.mechanisms.vocab.VocabBuild` (its claim states the record rule and, with
        ``seed``, "noise seeded").
    """
    if mechanism.unit != "document":
        raise InvalidArgument(
            "build_vocab_dask supports unit='document' (unit='user' needs a shuffle by user id: "
            "use DPWordPiece.build on one machine)"
        )
    src = Path(input)
    if not src.is_file():
        raise InvalidArgument(f"input {str(src)!r} is not a file")
    fmt = fmt or {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}.get(
        src.suffix.lower(), "txt"
    )
    check_range("docs_per_shard", docs_per_shard, 1, 1 << 40, integer=True)
    if seed is not None:
        check_range("seed", seed, 0, 2**63 - 1, integer=True)
        check_noise_seed_allowed(seed)
    shards, body0 = plan_shards(src, fmt, records_per_shard=docs_per_shard, counts_text="vocab")
    bom = has_bom(src)
    with open(src, "rb") as fh:
        fh.seek(3 if bom else 0)
        header = fh.read(body0 - (3 if bom else 0)) if fmt == "csv" else b""
    cl, cluster = _client_or_cluster(client, n_workers)
    try:
        futs = [
            cl.submit(
                _vocab_shard,
                str(src),
                fmt,
                field,
                header,
                sh,
                int(mechanism.max_words_per_contributor),
                bool(mechanism.lowercase),
                seed,
                retries=retries,
                pure=False,
            )
            for sh in shards
        ]
        total: Counter = Counter()
        n = 0
        for h, m in cl.gather(futs):
            total.update(h)
            n += m
    finally:
        if cluster is not None:
            cl.close()
            cluster.close()
    if n == 0:
        raise MalformedInput(f"{src}: empty corpus (no documents)")
    rule = {
        "jsonl": "one record per line of the JSONL file (a line ends at LF only)",
        "csv": "one record per CSV row (quoted line breaks stay inside their row)",
    }.get(fmt, TXT_UNIT_RULES["line"])
    rng = np.random.default_rng([seed, 1]) if seed is not None else None
    return mechanism.build_from_counts(total, n, rng=rng, records=rule)
