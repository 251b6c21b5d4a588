"""Attacks on released text artefacts: Bayesian inversion of perturbed text (Vickrey paper),
vocabulary membership (DP WordPiece), fragment reconstruction (phrase-pair fragmentation).

Every module in this package is imported here so its attacks register.
"""
from __future__ import annotations

import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")
