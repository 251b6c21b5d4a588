"""A tiny LSTM language model (the model family of the record-level leakage paper).

Paper: ``../shared/papers/record-level-privacy-leakage-in-fl.txt`` (Sec. V-A: an embedding layer
followed by LSTM layers, trained with asynchronous FedAvg; the countermeasures of Sec. VI —
noised / dropout / adversarial embedding and LSTM dropout — act on its embedding and LSTM outputs).

:class:`LSTMLanguageModel` speaks the same call convention as the Hugging Face causal LMs privnlp
uses (``model(input_ids=..., attention_mask=..., position_ids=..., labels=...)`` returns an object
with ``.logits`` and, given ``labels``, ``.loss`` = mean next-token cross-entropy over labels that
are not -100, shifted inside the model like GPT-2), ``get_input_embeddings()`` and
``config.n_positions``, so :func:`privnlp.models.train_lm`, the memorization attacks and the
embedding defenses work on it unchanged. ``position_ids`` are accepted and ignored (recurrence
encodes position); right padding needs no mask because the LSTM is causal.

Each LSTM layer is its own single-layer ``nn.LSTM`` (in ``self.lstms``), so LSTM dropout
(:func:`privnlp.mechanisms.training.embedding.apply_lstm_dropout`) acts on the output of every
layer, as in the paper. Written by hand: it is 40 lines and no library ships an HF-compatible one.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from privnlp.core.errors import InvalidArgument, check_range

from ._seed import seeded

__all__ = ["LSTMLanguageModel", "LSTMLMOutput", "tiny_lstm_lm"]


@dataclass(frozen=True)
class LSTMLMOutput:
    """``logits`` ``[B, T, V]``; ``loss`` (scalar) when labels were given."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


class LSTMLanguageModel(nn.Module):
    """Embedding -> ``num_layers`` LSTM layers -> linear output (optionally tied to the embedding).

    With ``tie_word_embeddings`` the output projection reuses the embedding matrix; when
    ``hidden != emb_dim`` a linear map hidden -> emb_dim is inserted before it.

    Args:
        vocab_size: the number of token ids, an integer in [2, 10**7].
        emb_dim: embedding width, an integer in [1, 10**5].
        hidden: LSTM hidden width, an integer in [1, 10**5].
        num_layers: stacked LSTM layers, an integer in [1, 16].
        tie_word_embeddings: reuse the embedding matrix as the output projection.
        n_positions: the longest sequence it is meant for (recorded in ``config``; the LSTM itself has no
            limit), an integer in [2, 10**6].

    Raises:
        InvalidArgument: an argument out of range; (``forward``) ``input_ids`` not ``[batch, time]``.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        emb_dim: int = 64,
        hidden: int = 128,
        num_layers: int = 1,
        tie_word_embeddings: bool = False,
        n_positions: int = 128,
    ) -> None:
        check_range("vocab_size", vocab_size, 2, 10**7, integer=True)
        check_range("emb_dim", emb_dim, 1, 10**5, integer=True)
        check_range("hidden", hidden, 1, 10**5, integer=True)
        check_range("num_layers", num_layers, 1, 16, integer=True)
        check_range("n_positions", n_positions, 2, 10**6, integer=True)
        super().__init__()
        self.vocab_size = int(vocab_size)
        self.emb_dim = int(emb_dim)
        self.hidden = int(hidden)
        self.num_layers = int(num_layers)
        self.tie_word_embeddings = bool(tie_word_embeddings)
        self.n_positions = int(n_positions)
        self.config = SimpleNamespace(
            vocab_size=self.vocab_size,
            n_positions=self.n_positions,
            n_embd=self.emb_dim,
            hidden=self.hidden,
            num_layers=self.num_layers,
            tie_word_embeddings=self.tie_word_embeddings,
            model_type="lstm_lm",
        )
        self.embed = nn.Embedding(self.vocab_size, self.emb_dim)
        dims = [self.emb_dim] + [self.hidden] * self.num_layers
        self.lstms = nn.ModuleList(
            nn.LSTM(dims[i], dims[i + 1], batch_first=True) for i in range(self.num_layers)
        )
        if self.tie_word_embeddings:
            self.proj = (
                nn.Linear(self.hidden, self.emb_dim)
                if self.hidden != self.emb_dim
                else nn.Identity()
            )
            self.head = None
        else:
            self.proj = nn.Identity()
            self.head = nn.Linear(self.hidden, self.vocab_size)

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **_: Any,
    ) -> LSTMLMOutput:
        if input_ids.dim() != 2:
            raise InvalidArgument(
                f"input_ids must be [batch, time]; got shape {tuple(input_ids.shape)}"
            )
        x = self.embed(input_ids)
        for layer in self.lstms:
            x, _state = layer(x)
        x = self.proj(x)
        if self.head is None:
            w = (
                self.embed.weight
                if isinstance(self.embed, nn.Embedding)
                else self.get_input_embeddings().weight
            )
            logits = x @ w.t()
        else:
            logits = self.head(x)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]),
                labels[:, 1:].reshape(-1),
                ignore_index=-100,
            )
        return LSTMLMOutput(logits=logits, loss=loss)


def tiny_lstm_lm(
    vocab_size: int,
    *,
    emb_dim: int = 64,
    hidden: int = 128,
    num_layers: int = 1,
    tie_word_embeddings: bool = False,
    n_positions: int = 128,
    seed: int = 0,
) -> LSTMLanguageModel:
    """A :class:`LSTMLanguageModel` initialized from ``seed`` (no global RNG side effects).

    Args:
        vocab_size: the number of token ids, an integer in [2, 10**7].
        emb_dim: embedding width, an integer in [1, 10**5].
        hidden: LSTM hidden width, an integer in [1, 10**5].
        num_layers: stacked LSTM layers, an integer in [1, 16].
        tie_word_embeddings: reuse the embedding matrix as the output projection.
        n_positions: recorded in ``config``, an integer in [2, 10**6].
        seed: the initialisation seed.

    Returns:
        The model (in training mode, as ``nn.Module`` constructs it).

    Raises:
        InvalidArgument: an argument out of range.
    """
    with seeded(int(seed)):
        return LSTMLanguageModel(
            vocab_size,
            emb_dim=emb_dim,
            hidden=hidden,
            num_layers=num_layers,
            tie_word_embeddings=tie_word_embeddings,
            n_positions=n_positions,
        )
