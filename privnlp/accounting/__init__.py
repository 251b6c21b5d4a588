"""DP accounting: ledgers, calibration and budgets for DP-SGD style training.

The persisted source of truth is a :class:`DPLedger`: a run-length list of
``(noise_multiplier, sample_rate, steps)`` Poisson-subsampled Gaussian events that maps 1:1 to
a ``dp_accounting`` event (``ComposedDpEvent`` of ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
GaussianDpEvent(sigma)), steps)``). The reported / enforced epsilon comes from the tightest sound
accountant (``prv``, default: min of dp_accounting PLD and RDP over a wide order range; ``rdp``: the
wide-order RDP); opacus' accountants are diagnostics that never throw a finished run away.
Duplicates (group privacy): :mod:`privnlp.accounting.duplicates`. Federated learning (DP-FedAvg's
user-level rounds per adversary, client DP-SGD's per-client ledgers): :mod:`privnlp.accounting.federated`
(:class:`FedLedger`, :func:`dp_fedavg_adversary_bounds`). Every ledger states its epsilon per adversary
where adversaries differ (:class:`privnlp.core.claims.AdversaryBound`).

Papers: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (DP-SGD accounting, the sharded-noise
relation sigma*sqrt(P)), Abadi et al. 2016 (moments accountant) via opacus / dp_accounting.

This package does not import torch at import time (opacus / dp_accounting are imported lazily).
"""

from __future__ import annotations

from .duplicates import DuplicateReport, find_duplicates, group_epsilon
from .federated import FedLedger, dp_fedavg_adversary_bounds, no_amplification_epsilon
from .ledger import (
    ACCOUNTANTS,
    REPORTED,
    BudgetGuard,
    DPLedger,
    LedgerRun,
    calibrate_noise_multiplier,
    check_accounting_configuration,
    check_delta,
    default_delta,
    effective_noise_multiplier,
    epsilon_for,
    epsilon_no_amplification,
)

__all__ = [
    "ACCOUNTANTS",
    "REPORTED",
    "BudgetGuard",
    "DPLedger",
    "DuplicateReport",
    "FedLedger",
    "dp_fedavg_adversary_bounds",
    "no_amplification_epsilon",
    "LedgerRun",
    "calibrate_noise_multiplier",
    "check_accounting_configuration",
    "check_delta",
    "default_delta",
    "effective_noise_multiplier",
    "epsilon_for",
    "epsilon_no_amplification",
    "find_duplicates",
    "group_epsilon",
]
