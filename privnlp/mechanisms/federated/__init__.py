"""Federated learning: partitioning, FedAvg / user-level DP-FedAvg, the embedded simulator with on-disk
snapshots, a real Flower deployment, federated NER and the federated secret sharer.

Papers (``../shared/papers/``): ``unintended-memorization-under-fl.txt`` (DP-FedAvg Algorithm 1,
fixed-size rounds, IID vs non-IID users, secret sharer p_u / p_e), ``fl-dp-sequence-tagging-ner.txt``
(FedAvg + client DP-SGD for a BiLSTM NER model), ``wikipii-pii-extraction-federated.txt`` (span
metrics, many workers), ``record-level-privacy-leakage-in-fl.txt`` (M of N clients, global snapshots).

Importing this package imports torch (it registers ``fedavg`` / ``dp_fedavg`` and the leaky twin);
Flower (``flwr``) is imported by :mod:`.flower`, which only ``privnlp fl`` commands, the ServerApp and the tests
load.
"""

from __future__ import annotations

from . import mechanisms as _mechanisms  # noqa: F401  (registers fedavg, dp_fedavg + leaky twin)
from . import twins as _twins  # noqa: F401  (leaky twin of fedavg)
from .accounting import (
    RoundRun,
    calibrate_user_noise,
    dp_fedavg_adversary_bounds,
    headline_user_epsilon,
    round_event,
    user_epsilon,
)
from .aggregation import AggregateInfo, clip_delta, dp_average, global_norm, weighted_average
from .client import (
    ClientData,
    FitIns,
    FitRes,
    Task,
    lm_client_data,
    lm_task,
    local_update,
    tagger_task,
)
from .mechanisms import DPFedAvg, FedAvg, LeakyDPFedAvgWeighted
from .ner import (
    NERData,
    NERRow,
    NERTable,
    evaluate_tagger,
    federated_ner,
    federated_ner_table,
    ner_data,
)
from .partition import Partition, partition, partition_dirichlet, partition_iid, partition_natural
from .simulator import FedRunResult, FedSimulator, RoundRecord, select_clients

__all__ = [
    "FedAvg",
    "DPFedAvg",
    "LeakyDPFedAvgWeighted",
    "FedSimulator",
    "FedRunResult",
    "RoundRecord",
    "select_clients",
    "Partition",
    "partition",
    "partition_iid",
    "partition_dirichlet",
    "partition_natural",
    "ClientData",
    "FitIns",
    "FitRes",
    "Task",
    "lm_client_data",
    "lm_task",
    "tagger_task",
    "local_update",
    "clip_delta",
    "dp_average",
    "global_norm",
    "weighted_average",
    "AggregateInfo",
    "RoundRun",
    "calibrate_user_noise",
    "dp_fedavg_adversary_bounds",
    "headline_user_epsilon",
    "round_event",
    "user_epsilon",
    "NERData",
    "NERRow",
    "NERTable",
    "evaluate_tagger",
    "federated_ner",
    "federated_ner_table",
    "ner_data",
]
