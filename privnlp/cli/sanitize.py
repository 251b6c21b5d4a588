"""`privnlp GROUP` commands (filled by the issue that owns GROUP)."""
from __future__ import annotations

import typer

app = typer.Typer(help="Sanitize text with metric-DP word perturbation (Vickrey, Laplace, Mahalanobis).", no_args_is_help=True)
