"""Leaky twins (see privnlp/mechanisms/testing.py) of the embedding-obfuscation defenses.

Paper: ``../shared/papers/record-level-privacy-leakage-in-fl.txt`` (countermeasures: noised / dropout
embedding, adversarial embedding (VAT), LSTM dropout; attacks: eavesdropping and watermark on the
per-round global snapshots).

Each twin keeps the real mechanism's constructor and claim but carries a bug seen in real code
that switches the protection off during *local training* (where it is supposed to act):

* ``noised_embedding`` -> :class:`LeakyNoisedEmbeddingUnits`: sigma given in "percent" and divided
  by 100 twice (a unit bug), so the noise std is ``sigma * 1e-4`` (numerically nothing);
* ``dropout_embedding`` -> :class:`LeakyDropoutEmbeddingEvalOnly`: the ``self.training`` test is
  inverted, so dropout acts in eval mode only (never while training);
* ``adversarial_embedding`` -> :class:`LeakyAdversarialEmbeddingDetached`: the VAT term is computed
  but detached (``.item()``-style bookkeeping), so it never reaches the gradient;
* ``lstm_dropout`` -> :class:`LeakyLSTMDropoutEvalOnly`: the LSTM-output dropout acts in eval mode only.

Honest note: at the paper's small settings (sigma=0.01, p=0.2) the real defenses barely change
what the eavesdropping / watermark attacks measure at the tiny ``fl.snapshots`` quick scale, so
the quick ``example()`` settings are chosen where they do (measured top-1, seeds 0 / 1, both
attacks): ``noised_embedding(sigma=0.3)`` 0.0 / 0.0 vs twin 0.75 / 0.5;
``dropout_embedding(p=0.5)`` 0.5 / 0.25 vs twin 0.75-1.0 / 0.5; ``lstm_dropout(p=0.3)`` 0.0 / 0.0
vs twin 0.25 / 0.25-0.5. ``adversarial_embedding`` stays at the paper's epsilon=1: as in the paper
VAT does not reduce the leakage there (nor at epsilon=5), so its twin ties with it on seed 0. The
twins are also caught by the direct behavioural checks in
``tests/memorization/test_twins_embedding.py`` (in training mode the twin's forward equals the
clean forward / the VAT term has no gradient), which do not depend on one noisy quick seed.
"""

from __future__ import annotations

from typing import Any

import torch

from privnlp.core.errors import InvalidArgument
from privnlp.core.registry import LEAKY_TWINS
from privnlp.core.rng import as_torch

from .embedding import (
    DropoutEmbedding,
    LSTMOutputDropout,
    NoisedEmbedding,
    adversarial_embedding_loss,
    input_embedding,
    replace_input_embedding,
)
from .mechanisms import (
    AdversarialEmbeddingDefense,
    DropoutEmbeddingDefense,
    LSTMDropoutDefense,
    NoisedEmbeddingDefense,
)

__all__ = [
    "LeakyNoisedEmbeddingUnits",
    "LeakyDropoutEmbeddingEvalOnly",
    "LeakyAdversarialEmbeddingDetached",
    "LeakyLSTMDropoutEvalOnly",
]


class _EvalOnlyDropoutEmbedding(DropoutEmbedding):
    """The bug: ``if not self.training`` (dropout in eval mode, clean embeddings while training)."""

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = self.embedding(*args, **kwargs)
        if not self.training and self.p > 0:  # BUG: inverted mode test
            keep = (self._rand(out.shape, out, False) >= self.p).to(out.dtype)
            out = out * keep / (1.0 - self.p)
        return out


class _EvalOnlyLSTMOutputDropout(LSTMOutputDropout):
    """The bug: ``if not self.training`` (LSTM-output dropout in eval mode only)."""

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        out, state = self.lstm(x, *args, **kwargs)
        if not self.training and self.p > 0:  # BUG: inverted mode test
            if isinstance(out, torch.nn.utils.rnn.PackedSequence):
                out = out._replace(data=self._drop(out.data))
            else:
                out = self._drop(out)
        return out, state


@LEAKY_TWINS.register("noised_embedding")
class LeakyNoisedEmbeddingUnits(NoisedEmbeddingDefense):
    """Deliberately broken noised embedding: same constructor and claim as ``noised_embedding``, but
    sigma is treated as a percentage and divided by 100 twice (a unit bug), so the Gaussian noise on
    the embedding outputs has std ``sigma * 1e-4`` -- local training is effectively noise-free."""

    def apply(self, model: Any, *, rng: Any) -> Any:
        _, emb = input_embedding(model)
        sigma = self.sigma / 100.0 / 100.0  # BUG: "percent" conversion applied twice
        replace_input_embedding(model, NoisedEmbedding(emb, sigma, as_torch(rng)))
        return model


@LEAKY_TWINS.register("dropout_embedding")
class LeakyDropoutEmbeddingEvalOnly(DropoutEmbeddingDefense):
    """Deliberately broken dropout embedding: same constructor and claim as ``dropout_embedding``, but
    the wrapper's ``self.training`` test is inverted, so dropout acts only in eval mode (never during
    local training, where it was supposed to regularise the memorisation of records)."""

    def apply(self, model: Any, *, rng: Any) -> Any:
        _, emb = input_embedding(model)
        replace_input_embedding(model, _EvalOnlyDropoutEmbedding(emb, self.p, as_torch(rng)))
        return model


@LEAKY_TWINS.register("adversarial_embedding")
class LeakyAdversarialEmbeddingDetached(AdversarialEmbeddingDefense):
    """Deliberately broken adversarial embedding (VAT): same constructor and claim, the VAT term is
    computed (and would show up in a logged loss) but it is detached from the graph, so it never
    contributes a gradient -- local training is plain next-token training."""

    def loss_terms(self, model: Any, inputs: Any, *, rng: Any, forward: Any = None) -> Any:
        clean, vat = adversarial_embedding_loss(
            model, inputs, epsilon=self.epsilon, xi=self.xi, rng=rng, forward=forward
        )
        return clean, self.alpha * vat.detach()  # BUG: detached (meant for logging only)


@LEAKY_TWINS.register("lstm_dropout")
class LeakyLSTMDropoutEvalOnly(LSTMDropoutDefense):
    """Deliberately broken LSTM dropout: same constructor and claim as ``lstm_dropout``, but the
    wrapper's ``self.training`` test is inverted, so the dropout on LSTM outputs acts only in eval
    mode (never during local training)."""

    def apply(self, model: Any, *, rng: Any) -> Any:
        g = as_torch(rng)
        targets = [
            (n, m)
            for n, m in model.named_modules()
            if isinstance(m, (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN))
            or type(m).__name__ in ("DPLSTM", "DPGRU", "DPRNN")
        ]
        if not targets:
            raise InvalidArgument(
                f"model: no LSTM/GRU layer found in {type(model).__name__} for LSTM dropout"
            )
        for name, mod in targets:
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, attr, _EvalOnlyLSTMOutputDropout(mod, self.p, g))
        return model
