"""Evaluation: scenarios (threat model -> observation), the audit runner, sweeps, reports, cards.

from privnlp.evaluation import audit
report = audit("vickrey", seeds=[0, 1, 2])
report.save("reports")

The federated secret-sharer grid (:mod:`privnlp.evaluation.secret_sharer`) trains a federated LM: it
and torch load on first access of its names (module ``__getattr__``), so ``import privnlp.evaluation``
stays torch-free.
"""

from __future__ import annotations

import importlib
from typing import Any

from .audit import FunctionMechanism, audit
from .cards import PRESETS, evaluate_all, evaluate_defense, render_mechanism_card
from .sweep import SweepResult, sweep, with_params

#: name -> submodule, imported on first access
_LAZY = {
    "SecretSharerCell": "secret_sharer",
    "SecretSharerGrid": "secret_sharer",
    "secret_sharer_grid": "secret_sharer",
    "secret_sharer_run": "secret_sharer",
}

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


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'privnlp.evaluation' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"privnlp.evaluation.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
