"""Moved: DP-FedAvg's accounting lives in :mod:`privnlp.accounting.federated` (one accounting package
for every DP mechanism, issue 28 item 4). This module re-exports it so that existing imports keep
working."""

from privnlp.accounting.federated import *  # noqa: F403
from privnlp.accounting.federated import __all__  # noqa: F401
