"""`privnlp data` commands: write the bundled synthetic corpus to a folder."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from privnlp.core.report import atomic_write_text
from privnlp.data import generate_corpus, generate_sentiment

app = typer.Typer(help="Generate the bundled synthetic private corpus.", no_args_is_help=True)


@app.command("generate")
def generate(
    out: Path = typer.Option(..., "--out", help="Output folder (created if missing)."),
    n_users: int = typer.Option(20, "--n-users", min=1, help="Number of synthetic users."),
    records_per_user: int = typer.Option(
        10, "--records-per-user", min=1, help="Records written by each user."
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed (same seed, same corpus)."),
    n_sentiment: int = typer.Option(
        2000, "--n-sentiment", min=0, help="Sentiment examples (0 to skip)."
    ),
) -> None:
    """Write corpus.jsonl, corpus.conll (BIO) and sentiment.jsonl to OUT (each file atomically)."""

    corpus = generate_corpus(n_users, records_per_user, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    corpus.to_jsonl(out / "corpus.jsonl")
    corpus.to_conll(out / "corpus.conll")
    written = ["corpus.jsonl", "corpus.conll"]
    if n_sentiment:
        ds = generate_sentiment(n_sentiment, seed=seed)
        atomic_write_text(
            out / "sentiment.jsonl",
            "".join(
                json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n"
                for t, y in zip(ds.texts, ds.labels)
            ),
        )
        written.append("sentiment.jsonl")
    n_spans = sum(len(r.spans) for r in corpus.records)
    typer.echo(
        f"wrote {len(corpus.records)} records by {len(corpus.users)} users ({n_spans} gold PII spans) "
        f"to {out}: {', '.join(written)}"
    )
