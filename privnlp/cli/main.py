"""Entry point of the ``privnlp`` command.

Each subcommand group lives in its own module (``privnlp/cli/<group>.py``) exposing a
``typer.Typer`` called ``app``; heavy imports happen inside the commands so ``--help`` is fast.
"""

from __future__ import annotations

import importlib

import typer

import privnlp

GROUPS = ("train", "fl", "sanitize", "vocab", "fragment", "mpc", "attack", "evaluate", "data")

app = typer.Typer(
    help="privnlp — a defense-first privacy toolkit for NLP.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"privnlp {privnlp.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool | None = typer.Option(
        None,
        "--version",
        callback=_version_callback,
        is_eager=True,
        help="Show the version and exit.",
    ),
) -> None:
    """privnlp: private training, text sanitization, and leakage evaluation."""


for _g in GROUPS:
    _mod = importlib.import_module(f"privnlp.cli.{_g}")
    if _g == "attack":
        # memorization attacks (canary / eavesdrop / watermark) live in their own module
        from privnlp.cli import attack_memorization as _am

        _am.register(_mod.app)
    app.add_typer(_mod.app, name=_g)

from privnlp.cli import redact as _redact  # noqa: E402  (a single command, not a group)

app.command("redact")(_redact.redact)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
