"""The defenses. Look them up by name: ``privnlp.mechanisms.get("dp_sgd")``.

Subpackages: ``training`` (DP-SGD, frozen embeddings, update transforms, embedding
obfuscation), ``federated`` (FedAvg, DP-FedAvg), ``text`` (metric-DP word perturbation),
``vocab`` (DP WordPiece), ``fragmentation`` (phrase-pair fragmentation), ``mpc`` (CrypTen
inference); ``testing`` holds deliberately leaky twins used by the tests.
"""

from __future__ import annotations

from typing import Any

from privnlp.core.registry import MECHANISMS

register = MECHANISMS.register


def get(name: str) -> Any:
    """The registered mechanism class called ``name``.

    Args:
        name: the registry name (see :func:`names`).

    Raises:
        InvalidArgument: no mechanism of that name is registered.
    """
    return MECHANISMS.get(name)


def names() -> list[str]:
    """Every registered mechanism name, sorted (importing the modules that register them)."""
    return MECHANISMS.names()


__all__ = ["get", "names", "register", "MECHANISMS"]
