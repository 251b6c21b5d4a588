"""`privnlp GROUP` commands (filled by the issue that owns GROUP)."""
from __future__ import annotations

import typer

app = typer.Typer(help="Run a bundled attack on a saved observation or a bundled scenario.", no_args_is_help=True)
