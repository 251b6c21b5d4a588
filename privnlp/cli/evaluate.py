"""`privnlp evaluate`: audit defenses against the bundled attacks; write reports and cards."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(
    help="Audit defenses against the bundled attacks and write leakage reports and cards.",
    invoke_without_command=True,
)


@app.callback(invoke_without_command=True)
def evaluate(
    ctx: typer.Context,
    all_: bool = typer.Option(False, "--all", help="Evaluate every registered defense."),
    defense: list[str] | None = typer.Option(
        None, "--defense", "-d", help="Defense name (repeatable)."
    ),
    preset: str = typer.Option(
        "quick",
        "--preset",
        help="quick (CI, minutes), full (make repro) or realistic (pretrained MiniLM and a Debian-text LM as victims where a scenario has one).",
    ),
    report_dir: Path = typer.Option(
        Path("reports"), "--report-dir", help="Where reports are written."
    ),
    cards: bool = typer.Option(
        False, "--cards/--no-cards", help="Also (re)write cards/mechanisms/<name>/README.md cards."
    ),
    cards_dir: Path = typer.Option(
        Path("cards/mechanisms"), "--cards-dir", help="Folder of the mechanism cards."
    ),
    cache_dir: Path | None = typer.Option(
        None, "--cache-dir", help="Resume cache (default: <report-dir>/.cache)."
    ),
    keep_going: bool = typer.Option(
        True, "--keep-going/--fail-fast", help="Continue after a defense fails."
    ),
    list_: bool = typer.Option(
        False, "--list", help="List registered defenses and their paired attacks."
    ),
    audit_dp: bool = typer.Option(
        False,
        "--audit-dp/--no-audit-dp",
        help="Also run the empirical DP audits (audited epsilon lower bound vs the claim, "
        "leaky twins included; cached). quick: short audits, full: long ones.",
    ),
    model: Path | None = typer.Option(
        None,
        "--model",
        help="Audit your own local HF checkpoint (causal LM or "
        "sequence classifier, a save_pretrained folder) on --data (issue #17).",
    ),
    data: Path | None = typer.Option(
        None, "--data", help="Your records for --model (txt / jsonl / csv)."
    ),
    field: str | None = typer.Option(
        None, "--field", help="The text field of --data (jsonl / csv)."
    ),
    batch_size: int = typer.Option(
        1, "--batch-size", help="Records per client update for --model."
    ),
    canaries: int = typer.Option(
        0,
        "--canaries",
        help="--model (causal LM): insert this many canaries by a short "
        "fine-tune and measure canary exposure / extraction.",
    ),
) -> None:
    """Run the registered defense/attack pairs on the bundled scenarios."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console

    from privnlp.core.registry import MECHANISMS
    from privnlp.evaluation.cards import PRESETS, evaluate_all

    console = Console(stderr=True)
    if list_:
        for n in MECHANISMS.names():
            cls = MECHANISMS.get(n)
            typer.echo(
                f"{n}: attacks={list(getattr(cls, 'paired_attacks', ()))} scenario={getattr(cls, 'scenario', None)}"
            )
        raise typer.Exit()
    if model is not None:  # issue #17: bring your own model and data
        if data is None:
            raise typer.BadParameter("--model needs --data FILE (the records to attack)")
        from privnlp.data import load_texts
        from privnlp.evaluation.byom import audit_model, load_checkpoint

        m, tok = load_checkpoint(model)
        rep = audit_model(
            m, tok, load_texts(data, field=field), batch_size=batch_size, canaries=canaries
        )
        paths = rep.save(report_dir, model.name or "user_model")
        console.print(
            f"[green]✓[/green] {model}: "
            + ", ".join(
                f"{a}={v.get('defended', float('nan')):.3f}" for a, v in rep.headline().items()
            )
        )
        typer.echo(f"report: {paths.get('html', paths)}")
        raise typer.Exit()
    if preset not in PRESETS:
        raise typer.BadParameter(f"--preset must be one of {sorted(PRESETS)}; got {preset!r}")
    if not all_ and not defense:
        raise typer.BadParameter("pass --all or at least one --defense NAME (see --list)")
    names = None if all_ else list(defense or [])
    if names:
        known = set(MECHANISMS.names())
        bad = [n for n in names if n not in known]
        if bad:
            raise typer.BadParameter(f"unknown defense(s) {bad}; known: {sorted(known)}")
    outcomes, failures = evaluate_all(
        preset=preset,
        report_dir=report_dir,
        cards_dir=cards_dir if cards else None,
        names=names,
        cache_dir=cache_dir or (report_dir / ".cache"),
        keep_going=keep_going,
        audit_dp=audit_dp,
    )
    from ._summary import (
        summary_table,
    )  # issue #21: one summary table at the end, not a line per defense

    audit_text = None
    if audit_dp:
        from privnlp.auditing.render import audit_index_text as audit_text
    console.print(summary_table(outcomes, failures, audit_text=audit_text))
    index = (report_dir / "index.html").resolve()
    typer.echo(f"HTML index: {index}")
    if failures:
        raise typer.Exit(1)
