"""Gradient-leakage evaluators: FILM, RLG, LAMP (with DLG and TAG as presets of LAMP's engine).

Importing this package registers ``film``, ``rlg``, ``lamp``, ``dlg`` and ``tag`` in
:data:`privnlp.core.registry.ATTACKS`. Papers in ``../shared/papers/``.
"""
from __future__ import annotations

from . import rlg  # noqa: F401

try:
    from . import film  # noqa: F401
except ImportError as e:  # pragma: no cover - module being written
    if "privnlp.attacks.gradient.film" not in str(e) and "film" not in str(e):
        raise
try:
    from . import lamp  # noqa: F401
except ImportError as e:  # pragma: no cover
    if "lamp" not in str(e):
        raise

__all__ = ["rlg", "film", "lamp"]
