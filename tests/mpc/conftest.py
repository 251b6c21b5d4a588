import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _train(preset):
    from privnlp.mechanisms.mpc._crypten_shim import crypten_available

    if not crypten_available():
        pytest.skip("CrypTen is not installed (pip install --no-deps crypten==0.4.1)")
    from privnlp.mechanisms.mpc.textcnn import train_alice_model

    return train_alice_model(n=300, encoder="hashed", dim=64, epochs=8, seed=0, preset=preset)


@pytest.fixture(scope="session")
def alice():
    """Alice's tiny TextCNN ("paper" preset) trained in plaintext on the bundled sentiment set
    (hashed public encoder, 64-d, to keep the fast tests fast) + held-out embeddings for Bob."""
    return _train("paper")


@pytest.fixture(scope="session")
def alice_fast():
    """The same with the "fast" preset (stride-2 convs, 1 channel per branch, pool 2)."""
    return _train("fast")


@pytest.fixture(scope="session")
def heldout(alice):
    """1000 held-out inputs: the real held-out embeddings plus seeded perturbations of them."""
    _, xt, _ = alice
    rng = np.random.default_rng(1)
    reps = int(np.ceil(1000 / len(xt)))
    x = np.concatenate([xt + (0 if i == 0 else rng.normal(0, 0.3, xt.shape)) for i in range(reps)])[
        :1000
    ]
    return x.astype(np.float32)
