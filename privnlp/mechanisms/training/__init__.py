"""Private training: DP-SGD on opacus (hard budget, dp_accounting ledger, checkpoints), large-batch
DP, frozen embeddings, composable update transforms and embedding obfuscation.

Papers: ``../shared/papers/dp-bert-and-dp-wordpiece.txt``, ``film-recovering-private-text-in-fl.txt``,
``rlg-revealing-labels-from-gradients.txt``, ``record-level-privacy-leakage-in-fl.txt``,
``lamp-extracting-text-from-gradients.txt``.

Importing this package imports torch (it registers the mechanisms); ``import privnlp`` does not.
"""

from __future__ import annotations

from . import mechanisms as _mechanisms  # noqa: F401  (registers the defenses + the leaky twin)
from . import twins_embedding as _twins_embedding  # noqa: F401  (leaky twins)
from . import twins_transforms as _twins_transforms  # noqa: F401  (leaky twins)
from .dp_sgd import (
    PrivateTraining,
    per_sample_classification_loss,
    per_sample_lm_loss,
    per_sample_token_loss,
)
from .embedding import freeze_embeddings
from .engine import Budget, Clipping, DPEngine, Noise, Sampling, make_private, private_training
from .large_batch import effective_noise_multiplier, sharded_dp_mean
from .loop import TrainResult, head_loss, train_private
from .mechanisms import (
    DPSGD,
    AdversarialEmbeddingDefense,
    DropoutEmbeddingDefense,
    FrozenEmbeddings,
    GaussianNoiseUpdate,
    GradDropDefense,
    GradientPruningDefense,
    LeakyDPSGDNoClipping,
    LSTMDropoutDefense,
    NoisedEmbeddingDefense,
    RandomMaskingDefense,
    SignSGDDefense,
)
from .transforms import (
    ClipUpdate,
    Compose,
    GaussianNoise,
    GradDrop,
    GradientPruning,
    RandomMasking,
    SignSGD,
    UpdateTransform,
    apply_to_model_grads,
)

__all__ = [
    "DPSGD",
    "FrozenEmbeddings",
    "GaussianNoiseUpdate",
    "GradDropDefense",
    "GradientPruningDefense",
    "RandomMaskingDefense",
    "SignSGDDefense",
    "AdversarialEmbeddingDefense",
    "DropoutEmbeddingDefense",
    "LSTMDropoutDefense",
    "NoisedEmbeddingDefense",
    "LeakyDPSGDNoClipping",
    "PrivateTraining",
    "DPEngine",
    "Noise",
    "Sampling",
    "Clipping",
    "Budget",
    "make_private",
    "private_training",
    "train_private",
    "head_loss",
    "TrainResult",
    "per_sample_lm_loss",
    "per_sample_classification_loss",
    "per_sample_token_loss",
    "freeze_embeddings",
    "sharded_dp_mean",
    "effective_noise_multiplier",
    "UpdateTransform",
    "Compose",
    "ClipUpdate",
    "GaussianNoise",
    "GradDrop",
    "GradientPruning",
    "RandomMasking",
    "SignSGD",
    "apply_to_model_grads",
]
