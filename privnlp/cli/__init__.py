"""The ``privnlp`` command line (typer)."""
