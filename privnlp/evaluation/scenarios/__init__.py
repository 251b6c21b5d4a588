"""Evaluation scenarios: each turns (mechanism or None, seed) into observations + ground truth.

Each module of this package registers its scenarios with ``@SCENARIOS.register("name")``; the
registry (:data:`privnlp.core.registry.SCENARIOS`, which lists the modules) imports them on the first
lookup, so importing one scenario module (``privnlp.evaluation.scenarios.text``) does not import the
torch-training ones (``gradient``, ``memorization``).
"""

from __future__ import annotations

from privnlp.core.registry import SCENARIOS

get = SCENARIOS.get

__all__ = ["get", "SCENARIOS"]
