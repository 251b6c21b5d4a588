"""`privnlp vocab` commands: build a DP WordPiece vocabulary (dp-bert-and-dp-wordpiece.txt, Sec. 3.2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

import privnlp.accounting as accounting  # lazy package: DPLedger loads on first use
from privnlp.core.errors import InvalidArgument, MalformedInput, PrivnlpError
from privnlp.core.report import atomic_write_text
from privnlp.core.rng import secure_numpy
from privnlp.data import generate_corpus
from privnlp.data.loaders import TXT_UNIT_RULES, TXT_UNITS, load_texts
from privnlp.mechanisms.text.distributed import build_vocab_dask
from privnlp.mechanisms.vocab import DPWordPiece

app = typer.Typer(help="Build DP WordPiece vocabularies.", no_args_is_help=True)


def _check_text(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise MalformedInput(
            f"{where}: the text is {'null' if v is None else type(v).__name__}, expected a string"
        )
    return v


def _check_user(v: Any, where: str) -> str | int:
    # a user id is a string or an integer (a bool, float, list, object or null is refused: two
    # spellings of one user would split its contribution bound)
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise MalformedInput(
            f"{where}: the user id is {'null' if v is None else type(v).__name__}, "
            "expected a string or an integer"
        )
    return v


def _read_corpus(
    corpus: Path | None,
    field: str | None,
    user_field: str | None,
    fmt: str | None,
    bundled: bool,
    txt_unit: str = "line",
) -> tuple[list[str], list | None, str]:
    """Return (texts, user_ids or None, the record rule). txt / JSONL / CSV via
    privnlp.data.load_texts; an HF dataset saved with ``save_to_disk`` (a directory); or the bundled
    synthetic corpus. Records end only where the format says (never at a form feed or U+2028)."""
    if bundled:
        c = generate_corpus()
        return (
            [r.text for r in c.records],
            [r.user_id for r in c.records],
            "records of the bundled synthetic corpus",
        )
    if corpus is None:
        raise InvalidArgument(
            "CORPUS is required (a .txt/.jsonl/.csv file or a saved HF dataset dir), or --bundled"
        )
    if not corpus.exists():
        raise MalformedInput(f"corpus: {corpus} does not exist")
    if corpus.is_dir():
        import datasets  # heavy and optional: only for a saved HF dataset

        ds = datasets.load_from_disk(str(corpus))
        if isinstance(ds, datasets.DatasetDict):
            ds = ds[list(ds.keys())[0]]
        col = field or "text"
        for name, c in (("field", col), ("user-field", user_field)):
            if c is not None and c not in ds.column_names:
                raise MalformedInput(
                    f"{name}: column {c!r} not in the dataset; columns: {ds.column_names}"
                )
        texts = [_check_text(t, f"corpus: row {i} of {corpus}") for i, t in enumerate(ds[col])]
        users = (
            [_check_user(u, f"corpus: row {i} of {corpus}") for i, u in enumerate(ds[user_field])]
            if user_field
            else None
        )
        return texts, users, f"one record per row of the dataset's {col!r} column"
    if user_field:
        if (fmt or corpus.suffix.lstrip(".")) not in ("jsonl", "json", "ndjson"):
            raise InvalidArgument("--user-field needs a JSONL corpus or an HF dataset directory")
        texts, users = [], []
        raw = corpus.read_text(encoding="utf-8-sig")
        for i, line in enumerate(raw.split("\n"), 1):  # LF only: U+2028 is valid inside JSON
            if not line.strip():
                continue
            where = f"corpus: line {i} of {corpus}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise MalformedInput(f"{where}: invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise MalformedInput(f"{where}: expected a JSON object, got {type(obj).__name__}")
            for f in (field or "text", user_field):
                if f not in obj:
                    raise MalformedInput(f"{where}: missing field {f!r} (fields: {sorted(obj)})")
            texts.append(_check_text(obj[field or "text"], where))
            users.append(_check_user(obj[user_field], where))
        if not texts:
            raise MalformedInput(f"corpus: {corpus} has no records")
        return texts, users, "one record per line of the JSONL file (a line ends at LF only)"
    texts = load_texts(str(corpus), field=field, fmt=fmt, txt_unit=txt_unit)
    kind = fmt or {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}.get(
        corpus.suffix.lower(), "txt"
    )
    rule = {
        "jsonl": "one record per line of the JSONL file (a line ends at LF only)",
        "csv": "one record per CSV row (quoted line breaks stay inside their row)",
    }.get(kind, TXT_UNIT_RULES[txt_unit])
    return texts, None, rule


def _charge_ledger(mech: DPWordPiece, path: Path | None, target_epsilon: float | None) -> Any:
    """The ledger of ``--ledger`` (read, or new) with this release charged; ``None`` without ``--ledger``.
    Raises PrivacyBudgetExceeded before anything is built when ``--target-epsilon`` would be exceeded."""
    if path is None:
        if target_epsilon is not None:
            raise InvalidArgument(
                "--target-epsilon needs --ledger (the file that records the releases)"
            )
        return None
    if path.exists():
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise MalformedInput(f"--ledger: {path} is not JSON ({e.msg})") from None
        if not isinstance(d, dict):
            raise MalformedInput(
                f"--ledger: {path} holds a {type(d).__name__}, not a ledger object"
            )
        led = accounting.DPLedger.from_dict(d)
    else:
        led = accounting.DPLedger()
    led.charge(mech.release_event(), target_epsilon=target_epsilon)
    return led


@app.command("build")
def build(
    corpus: Path | None = typer.Argument(
        None, help="txt (one document per line) / JSONL / CSV file or a saved HF dataset dir"
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        "-o",
        help="output directory (tokenizer.json, vocab.txt, histogram.json, claim.json)",
    ),
    epsilon: float = typer.Option(1.0, help="epsilon (> 0)"),
    delta: float = typer.Option(1e-6, help="delta in (0, 1/n_contributors)"),
    k: int = typer.Option(32, "--k", help="max distinct words per contributor (>= 1)"),
    unit: str = typer.Option(
        "document", help="privacy unit: document | user (needs --user-field or --bundled)"
    ),
    noise: str = typer.Option("laplace", help="laplace | gaussian"),
    neighbouring: str = typer.Option("add/remove", help="add/remove | replace-one"),
    vocab_size: int = typer.Option(8000, help="WordPiece vocabulary size"),
    field: str | None = typer.Option(None, help="text field/column (JSONL/CSV/HF; default 'text')"),
    user_field: str | None = typer.Option(None, help="user-id field (JSONL/HF) for --unit user"),
    fmt: str | None = typer.Option(
        None, "--format", help="txt | jsonl | csv (default: from the extension)"
    ),
    txt_unit: str = typer.Option(
        "line",
        "--txt-unit",
        help="how a .txt corpus is cut into documents: line (a line ends at LF/CRLF only; form "
        "feeds stay inside) | paragraph (blank-line separated) | file; stated in the claim",
    ),
    bundled: bool = typer.Option(
        False, help="use the bundled synthetic corpus (privnlp.data.generate_corpus)"
    ),
    seed: int | None = typer.Option(None, help="seed (testing only); default: OS entropy"),
    engine: str = typer.Option(
        "local",
        "--engine",
        help="local | dask: count on a Dask cluster (per-document bounding in the map, one noisy "
        "threshold in the reduce; same vocabulary as local for the same --seed)",
    ),
    workers: int = typer.Option(2, "--workers", help="worker processes of the local Dask cluster"),
    secure: bool = typer.Option(
        False, help="OpenDP discrete Laplace noise (needs `pip install opendp`)"
    ),
    ledger: Path | None = typer.Option(
        None,
        "--ledger",
        help="a DPLedger JSON file: the release is charged to it (created if missing, written back "
        "after a successful build), so releases on the same contributors compose",
    ),
    target_epsilon: float | None = typer.Option(
        None,
        "--target-epsilon",
        help="with --ledger: refuse (exit 2, nothing written) a release that would take the ledger's "
        "epsilon above this",
    ),
) -> None:
    """Build a DP WordPiece tokenizer from CORPUS and write it with its privacy claim."""

    try:
        if txt_unit not in TXT_UNITS:
            raise InvalidArgument(f"--txt-unit must be one of {TXT_UNITS}; got {txt_unit!r}")
        if user_field is not None and unit != "user":
            raise InvalidArgument(
                "--user-field is only used with --unit user (the privacy unit would silently stay "
                "'document'); add --unit user or drop --user-field"
            )
        if engine not in ("local", "dask"):
            raise InvalidArgument(f"--engine must be 'local' or 'dask'; got {engine!r}")
        mech = DPWordPiece(
            epsilon,
            delta,
            k,
            unit=unit,
            noise=noise,
            neighbouring=neighbouring,
            vocab_size=vocab_size,
            secure=secure,
        )
        led = _charge_ledger(mech, ledger, target_epsilon)
        if engine == "dask":
            if corpus is None or bundled or user_field or txt_unit != "line" or corpus.is_dir():
                raise InvalidArgument(
                    "--engine dask reads a .txt (one document per line) / .jsonl / .csv CORPUS "
                    "with --unit document"
                )

            res = build_vocab_dask(corpus, mech, seed=seed, fmt=fmt, field=field, n_workers=workers)
        else:
            texts, users, rule = _read_corpus(corpus, field, user_field, fmt, bundled, txt_unit)
            # --seed: per-document generators derived from the seed (the engine's scheme: same output)
            res = mech.build(
                texts,
                contributor_ids=users if unit == "user" else None,
                rng=None if seed is not None else secure_numpy(),
                seed=seed,
                records=rule,
            )
        paths = res.save(out)
        if led is not None:  # only a release that happened is recorded
            atomic_write_text(ledger, json.dumps(led.to_dict(), indent=1))
    except PrivnlpError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(res.claim.statement())
    typer.echo(
        json.dumps(
            {
                "released_words": len(res.histogram),
                "vocab_size": len(res.vocab),
                "n_contributors": res.histogram.n_contributors,
                **{k_: str(v) for k_, v in paths.items()},
            },
            indent=1,
        )
    )
