"""Session fixtures: tiny canary LMs trained once (with and without the canary)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

#: |R| = 1000 keeps the exact enumeration cheap in the fast tests (log2 |R| = 9.97 bits)
PATTERN = "my pin code is {digits:3}"


@pytest.fixture(scope="session")
def canary_lms():
    """Two tiny GPT-2s on the same corpus: the canary inserted 16 times, and never inserted
    (the ``without`` model is scored on the *same* canary)."""
    import torch

    torch.set_num_threads(1)
    from privnlp.evaluation.scenarios.memorization import train_canary_lm

    with_c = train_canary_lm(None, preset="quick", pattern=PATTERN, rng=np.random.default_rng(7))
    without = train_canary_lm(
        None, preset="quick", pattern=PATTERN, repeats=0, rng=np.random.default_rng(7)
    )
    # same seed -> same corpus and the same canary drawn; only the insertion differs
    assert with_c["canaries"][0].text == without["canaries"][0].text
    return with_c, without
