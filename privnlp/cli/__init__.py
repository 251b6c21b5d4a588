"""The ``privnlp`` command line (typer): ``privnlp --help`` lists the commands.

The public interface of this package is the ``privnlp`` command itself; :data:`app` is the typer
application behind it (``python -m privnlp.cli.main``). Commands import their heavy dependencies
inside the function body, so importing this package stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from .main import app

        return app
    raise AttributeError(f"module 'privnlp.cli' has no attribute {name!r}")
