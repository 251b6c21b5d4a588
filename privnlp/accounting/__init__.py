"""DP accounting: ledgers, calibration and budgets for DP-SGD style training.

The persisted source of truth is a :class:`DPLedger`: a run-length list of
``(noise_multiplier, sample_rate, steps)`` Poisson-subsampled Gaussian events that maps 1:1 to
a ``dp_accounting`` event (``ComposedDpEvent`` of ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
GaussianDpEvent(sigma)), steps)``). Epsilon is computed both with an opacus accountant (``prv``
default, ``rdp``) and with the matching ``dp_accounting`` accountant (PLD for ``prv``, RDP for
``rdp``); the reported / enforced epsilon is the larger of the two and the two are cross-checked.

Papers: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (DP-SGD accounting, the sharded-noise
relation sigma*sqrt(P)), Abadi et al. 2016 (moments accountant) via opacus / dp_accounting.

This package does not import torch at import time (opacus / dp_accounting are imported lazily).
"""
from __future__ import annotations

from .ledger import (ACCOUNTANTS, BudgetGuard, DPLedger, LedgerRun, calibrate_noise_multiplier,
                     check_delta, default_delta, effective_noise_multiplier, epsilon_for,
                     epsilon_no_amplification)

__all__ = ["ACCOUNTANTS", "BudgetGuard", "DPLedger", "LedgerRun", "calibrate_noise_multiplier", "check_delta",
           "default_delta", "effective_noise_multiplier", "epsilon_for", "epsilon_no_amplification"]
