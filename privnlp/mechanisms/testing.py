"""Deliberately leaky twins of the bundled defenses, for tests and for the leakage cards.

A leaky twin looks like its mechanism (same constructor, same claim!) but breaks the
guarantee in a way seen in the wild: a sanitizer that never returns the input word, a DP
optimizer that forgets to clip, a vocabulary that counts occurrences instead of distinct
contributors, an MPC protocol that opens an intermediate value... The paired attacks must
report a twin as leaking more than the real mechanism — otherwise the attacks (or the
scenario) are too weak to be trusted as evaluators.

Twins live next to the mechanism they imitate and are registered with
``@LEAKY_TWINS.register("<mechanism name>")``; this module is the one place to find them.
"""

from __future__ import annotations

from typing import Any

from privnlp.core.registry import LEAKY_TWINS

__all__ = ["get", "names", "LEAKY_TWINS"]


def get(mechanism_name: str) -> Any:
    """The leaky twin class registered for ``mechanism_name``."""
    return LEAKY_TWINS.get(mechanism_name)


def names() -> list[str]:
    """Names of the mechanisms that have a leaky twin."""
    return LEAKY_TWINS.names()
