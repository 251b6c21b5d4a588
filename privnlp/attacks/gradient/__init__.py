"""Gradient-leakage evaluators: FILM, RLG, LAMP (with DLG and TAG as presets of LAMP's engine).

Importing this package registers ``film``, ``rlg``, ``lamp``, ``dlg`` and ``tag`` in
:data:`privnlp.core.registry.ATTACKS`. Papers in ``../shared/papers/``.
"""

from __future__ import annotations

from .film import FILM, BagOfWords, beam_search, recover_bag, reorder
from .lamp import DLG, LAMP, TAG, LampSearch, aux_lm, reconstruct
from .rlg import RLG, LabelSet, estimate_num_labels, reveal_labels, sign_baseline

__all__ = [
    "FILM",
    "RLG",
    "LAMP",
    "DLG",
    "TAG",
    "BagOfWords",
    "recover_bag",
    "beam_search",
    "reorder",
    "LabelSet",
    "estimate_num_labels",
    "reveal_labels",
    "sign_baseline",
    "aux_lm",
    "reconstruct",
    "LampSearch",
]
