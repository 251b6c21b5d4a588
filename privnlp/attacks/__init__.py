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
    """The registered attack class called ``name``.

    Args:
        name: the registry name (see :func:`names`).

    Raises:
        InvalidArgument: no attack of that name is registered.
    """
    return ATTACKS.get(name)


def names() -> list[str]:
    """Every registered attack name, sorted (importing the modules that register them)."""
    return ATTACKS.names()


__all__ = ["get", "names", "register", "ATTACKS"]
