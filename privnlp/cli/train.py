"""`privnlp GROUP` commands (filled by the issue that owns GROUP)."""
from __future__ import annotations

import typer

app = typer.Typer(help="Train a bundled tiny model privately (DP-SGD, frozen embeddings, update transforms).", no_args_is_help=True)
