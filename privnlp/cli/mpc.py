"""`privnlp GROUP` commands (filled by the issue that owns GROUP)."""
from __future__ import annotations

import typer

app = typer.Typer(help="Private text classification with CrypTen (MPC).", no_args_is_help=True)
