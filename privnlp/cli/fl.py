"""`privnlp GROUP` commands (filled by the issue that owns GROUP)."""
from __future__ import annotations

import typer

app = typer.Typer(help="Federated learning: FedAvg and DP-FedAvg simulator, Flower server and client.", no_args_is_help=True)
