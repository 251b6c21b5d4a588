"""`privnlp vocab` commands: build a DP WordPiece vocabulary (dp-bert-and-dp-wordpiece.txt, Sec. 3.2)."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="Build DP WordPiece vocabularies.", no_args_is_help=True)


def _read_corpus(
    corpus: Path | None,
    field: str | None,
    user_field: str | None,
    fmt: str | None,
    bundled: bool,
):
    """Return (texts, user_ids or None). txt / JSONL / CSV via privnlp.data.load_texts; an HF dataset
    saved with ``save_to_disk`` (a directory); or the bundled synthetic corpus."""
    import json

    from privnlp.core.errors import InvalidArgument, MalformedInput

    if bundled:
        from privnlp.data import generate_corpus

        c = generate_corpus()
        return [r.text for r in c.records], [r.user_id for r in c.records]
    if corpus is None:
        raise InvalidArgument(
            "CORPUS is required (a .txt/.jsonl/.csv file or a saved HF dataset dir), or --bundled"
        )
    if not corpus.exists():
        raise MalformedInput(f"corpus: {corpus} does not exist")
    if corpus.is_dir():
        import datasets

        ds = datasets.load_from_disk(str(corpus))
        if isinstance(ds, datasets.DatasetDict):
            ds = ds[list(ds.keys())[0]]
        col = field or "text"
        if col not in ds.column_names:
            raise MalformedInput(
                f"field: column {col!r} not in the dataset; columns: {ds.column_names}"
            )
        users = list(ds[user_field]) if user_field else None
        return [str(t) for t in ds[col]], users
    if user_field:
        if (fmt or corpus.suffix.lstrip(".")) not in ("jsonl", "json"):
            raise InvalidArgument("--user-field needs a JSONL corpus or an HF dataset directory")
        texts, users = [], []
        for i, line in enumerate(corpus.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                texts.append(str(obj[field or "text"]))
                users.append(obj[user_field])
            except (json.JSONDecodeError, KeyError) as e:
                raise MalformedInput(
                    f"corpus: line {i} of {corpus}: {type(e).__name__}: {e}"
                ) from None
        return texts, users
    from privnlp.data.loaders import load_texts

    return load_texts(str(corpus), field=field, fmt=fmt), None


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
    bundled: bool = typer.Option(
        False, help="use the bundled synthetic corpus (privnlp.data.generate_corpus)"
    ),
    seed: int | None = typer.Option(None, help="seed (testing only); default: OS entropy"),
    secure: bool = typer.Option(
        False, help="OpenDP discrete Laplace noise (needs `pip install opendp`)"
    ),
) -> None:
    """Build a DP WordPiece tokenizer from CORPUS and write it with its privacy claim."""
    import json

    import numpy as np

    from privnlp.core.errors import PrivnlpError
    from privnlp.core.rng import secure_numpy
    from privnlp.mechanisms.vocab import DPWordPiece

    try:
        texts, users = _read_corpus(corpus, field, user_field, fmt, bundled)
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
        rng = np.random.default_rng(seed) if seed is not None else secure_numpy()
        res = mech.build(texts, contributor_ids=users if unit == "user" else None, rng=rng)
        paths = res.save(out)
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
