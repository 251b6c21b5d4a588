"""BiLSTM sequence tagger with a softmax head or an optional linear-chain CRF.

The tagger is the NER model of the record-level FL leakage experiments
(``../shared/papers/record-level-privacy-leakage-in-fl.txt``) and the PII taggers used to
score sanitization. The CRF (forward algorithm + Viterbi) is written in plain torch because no
well-kept CRF package ships for torch 2.13 without pulling extra dependencies (pytorch-crf is
unmaintained); it is ~60 lines and tested against brute-force enumeration.

Opacus: ``torch.nn.LSTM`` has no per-sample-gradient sampler; build with ``dp_compatible=True`` to
use ``opacus.layers.DPLSTM`` (same maths, per-sample gradients supported, different parameter names).
The CRF layer is *not* supported by opacus per-sample gradients (its functorch fallback only passes
a module's first input; the CRF needs emissions, tags and mask): use the softmax head under DP-SGD.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from privnlp.core.errors import InvalidArgument, MissingDependency, check_probability, check_range

from ._seed import seeded

__all__ = ["BiLSTMTagger", "CRF"]

IGNORE_INDEX = -100


class CRF(nn.Module):
    """Linear-chain CRF over ``num_tags`` tags: log-likelihood (forward algorithm) and Viterbi decoding.

    Emissions are ``(batch, time, num_tags)``; ``mask`` is ``(batch, time)`` bool with each row a
    prefix of ones (at least one) — padding only at the end.
    """

    def __init__(self, num_tags: int):
        super().__init__()
        check_range("num_tags", num_tags, 1, 2**16, integer=True)
        self.num_tags = num_tags
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [from, to]

    def _score(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        b, t, _ = emissions.shape
        maskf = mask.to(emissions.dtype)
        em = emissions.gather(2, tags.unsqueeze(-1)).squeeze(-1)  # (b, t)
        score = self.start[tags[:, 0]] + (em * maskf).sum(1)
        if t > 1:
            trans = self.transitions[tags[:, :-1], tags[:, 1:]]  # (b, t-1)
            score = score + (trans * maskf[:, 1:]).sum(1)
        last = mask.long().sum(1) - 1
        score = score + self.end[tags.gather(1, last.unsqueeze(1)).squeeze(1)]
        return score

    def _log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        alpha = self.start + emissions[:, 0]  # (b, k)
        for i in range(1, emissions.shape[1]):
            nxt = (
                torch.logsumexp(alpha.unsqueeze(2) + self.transitions.unsqueeze(0), dim=1)
                + emissions[:, i]
            )
            alpha = torch.where(mask[:, i].unsqueeze(1), nxt, alpha)
        return torch.logsumexp(alpha + self.end, dim=1)

    def forward(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Per-sequence log p(tags | emissions), shape ``(batch,)`` (a module call, so opacus sees it)."""
        return self.log_likelihood(emissions, tags, mask)

    def log_likelihood(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Per-sequence log p(tags | emissions), shape ``(batch,)``."""
        mask = mask.bool()
        tags = tags.masked_fill(~mask, 0)
        return self._score(emissions, tags, mask) - self._log_partition(emissions, mask)

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """Viterbi: the most likely tag sequence of each row (length = its mask sum)."""
        mask = mask.bool()
        score = self.start + emissions[:, 0]
        history = []
        for i in range(1, emissions.shape[1]):
            cand = score.unsqueeze(2) + self.transitions.unsqueeze(0)  # (b, from, to)
            best, idx = cand.max(dim=1)
            nxt = best + emissions[:, i]
            score = torch.where(mask[:, i].unsqueeze(1), nxt, score)
            history.append(idx)
        score = score + self.end
        lengths = mask.long().sum(1).tolist()
        out = []
        for r, n in enumerate(lengths):
            tag = int(score[r].argmax())
            path = [tag]
            for i in range(n - 2, -1, -1):
                tag = int(history[i][r, tag])
                path.append(tag)
            out.append(path[::-1])
        return out


class BiLSTMTagger(nn.Module):
    """Embedding -> BiLSTM -> linear emissions -> softmax (or CRF) over ``num_tags`` tags.

    ``forward(input_ids, lengths=None) -> logits (batch, time, num_tags)``;
    ``loss(input_ids, tags, lengths=None)`` (tags padded with -100 where there is no token);
    ``decode(input_ids, lengths=None) -> list[list[int]]``. Token id 0 is padding.
    Weights are seeded by ``seed`` without touching the global RNG.

    Args:
        vocab_size: the number of token ids, an integer in [1, 2**24].
        num_tags: the number of tags, an integer in [1, 2**16].
        emb_dim: embedding width, an integer in [1, 2**16].
        hidden: hidden width of each LSTM direction, an integer in [1, 2**16].
        num_layers: stacked BiLSTM layers, an integer in [1, 64].
        dropout: dropout probability on embeddings and LSTM outputs (and between LSTM layers), in [0, 1).
        crf: use a linear-chain CRF on top of the emissions instead of a per-token softmax.
        dp_compatible: use opacus' ``DPLSTM`` (per-sample gradients for DP-SGD) instead of ``nn.LSTM``.
        pad_id: the padding token id, in [0, vocab_size - 1].
        seed: the initialisation seed (the global RNG is left untouched).

    Raises:
        InvalidArgument: an argument out of range; (``forward``) ``input_ids`` not 2-D or bad ``lengths``.
        MissingDependency: ``dp_compatible=True`` without opacus.
    """

    def __init__(
        self,
        vocab_size: int,
        num_tags: int,
        *,
        emb_dim: int = 64,
        hidden: int = 64,
        num_layers: int = 1,
        dropout: float = 0.0,
        crf: bool = False,
        dp_compatible: bool = False,
        pad_id: int = 0,
        seed: int = 0,
    ):
        super().__init__()
        check_range("vocab_size", vocab_size, 1, 2**24, integer=True)
        check_range("num_tags", num_tags, 1, 2**16, integer=True)
        check_range("emb_dim", emb_dim, 1, 2**16, integer=True)
        check_range("hidden", hidden, 1, 2**16, integer=True)
        check_range("num_layers", num_layers, 1, 64, integer=True)
        check_probability("dropout", dropout, open_high=True)
        check_range("pad_id", pad_id, 0, vocab_size - 1, integer=True)
        self.vocab_size, self.num_tags, self.emb_dim, self.hidden = (
            vocab_size,
            num_tags,
            emb_dim,
            hidden,
        )
        self.num_layers, self.dropout, self.crf, self.dp_compatible = (
            num_layers,
            dropout,
            crf,
            dp_compatible,
        )
        self.pad_id, self.seed = pad_id, seed
        lstm_cls: Any = nn.LSTM
        if dp_compatible:
            try:
                from opacus.layers import DPLSTM
            except ImportError as e:  # pragma: no cover
                raise MissingDependency(
                    "opacus", hint="dp_compatible=True uses opacus.layers.DPLSTM"
                ) from e
            lstm_cls = DPLSTM
        with seeded(seed):
            self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
            self.lstm = lstm_cls(
                emb_dim,
                hidden,
                num_layers=num_layers,
                batch_first=True,
                bidirectional=True,
                dropout=dropout if num_layers > 1 else 0.0,
            )
            self.drop = nn.Dropout(dropout)
            self.proj = nn.Linear(2 * hidden, num_tags)
            self.crf_layer = CRF(num_tags) if crf else None

    def _mask(self, input_ids: torch.Tensor, lengths: Any) -> torch.Tensor:
        if lengths is None:
            return input_ids != self.pad_id
        lengths = torch.as_tensor(lengths, device=input_ids.device)
        if (
            lengths.shape != (input_ids.shape[0],)
            or bool((lengths < 1).any())
            or int(lengths.max()) > input_ids.shape[1]
        ):
            raise InvalidArgument(
                f"lengths must hold one value in [1, {input_ids.shape[1]}] per row"
            )
        return torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(
            0
        ) < lengths.unsqueeze(1)

    def forward(self, input_ids: torch.Tensor, lengths: Any = None) -> torch.Tensor:
        if input_ids.dim() != 2:
            raise InvalidArgument(
                f"input_ids must be (batch, time); got shape {tuple(input_ids.shape)}"
            )
        x = self.drop(self.embedding(input_ids))
        if lengths is not None or bool((input_ids == self.pad_id).any()):
            mask = self._mask(input_ids, lengths)
            lens = mask.long().sum(1).clamp(min=1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(
                x, lens, batch_first=True, enforce_sorted=False
            )
            out, _ = self.lstm(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(
                out, batch_first=True, total_length=input_ids.shape[1]
            )
        else:
            out, _ = self.lstm(x)
        return self.proj(self.drop(out))

    def loss(
        self, input_ids: torch.Tensor, tags: torch.Tensor, lengths: Any = None
    ) -> torch.Tensor:
        """Mean token cross-entropy (softmax head) or mean negative log-likelihood per sequence (CRF)."""
        logits = self(input_ids, lengths)
        if self.crf_layer is None:
            return nn.functional.cross_entropy(
                logits.reshape(-1, self.num_tags), tags.reshape(-1), ignore_index=IGNORE_INDEX
            )
        mask = self._mask(input_ids, lengths) & (tags != IGNORE_INDEX)
        return -self.crf_layer(logits, tags.clamp(min=0), mask).mean()

    @torch.no_grad()
    def decode(self, input_ids: torch.Tensor, lengths: Any = None) -> list[list[int]]:
        """Predicted tag ids per row (argmax, or Viterbi with the CRF), cut to each row's length."""
        logits = self(input_ids, lengths)
        mask = self._mask(input_ids, lengths)
        if self.crf_layer is not None:
            return self.crf_layer.decode(logits, mask)
        pred = logits.argmax(-1)
        return [pred[r, : int(mask[r].sum())].tolist() for r in range(pred.shape[0])]
