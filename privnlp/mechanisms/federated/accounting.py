"""Moved: DP-FedAvg's accounting lives in :mod:`privnlp.accounting.federated` and its rounds are recorded
in the one ledger of the package, :class:`privnlp.accounting.DPLedger` (issue 28 item 4). This module
re-exports the accounting functions so that existing imports keep working."""

from privnlp.accounting.federated import *  # noqa: F403
from privnlp.accounting.federated import __all__  # noqa: F401
