"""`privnlp GROUP` commands (filled by the issue that owns GROUP)."""
from __future__ import annotations

import typer

app = typer.Typer(help="Phrase-pair fragmentation of parallel data.", no_args_is_help=True)
