"""privnlp — a defense-first privacy toolkit for NLP.

Every defense ("mechanism") ships with its privacy claim *and* its measured leakage: the
attacks from the literature are built in as evaluators.

Importing ``privnlp`` is light (no torch); subpackages load on first use::

    import privnlp
    privnlp.mechanisms.get("vickrey")
    privnlp.attacks.get("film")
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBPACKAGES = (
    "core",
    "accounting",
    "data",
    "models",
    "metrics",
    "mechanisms",
    "attacks",
    "auditing",
    "evaluation",
    "cli",
)

__all__ = [
    "__version__",
    "core",
    "accounting",
    "data",
    "models",
    "metrics",
    "mechanisms",
    "attacks",
    "auditing",
    "evaluation",
    "cli",
]


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"privnlp.{name}")
    raise AttributeError(f"module 'privnlp' has no attribute {name!r}")
