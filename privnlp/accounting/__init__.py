"""DP accounting: THE ledger of every DP mechanism, calibration and budgets.

The persisted source of truth of every DP claim is one :class:`DPLedger`: DP-SGD steps (run-length
``(noise_multiplier, sample_rate, steps)`` Poisson-subsampled Gaussian events, 1:1 with a
``dp_accounting`` event), DP-FedAvg rounds and each client's DP-SGD steps
(:mod:`privnlp.accounting.federated`), DP-vocabulary threshold releases and metric-DP text passes
(:mod:`privnlp.accounting.events`). Its epsilon is stated per adversary
(:meth:`DPLedger.adversary_bounds`, :mod:`privnlp.accounting.adversaries`,
:class:`privnlp.core.claims.AdversaryBound`); one budget check (:meth:`DPLedger.check` /
:meth:`DPLedger.charge`) refuses any kind of event before it would exceed the target. The reported
epsilon comes from the tightest sound accountant (``prv``, default: min of dp_accounting PLD and RDP
over one wide order list; ``rdp``: the wide-order RDP); opacus' accountants are diagnostics that never
throw a finished run away. Duplicates (group privacy): :mod:`privnlp.accounting.duplicates`.

Papers: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (DP-SGD accounting, the sharded-noise
relation sigma*sqrt(P), DP WordPiece), ``unintended-memorization-under-fl.txt`` (DP-FedAvg), Abadi et
al. 2016 (moments accountant) via opacus / dp_accounting.

The names below are loaded on first access (PEP 562): importing a light submodule
(:mod:`privnlp.accounting.duplicates`, which the CLI imports at module level) does not load
dp_accounting / scipy. Nothing here imports torch (opacus only inside the diagnostic).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and the API reference (static analysis); loaded lazily below
    from .adversaries import (
        dp_sgd_adversary_bounds,
        metric_dp_adversary_bounds,
        vocab_adversary_bounds,
    )
    from .duplicates import DuplicateReport, find_duplicates, group_epsilon
    from .events import RDP_ORDERS, LedgerRun, MetricDPRun, ThresholdRelease, gaussian_epsilon
    from .federated import (
        RoundRun,
        dp_fedavg_adversary_bounds,
        headline_user_epsilon,
        no_amplification_epsilon,
    )
    from .ledger import (
        ACCOUNTANTS,
        LEDGER_FORMAT,
        REPORTED,
        BudgetGuard,
        DPLedger,
        EpsilonEstimate,
        calibrate_noise_multiplier,
        check_accounting_configuration,
        check_delta,
        default_delta,
        effective_noise_multiplier,
        epsilon_for,
        epsilon_no_amplification,
    )

#: public name -> the submodule that defines it
_EXPORTS = {
    "DuplicateReport": "duplicates",
    "find_duplicates": "duplicates",
    "group_epsilon": "duplicates",
    "dp_fedavg_adversary_bounds": "federated",
    "no_amplification_epsilon": "federated",
    "headline_user_epsilon": "federated",
    "RoundRun": "federated",
    "LedgerRun": "events",
    "ThresholdRelease": "events",
    "MetricDPRun": "events",
    "RDP_ORDERS": "events",
    "gaussian_epsilon": "events",
    "dp_sgd_adversary_bounds": "adversaries",
    "vocab_adversary_bounds": "adversaries",
    "metric_dp_adversary_bounds": "adversaries",
    "ACCOUNTANTS": "ledger",
    "REPORTED": "ledger",
    "LEDGER_FORMAT": "ledger",
    "BudgetGuard": "ledger",
    "DPLedger": "ledger",
    "EpsilonEstimate": "ledger",
    "calibrate_noise_multiplier": "ledger",
    "check_accounting_configuration": "ledger",
    "check_delta": "events",
    "default_delta": "ledger",
    "effective_noise_multiplier": "ledger",
    "epsilon_for": "ledger",
    "epsilon_no_amplification": "ledger",
}

__all__ = [
    "ACCOUNTANTS",
    "BudgetGuard",
    "DPLedger",
    "DuplicateReport",
    "EpsilonEstimate",
    "LEDGER_FORMAT",
    "LedgerRun",
    "MetricDPRun",
    "RDP_ORDERS",
    "REPORTED",
    "RoundRun",
    "ThresholdRelease",
    "calibrate_noise_multiplier",
    "check_accounting_configuration",
    "check_delta",
    "default_delta",
    "dp_fedavg_adversary_bounds",
    "dp_sgd_adversary_bounds",
    "effective_noise_multiplier",
    "epsilon_for",
    "epsilon_no_amplification",
    "find_duplicates",
    "gaussian_epsilon",
    "group_epsilon",
    "headline_user_epsilon",
    "metric_dp_adversary_bounds",
    "no_amplification_epsilon",
    "vocab_adversary_bounds",
]


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
