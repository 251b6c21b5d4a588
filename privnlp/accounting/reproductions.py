"""Epsilon of published DP-SGD settings, recomputed with privnlp's accountants.

FL-NER Table 2 (``../shared/papers/fl-dp-sequence-tagging-ner.txt``): DP-SGD on CoNLL-2003 (N = 14,987
training sentences), batch size 32, 10 epochs, noise multipliers 0.5 / 1 / 5 / 10 / 50. The paper
states no delta and no accountant (it points to TensorFlow Privacy); we use delta = 1e-5 (TF Privacy's
default, < 1/N) and Poisson sampling with q = 32 / N over ceil(10 N / 32) = 4,684 steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event as de
from dp_accounting.rdp import rdp_privacy_accountant as rdpa

from .events import quiet_absl
from .ledger import epsilon_for

__all__ = [
    "FL_NER_TABLE2",
    "FL_NER_SETTINGS",
    "Table2Row",
    "fl_ner_table2",
    "tf_privacy_legacy_epsilon",
]

#: noise multiplier -> epsilon printed in the paper's Table 2
FL_NER_TABLE2 = {0.5: 3.73, 1.0: 0.688, 5.0: 0.05, 10.0: 0.024, 50.0: 0.022}
FL_NER_SETTINGS = {"n": 14987, "batch_size": 32, "epochs": 10, "delta": 1e-5}

#: TensorFlow Privacy's historical RDP orders (``compute_dp_sgd_privacy`` before 2020): maximum 512
_LEGACY_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [128, 256, 512]


@dataclass(frozen=True)
class Table2Row:
    noise_multiplier: float
    epsilon_paper: float
    epsilon: float  # privnlp's reported value ("prv": min of dp_accounting PLD and wide RDP)
    epsilon_rdp: float  # dp_accounting RDP, orders up to 8192 (improved RDP -> DP conversion)
    epsilon_tf_privacy_legacy: (
        float  # RDP, orders <= 512, classic conversion eps = rdp + log(1/delta)/(alpha-1)
    )
    sample_rate: float
    steps: int
    delta: float


def tf_privacy_legacy_epsilon(
    noise_multiplier: float, sample_rate: float, steps: int, delta: float
) -> float:
    """What TF Privacy's old ``compute_dp_sgd_privacy`` printed: RDP over orders <= 512 and the classic
    conversion (its floor is log(1/delta)/511 = 0.0225 at delta = 1e-5, whatever the noise)."""
    with quiet_absl():
        acc = rdpa.RdpAccountant(orders=_LEGACY_ORDERS)
        acc.compose(
            de.SelfComposedDpEvent(
                de.PoissonSampledDpEvent(sample_rate, de.GaussianDpEvent(noise_multiplier)),
                int(steps),
            )
        )
        rdp = np.asarray(acc._rdp)
    return float(np.min(rdp + math.log(1 / delta) / (np.asarray(_LEGACY_ORDERS) - 1)))


def fl_ner_table2(delta: float = 1e-5) -> list[Table2Row]:
    """Our epsilon for every row of FL-NER Table 2 with the paper's settings (see the module docstring)."""
    n, b, e = FL_NER_SETTINGS["n"], FL_NER_SETTINGS["batch_size"], FL_NER_SETTINGS["epochs"]
    q, steps = b / n, math.ceil(e * n / b)
    rows = []
    for sigma, paper in FL_NER_TABLE2.items():
        runs = [(sigma, q, steps)]
        rows.append(
            Table2Row(
                sigma,
                paper,
                epsilon_for(runs, delta, "prv").epsilon,
                epsilon_for(runs, delta, "rdp").epsilon,
                tf_privacy_legacy_epsilon(sigma, q, steps, delta),
                q,
                steps,
                delta,
            )
        )
    return rows
