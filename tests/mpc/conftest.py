import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def alice():
    """Alice's tiny TextCNN trained in plaintext on the bundled sentiment set (hashed public
    encoder, 64-d, to keep the fast tests fast) + held-out embeddings for Bob."""
    from privnlp.mechanisms.mpc._crypten_shim import crypten_available

    if not crypten_available():
        pytest.skip("CrypTen is not installed (pip install --no-deps crypten==0.4.1)")
    from privnlp.mechanisms.mpc.textcnn import train_alice_model

    model, xt, yt = train_alice_model(n=300, encoder="hashed", dim=64, epochs=8, seed=0)
    return model, xt, yt


@pytest.fixture(scope="session")
def heldout(alice):
    """1000 held-out inputs: the real held-out embeddings plus seeded perturbations of them."""
    _, xt, _ = alice
    rng = np.random.default_rng(1)
    reps = int(np.ceil(1000 / len(xt)))
    x = np.concatenate([xt + (0 if i == 0 else rng.normal(0, 0.3, xt.shape)) for i in range(reps)])[:1000]
    return x.astype(np.float32)
