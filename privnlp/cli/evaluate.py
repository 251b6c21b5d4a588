"""`privnlp GROUP` commands (filled by the issue that owns GROUP)."""
from __future__ import annotations

import typer

app = typer.Typer(help="Audit defenses against the bundled attacks and write leakage reports and cards.", no_args_is_help=True)
