"""Moved: DP-FedAvg's accounting lives in :mod:`privnlp.accounting.federated` and its rounds are recorded
in the one ledger of the package, :class:`privnlp.accounting.DPLedger` (issue 28 item 4). This module
re-exports the accounting functions so that existing imports keep working."""

from typing import Any

from privnlp.accounting.federated import *  # noqa: F403
from privnlp.accounting.federated import __all__  # noqa: F401


def __getattr__(name: str) -> Any:
    # TEMPORARY: FedLedger folded into DPLedger; resolves until flower.py has switched, then deleted
    if name == "FedLedger":
        from privnlp.accounting.ledger import DPLedger

        return DPLedger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
