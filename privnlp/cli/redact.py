"""`privnlp redact INPUT -o OUTPUT`: redact PII from txt / JSONL / CSV records.

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` (a PII tagger trained on labels
auto-annotated from known fields). Heavy imports happen inside the command so ``privnlp --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer


def _fail(msg: str) -> None:
    typer.secho(f"error: {msg}", err=True, fg=typer.colors.RED)
    raise typer.Exit(2)


def redact(
    input: Path = typer.Argument(
        ..., help="Input file: .txt (one document per line), .jsonl or .csv."
    ),
    output: Path = typer.Option(
        ..., "-o", "--output", help="Output file (atomic) + OUTPUT.redaction.json sidecar."
    ),
    field: str | None = typer.Option(
        None, "--field", "-f", help="JSONL key / CSV column holding the text."
    ),
    fmt: str | None = typer.Option(
        None, "--format", help="txt, jsonl or csv (default: from the extension)."
    ),
    mode: str = typer.Option(
        "placeholder",
        "--mode",
        "-m",
        help="placeholder ([NAME], [DATE], ...) or surrogate "
        "(consistent fake values per document, Faker).",
    ),
    tagger: str = typer.Option(
        "bundled",
        "--tagger",
        help="bundled (BiLSTM trained on the bundled corpus' auto-"
        "annotations, cached), none (regex / known fields only) or a tagger file path.",
    ),
    known_fields: Path | None = typer.Option(
        None,
        "--known-fields",
        help="JSON {id: {LABEL: [values]}} or JSONL "
        "rows {id, fields}: the PII you already know per document.",
    ),
    id_field: str = typer.Option(
        "id",
        "--id-field",
        help="Key / column matching documents to --known-fields (txt: line numbers 1, 2, ...).",
    ),
    spans: Path | None = typer.Option(
        None,
        "--spans",
        help="Also write the spans per document (JSONL, Presidio "
        "shape: entity_type, start, end, score).",
    ),
    regex: bool = typer.Option(
        True, "--regex/--no-regex", help="Regex recognizers (e-mail, phone, SSN, cards, dates)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the surrogates (not a privacy parameter)."),
) -> None:
    """Redact PII with typed placeholders or consistent surrogates; counts per type go to a sidecar."""
    import warnings

    from privnlp.core.errors import InvalidArgument, MalformedInput
    from privnlp.mechanisms.pii.redact import MODES, PIIRedactor, load_known_fields, redact_file

    if mode not in MODES:
        _fail(f"--mode must be one of {MODES}; got {mode!r}")
    try:
        kf = load_known_fields(known_fields) if known_fields is not None else None
        tg = None
        if tagger == "bundled":
            from privnlp.mechanisms.pii.tagger import bundled_tagger

            tg = bundled_tagger()
        elif tagger != "none":
            from privnlp.mechanisms.pii.tagger import PIITagger

            if not Path(tagger).is_file():
                _fail(
                    f"--tagger must be 'bundled', 'none' or an existing tagger file; got {tagger!r}"
                )
            tg = PIITagger.load(tagger)
        if tg is None and not regex and kf is None:
            _fail("nothing would be redacted: --tagger none --no-regex and no --known-fields")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            summary = redact_file(
                input,
                output,
                field=field,
                fmt=fmt,
                redactor=PIIRedactor(tg, regex=regex, mode=mode),
                known_fields=kf,
                id_field=id_field,
                spans_path=spans,
                seed=seed,
            )
        for w in caught:
            typer.secho(f"warning: {w.message}", err=True, fg=typer.colors.YELLOW)
    except (InvalidArgument, MalformedInput) as e:
        _fail(str(e))
    counts = ", ".join(f"{k}={v}" for k, v in summary.counts.items()) or "nothing found"
    typer.echo(
        f"redacted {summary.n_documents} documents -> {summary.output} ({counts}); sidecar {summary.sidecar}"
    )
