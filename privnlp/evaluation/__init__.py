"""Evaluation: scenarios (threat model -> observation), the audit runner, sweeps, reports, cards.

from privnlp.evaluation import audit
report = audit("vickrey", seeds=[0, 1, 2])
report.save("reports")
"""

from __future__ import annotations

from .audit import FunctionMechanism, audit
from .cards import PRESETS, evaluate_all, evaluate_defense, render_mechanism_card
from .secret_sharer import SecretSharerCell, SecretSharerGrid, secret_sharer_grid, secret_sharer_run
from .sweep import SweepResult, sweep, with_params

__all__ = [
    "audit",
    "FunctionMechanism",
    "sweep",
    "SweepResult",
    "with_params",
    "evaluate_all",
    "evaluate_defense",
    "render_mechanism_card",
    "PRESETS",
    "secret_sharer_grid",
    "secret_sharer_run",
    "SecretSharerGrid",
    "SecretSharerCell",
]
