import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def lm_victim():
    import torch

    torch.set_num_threads(1)
    from privnlp.evaluation.scenarios.gradient import lm_victim as build

    return build("quick", 0)
