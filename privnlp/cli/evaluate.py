"""`privnlp evaluate`: audit defenses against the bundled attacks; write reports and cards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from privnlp.auditing.render import audit_index_text
from privnlp.core.errors import PrivnlpError
from privnlp.core.registry import MECHANISMS
from privnlp.data import load_texts

from ._summary import summary_table

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
    device: str = typer.Option(
        "cpu",
        "--device",
        help="Where the scenarios train (victim fine-tunes, DP-SGD, federated local steps): cpu, cuda, "
        "cuda:N or auto (cuda when present). Default cpu: the committed cards and the cache are CPU "
        "numbers, and a GPU changes the bits of a trained model.",
    ),
) -> None:
    """Run the registered defense/attack pairs on the bundled scenarios."""
    # privnlp.evaluation pulls faker at import time: only when the command runs
    from privnlp.evaluation.cards import PRESETS, evaluate_all
    from privnlp.evaluation.realistic import realistic_plan, use_device

    if ctx.invoked_subcommand is not None:
        return

    console = Console(stderr=True)
    if list_:
        for n in MECHANISMS.names():
            cls = MECHANISMS.get(n)
            typer.echo(
                f"{n}: attacks={list(getattr(cls, 'paired_attacks', ()))} scenario={getattr(cls, 'scenario', None)}"
            )
        raise typer.Exit()
    if model is not None:  # issue #17: bring your own model and data
        if device != "cpu":
            typer.echo(
                "error: --device applies to the registered defenses' scenarios; --model audits run on the cpu",
                err=True,
            )
            raise typer.Exit(2)
        _evaluate_model(model, data, field, batch_size, canaries, report_dir, console)
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
    dev = _resolve_device(device)  # issue #29 item 8: before any work
    if preset == "realistic":  # issue #29 item 8: say the expected time before the run starts
        console.print(realistic_plan(names, device=dev).describe())
    with use_device(dev):  # the scenarios built by the audit read it (their `device`)
        outcomes, failures = evaluate_all(
            preset=preset,
            report_dir=report_dir,
            cards_dir=cards_dir if cards else None,
            names=names,
            cache_dir=cache_dir or (report_dir / ".cache"),
            keep_going=keep_going,
            audit_dp=audit_dp,
        )

    audit_text = audit_index_text if audit_dp else None
    console.print(summary_table(outcomes, failures, audit_text=audit_text))
    index = (report_dir / "index.html").resolve()
    typer.echo(f"HTML index: {index}")
    if failures:
        raise typer.Exit(1)


def _resolve_device(device: str) -> str:
    """``--device`` checked and resolved (``auto``) before any work: bad input is one line, exit 2."""
    # deferred: resolving a device imports torch; `evaluate --list` and the help stay torch-free
    from privnlp.mechanisms.training.devices import resolve_device

    try:
        return resolve_device(device, name="--device")
    except PrivnlpError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def _evaluate_model(
    model: Path,
    data: Path | None,
    field: str | None,
    batch_size: int,
    canaries: int,
    report_dir: Path,
    console: Any,
) -> None:
    """``evaluate --model``: bad input is one line on stderr and exit code 2 (no traceback, no
    partial report); the report is written under a name unique to the checkpoint folder."""
    from privnlp.evaluation.byom import audit_model, load_checkpoint, report_name  # pulls faker

    def fail(msg: str) -> None:
        typer.echo(f"error: {msg}", err=True)  # one line: no rich wrapping, no traceback
        raise typer.Exit(2)

    if data is None:
        fail("--model needs --data FILE (the records to attack)")
    if not model.is_dir():
        fail(f"--model must be an existing folder written by save_pretrained; got {str(model)!r}")
    if not data.is_file():
        fail(f"--data must be an existing file (txt / jsonl / csv); got {str(data)!r}")

    try:
        console.print(f"loading {model} ...")
        m, tok = load_checkpoint(model)
        texts = load_texts(data, field=field)
        console.print(f"auditing {model.name} on {len(texts)} records (progress below) ...")
        rep = audit_model(
            m,
            tok,
            texts,
            batch_size=batch_size,
            canaries=canaries,
            progress=True,
            model_path=model,
        )
    except (PrivnlpError, ValueError, OSError) as e:
        text = str(e.args[0]) if e.args else repr(e)
        fail(f"{type(e).__name__}: {text.splitlines()[0] if text else repr(e)}")
    paths = rep.save(report_dir, report_name(model, report_dir))
    console.print(
        f"[green]✓[/green] {model} (as given): "
        + ", ".join(f"{a}={v.get('defended', float('nan')):.3f}" for a, v in rep.headline().items())
    )
    for n in rep.notes:
        if "did not apply" in n:
            console.print(f"  {n}")
    typer.echo(f"report: {paths.get('html', paths)}")
