"""`privnlp redact INPUT -o OUTPUT`: redact PII from txt / JSONL / CSV records.

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` (a PII tagger trained on labels
auto-annotated from known fields). The redaction modules (python-crfsuite, phonenumbers, Faker) load
inside the command so ``privnlp --help`` stays fast.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import typer

from privnlp.attacks.pii.residual import estimate_residual
from privnlp.core.errors import InvalidArgument, MalformedInput


def _fail(msg: str) -> None:
    typer.secho(f"error: {msg}", err=True, fg=typer.colors.RED)
    raise typer.Exit(2)


def _key(key_file: Path | None) -> bytes | None:
    """The surrogate key: ``--key-file`` (raw bytes or hex), else ``$PRIVNLP_REDACT_KEY`` (hex)."""
    if key_file is not None:
        if not key_file.is_file():
            _fail(f"--key-file {key_file} does not exist")
        raw = key_file.read_bytes().strip()
        try:
            key = bytes.fromhex(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            key = raw
    elif os.environ.get("PRIVNLP_REDACT_KEY"):
        try:
            key = bytes.fromhex(os.environ["PRIVNLP_REDACT_KEY"])
        except ValueError:
            _fail(
                "PRIVNLP_REDACT_KEY must be hex (e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`)"
            )
    else:
        return None
    if len(key) < 16:
        _fail("the surrogate key must hold at least 16 bytes (32 random bytes recommended)")
    return key


def _print_report(summary, key_given: bool) -> None:  # noqa: ANN001 - RedactionSummary
    # the pii package pulls faker / tqdm: the CLI's module level stays light (see privnlp.cli.main)
    from privnlp.mechanisms.pii.evalset import measured_recall

    typer.echo("\nper-type counts:")
    for k, v in summary.counts.items():
        typer.echo(f"  {k:<12} {v}")
    least = summary.least_sure(10)
    if least:
        typer.echo("\nthe tagger's least sure spans (document, type, confidence, text):")
        for i, t, sc, txt in least:
            typer.echo(f"  #{i + 1:<5} {t:<10} {sc:.2f}  {txt!r}")
    found = [
        [(s.label, t[s.start : s.end]) for s in r.spans]
        for t, r in zip(summary.texts, summary.results)
    ]
    est = estimate_residual(
        list(summary.texts), [r.text for r in summary.results], found, measured_recall()
    )
    typer.echo("\nresidual-PII attack (pii_residual) on this corpus:")
    typer.echo(
        f"  cross-reference: {est.cross_reference_residual:.3f} of the occurrences of the "
        f"{est.n_values} detected values are still readable elsewhere in the output"
    )
    if est.expected_residual_rate is None:
        typer.echo(
            "  expected miss rate: unknown (no measured recall; run benchmarks/pii_redaction.py)"
        )
    else:
        typer.echo(
            f"  expected miss rate: {est.expected_residual_rate:.3f} of this corpus' PII mentions "
            "(per-type recall measured on the hand-written set); expected missed per type: "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted((est.expected_missed or {}).items()))
        )


def redact(
    input: Path = typer.Argument(
        ..., help="Input file: .txt (one document per line), .jsonl or .csv."
    ),
    output: Path = typer.Option(
        ..., "-o", "--output", help="Output file (atomic) + OUTPUT.redaction.json sidecar."
    ),
    field: str | None = typer.Option(
        None, "--field", "-f", help="JSONL key / CSV column holding the text (default: text)."
    ),
    fmt: str | None = typer.Option(
        None, "--format", help="txt, jsonl or csv (default: from the extension)."
    ),
    mode: str = typer.Option(
        "placeholder",
        "--mode",
        "-m",
        help="placeholder ([PERSON], [DATE], ...) or surrogate (keyed pseudonyms of the same type, "
        "format and locale, consistent across the corpus).",
    ),
    tagger: str = typer.Option(
        "crf",
        "--tagger",
        help="crf (feature CRF trained on multi-locale synthetic records in real prose, cached; the "
        "default), bundled (the BiLSTM of the pii_redaction card), none (recognizers / known fields "
        "only) or a tagger file (.crfsuite or a BiLSTM .pt).",
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
        True,
        "--regex/--no-regex",
        help="Recognizers (e-mail, phones, IP, IBAN, cards, national ids, postcodes, usernames, dates).",
    ),
    key_file: Path | None = typer.Option(
        None,
        "--key-file",
        help="Secret key of the surrogates (hex or raw, >= 16 bytes; or $PRIVNLP_REDACT_KEY). The same "
        "key gives the same pseudonyms across runs; without one a random key is used and not saved.",
    ),
    min_score: float = typer.Option(
        0.0, "--min-score", help="Skip tagger spans whose calibrated confidence is below this."
    ),
    report: bool = typer.Option(
        False,
        "--report",
        help="Print per-type counts, the tagger's least sure spans and the residual-PII estimate.",
    ),
) -> None:
    """Redact PII with typed placeholders or keyed surrogates; counts and warnings go to a sidecar."""
    from privnlp.mechanisms.pii.redact import MODES, PIIRedactor, load_known_fields, redact_file

    if mode not in MODES:
        _fail(f"--mode must be one of {MODES}; got {mode!r}")
    if not 0.0 <= min_score <= 1.0:
        _fail(f"--min-score must be in [0, 1]; got {min_score}")
    key = _key(key_file)
    try:
        kf = load_known_fields(known_fields) if known_fields is not None else None
        tg = None
        if tagger == "crf":
            from privnlp.mechanisms.pii.crf import crf_tagger

            tg = crf_tagger(progress=True)
        elif tagger == "bundled":
            from privnlp.mechanisms.pii.tagger import bundled_tagger

            tg = bundled_tagger()
        elif tagger != "none":
            if not Path(tagger).is_file():
                _fail(
                    "--tagger must be 'crf', 'bundled', 'none' or an existing tagger file; "
                    f"got {tagger!r}"
                )
            if tagger.endswith(".crfsuite"):
                from privnlp.mechanisms.pii.crf import CRFTagger

                tg = CRFTagger.load(tagger)
            else:
                from privnlp.mechanisms.pii.tagger import PIITagger

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
                redactor=PIIRedactor(tg, regex=regex, mode=mode, key=key, min_score=min_score),
                known_fields=kf,
                id_field=id_field,
                spans_path=spans,
            )
        for w in caught:
            typer.secho(f"warning: {w.message}", err=True, fg=typer.colors.YELLOW)
    except (InvalidArgument, MalformedInput) as e:
        _fail(str(e))
    counts = ", ".join(f"{k}={v}" for k, v in summary.counts.items()) or "nothing found"
    typer.echo(
        f"redacted {summary.n_documents} documents -> {summary.output} ({counts}); "
        f"sidecar {summary.sidecar}"
    )
    if report:
        _print_report(summary, key is not None)
