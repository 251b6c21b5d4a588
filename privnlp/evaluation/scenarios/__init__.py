"""Evaluation scenarios: each turns (mechanism or None, seed) into observations + ground truth.

Every module in this package is imported on first registry lookup; each registers its
scenarios with ``@SCENARIOS.register("name")``.
"""

from __future__ import annotations

import importlib
import pkgutil

from privnlp.core.registry import SCENARIOS

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

get = SCENARIOS.get

__all__ = ["get", "SCENARIOS"]
