"""MPC inference (CrypTen): ``crypten_textcnn`` (pi_TEXT of
../shared/papers/mpc-cnn-private-text-classification.txt).

Importing this package registers the mechanism and its leaky twin; CrypTen itself is imported
lazily (``_crypten_shim.import_crypten``) when a protocol actually runs.
"""

from __future__ import annotations

from .textcnn import (
    CryptenTextCNN,
    LeakyCryptenTextCNN,
    MPCResult,
    load_alice_model,
    save_alice_model,
    train_alice_model,
)

__all__ = [
    "CryptenTextCNN",
    "LeakyCryptenTextCNN",
    "MPCResult",
    "train_alice_model",
    "save_alice_model",
    "load_alice_model",
]
