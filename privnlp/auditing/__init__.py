"""Empirical privacy auditing: an audited lower bound on epsilon beside every DP claim (issue #18).

Layer: between the mechanisms and the evaluation. ``privnlp.auditing`` may import the mechanisms (its
audits call them as users do); the mechanisms never import it; ``privnlp.evaluation`` calls it lazily
(``privnlp evaluate --audit-dp``).

- :mod:`.bounds`: from a distinguishing game to epsilon -- Clopper-Pearson (Jagielski et al. 2020), the
  Gaussian trade-off curve (GDP), one run (Steinke, Nasr & Jagielski 2023; Mahloujifar, Melis &
  Chaudhuri 2025).
- one audit per DP defense, registered in :data:`privnlp.core.registry.AUDITS` by :mod:`.audits`:
  ``dp_sgd`` (:mod:`.training`), ``dp_fedavg`` (:mod:`.federated`), ``dp_wordpiece`` (:mod:`.vocab`),
  ``laplace_metric`` / ``vickrey`` / ``vickrey_k`` / ``mahalanobis`` (:mod:`.text`).
- :func:`run_dp_audit` (cached) and :func:`audit_report`; card / index rendering in :mod:`.render`.

Importing this package does not import torch.

    from privnlp.auditing import run_dp_audit
    suite = run_dp_audit("vickrey", preset="quick", seed=0)
    for r in suite.results:
        print(r.system, r.claimed_epsilon, r.audited.epsilon, r.violated)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .result import DPAuditResult, DPAuditSuite, EpsilonBound
from .runner import audit_report, has_audit, run_dp_audit

if TYPE_CHECKING:  # for type checkers and the API reference (static analysis); loaded lazily below
    from .bounds import (
        clopper_pearson,
        epsilon_lower_bound,
        epsilon_lower_bound_gdp,
        gdp_epsilon,
        one_run_audit,
        one_run_epsilon_lower_bound,
        one_run_epsilon_lower_bound_gdp,
        threshold_audit,
    )

#: loaded on first access (PEP 562): the bounds need scipy / dp_accounting (~2 s), and this package sits on
#: the CLI's light path (the cards renderer imports it)
_BOUNDS = (
    "clopper_pearson",
    "epsilon_lower_bound",
    "epsilon_lower_bound_gdp",
    "gdp_epsilon",
    "one_run_audit",
    "one_run_epsilon_lower_bound",
    "one_run_epsilon_lower_bound_gdp",
    "threshold_audit",
)


def __getattr__(name: str) -> Any:
    if name in _BOUNDS:
        value = getattr(importlib.import_module(".bounds", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EpsilonBound",
    "clopper_pearson",
    "epsilon_lower_bound",
    "epsilon_lower_bound_gdp",
    "gdp_epsilon",
    "one_run_audit",
    "one_run_epsilon_lower_bound",
    "one_run_epsilon_lower_bound_gdp",
    "threshold_audit",
    "DPAuditResult",
    "DPAuditSuite",
    "run_dp_audit",
    "audit_report",
    "has_audit",
]
