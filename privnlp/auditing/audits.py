"""Registers one empirical DP audit per DP defense in :data:`privnlp.core.registry.AUDITS`.

Each entry is ``fn(cls, *, name, system, preset, seed, confidence) -> list[DPAuditResult]`` where ``cls`` is
the registered defense class or its leaky twin (same constructor, same claim). Importing this module imports
torch (the DP-SGD and DP-FedAvg audits train with it): the AUDITS registry loads it on the first lookup
only, so ``import privnlp.auditing`` stays light.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from privnlp.core.registry import AUDITS

from .federated import audit_dp_fedavg
from .text import TEXT_MECHANISMS, audit_metric_dp
from .training import audit_dp_sgd
from .vocab import audit_dp_wordpiece

__all__ = ["audit_for"]

AUDITS.register("dp_sgd")(audit_dp_sgd)
AUDITS.register("dp_fedavg")(audit_dp_fedavg)
AUDITS.register("dp_wordpiece")(audit_dp_wordpiece)
for _n in TEXT_MECHANISMS:
    AUDITS.register(_n)(partial(audit_metric_dp, name=_n))


def audit_for(name: str) -> Any:
    """The audit function registered for defense ``name`` (``InvalidArgument`` if none)."""
    return AUDITS.get(name)
