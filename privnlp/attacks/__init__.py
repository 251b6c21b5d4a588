"""The evaluators (attacks from the literature). ``privnlp.attacks.get("film")``.

Subpackages: ``gradient`` (FILM, RLG, LAMP/DLG/TAG), ``memorization`` (canary exposure and
extraction, eavesdropping/watermark correlation attacks), ``text`` (perturbation inversion,
fragment reconstruction, vocabulary membership), ``mpc`` (party-view audit).
"""
from __future__ import annotations

from typing import Any

from privnlp.core.registry import ATTACKS

register = ATTACKS.register


def get(name: str) -> Any:
    """The registered attack class called ``name``."""
    return ATTACKS.get(name)


def names() -> list[str]:
    return ATTACKS.names()


__all__ = ["get", "names", "register", "ATTACKS"]
