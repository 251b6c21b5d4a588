"""Entry point of the ``privnlp`` command.

Each subcommand group lives in its own module (``privnlp/cli/<group>.py``) exposing a
``typer.Typer`` called ``app``; heavy imports happen inside the commands so ``--help`` is fast.

The groups are loaded lazily: ``privnlp sanitize ...`` imports ``privnlp.cli.sanitize`` only, not
the eight other groups (about 0.2 s of every start). ``privnlp --help`` lists every command from
:data:`COMMANDS`, a static table of names and one-line helps (tests/cli/test_cli_main_lazy.py checks
that it matches what each module declares); every other use (a command, its ``--help``, the docs'
walk over the tree) loads the real command, built exactly as ``app.add_typer`` would build it.
"""

from __future__ import annotations

import importlib
from difflib import get_close_matches

import click
import typer
from typer.core import TyperGroup

import privnlp

GROUPS = ("train", "fl", "sanitize", "vocab", "fragment", "mpc", "attack", "evaluate", "data")

#: every command of ``privnlp``, in the order ``--help`` lists them: name -> the first paragraph of
#: its help (the line ``--help`` shows). ``redact`` is a single command, the others are groups.
COMMANDS: dict[str, str] = {
    "redact": "Redact PII with typed placeholders or keyed surrogates; counts and warnings go to a "
    "sidecar.",
    "train": "Train a bundled tiny model privately (DP-SGD, frozen embeddings, update transforms).",
    "fl": "Federated learning: FedAvg and DP-FedAvg simulator, Flower server and client.",
    "sanitize": "Sanitize text with metric-DP word perturbation (Vickrey, Laplace, Mahalanobis).",
    "vocab": "Build DP WordPiece vocabularies.",
    "fragment": "Phrase-pair fragmentation of parallel data.",
    "mpc": "Private text classification with CrypTen (MPC).",
    "attack": "Run a bundled attack on a saved observation or a bundled scenario.",
    "evaluate": "Audit defenses against the bundled attacks and write leakage reports and cards.",
    "data": "Generate the bundled synthetic private corpus.",
}


def load_command(name: str) -> click.Command:
    """The click command ``privnlp <name>``, built from its module exactly as ``app.add_typer``
    (a group) or ``app.command`` (``redact``) on the root app would build it."""
    holder = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    mod = importlib.import_module(f"privnlp.cli.{name}")
    if name == "redact":
        holder.command("redact")(mod.redact)
    else:
        if name == "attack":
            # memorization attacks (canary / eavesdrop / watermark) live in their own module
            from privnlp.cli import attack_memorization

            if not getattr(mod.app, "_privnlp_memorization", False):
                attack_memorization.register(mod.app)
                mod.app._privnlp_memorization = True
        holder.add_typer(mod.app, name=name)

    @holder.callback()
    def _holder() -> None:  # a callback makes typer build a group around the one command
        pass

    return typer.main.get_command(holder).commands[name]  # type: ignore[attr-defined]


class LazyGroup(TyperGroup):
    """The root group: the commands of :data:`COMMANDS` are imported on first use."""

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS) + [n for n in self.commands if n not in COMMANDS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        if self._listing:  # `privnlp --help`: the static line, no import
            return click.Command(cmd_name, help=COMMANDS[cmd_name])
        cmd = load_command(cmd_name)
        self.commands[cmd_name] = cmd
        return cmd

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return click.Group.resolve_command(self, ctx, args)
        except click.UsageError as e:  # typer's "Did you mean", over the names not loaded too
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches:
                e.message = (
                    f"{e.message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in matches)}?"
                )
            raise


app = typer.Typer(
    cls=LazyGroup,
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


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
