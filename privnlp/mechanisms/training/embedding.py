"""Embedding obfuscation defenses and frozen-embedding fine-tuning.

Papers: ``../shared/papers/record-level-privacy-leakage-in-fl.txt`` (Sec. on countermeasures:
Noised Embedding — Gaussian noise on the embedding output during local training; Dropout
Embedding — dropout on the embedding outputs; Adversarial Embedding — virtual adversarial
training (Miyato et al.) with perturbations on the embedding layer; LSTM Dropout — dropout on
the LSTM outputs) and ``../shared/papers/film-recovering-private-text-in-fl.txt`` (freezing the
word embeddings so their gradient rows, which reveal the bag of words, are never transmitted).

Threat model: an eavesdropper / honest-but-curious server that sees the client updates or the
trained model (record-level leakage: eavesdropping and watermark attacks; FILM's bag-of-words).
None of these has a formal guarantee: their claims are heuristic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from privnlp.core.errors import InvalidArgument, check_positive, check_probability, check_range
from privnlp.core.rng import as_torch

__all__ = [
    "NoisedEmbedding",
    "DropoutEmbedding",
    "LSTMOutputDropout",
    "input_embedding",
    "replace_input_embedding",
    "apply_noised_embedding",
    "apply_dropout_embedding",
    "apply_lstm_dropout",
    "adversarial_embedding_loss",
    "freeze_embeddings",
    "position_embedding_modules",
]


def input_embedding(model: nn.Module) -> tuple[str, nn.Module]:
    """(qualified name, module) of the model's input word embedding."""
    target = None
    get = getattr(model, "get_input_embeddings", None)
    if callable(get):
        with _suppress():
            target = get()
    if target is None:
        for name, mod in model.named_modules():
            if isinstance(mod, nn.Embedding):
                return name, mod
        raise InvalidArgument(f"model: no input embedding found in {type(model).__name__}")
    for name, mod in model.named_modules():
        if mod is target:
            return name, mod
    raise InvalidArgument("model: the input embedding is not a submodule")  # pragma: no cover


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        return et is not None and issubclass(et, (NotImplementedError, AttributeError))


def replace_input_embedding(model: nn.Module, new: nn.Module) -> None:
    name, _ = input_embedding(model)
    parent_name, _, attr = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, attr, new)


class _EmbeddingWrapper(nn.Module):
    def __init__(self, embedding: nn.Module, generator: torch.Generator) -> None:
        super().__init__()
        self.embedding = embedding
        self.generator = generator
        self.train(embedding.training)

    @property
    def weight(self) -> torch.Tensor:  # HF code reads get_input_embeddings().weight
        return self.embedding.weight

    @property
    def num_embeddings(self) -> int:
        return self.embedding.num_embeddings

    @property
    def embedding_dim(self) -> int:
        return self.embedding.embedding_dim

    def _rand(self, shape: torch.Size, like: torch.Tensor, normal: bool) -> torch.Tensor:
        f = torch.randn if normal else torch.rand
        return f(shape, generator=self.generator).to(device=like.device, dtype=like.dtype)


class NoisedEmbedding(_EmbeddingWrapper):
    """Embedding output + N(0, sigma^2) during training (identity in eval mode)."""

    def __init__(self, embedding: nn.Module, sigma: float, generator: torch.Generator) -> None:
        check_range("sigma", sigma, 0.0, float("inf"))
        super().__init__(embedding, generator)
        self.sigma = float(sigma)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = self.embedding(*args, **kwargs)
        if self.training and self.sigma > 0:
            out = out + self.sigma * self._rand(out.shape, out, True)
        return out


class DropoutEmbedding(_EmbeddingWrapper):
    """Inverted dropout with rate ``p`` on the embedding outputs during training."""

    def __init__(self, embedding: nn.Module, p: float, generator: torch.Generator) -> None:
        check_probability("p", p, open_high=True)
        super().__init__(embedding, generator)
        self.p = float(p)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = self.embedding(*args, **kwargs)
        if self.training and self.p > 0:
            keep = (self._rand(out.shape, out, False) >= self.p).to(out.dtype)
            out = out * keep / (1.0 - self.p)
        return out


class LSTMOutputDropout(nn.Module):
    """Wrap an (LSTM-like) recurrent module: inverted dropout with rate ``p`` on its outputs."""

    def __init__(self, lstm: nn.Module, p: float, generator: torch.Generator) -> None:
        check_probability("p", p, open_high=True)
        super().__init__()
        self.lstm = lstm
        self.p = float(p)
        self.generator = generator
        self.train(lstm.training)

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        keep = (torch.rand(x.shape, generator=self.generator) >= self.p).to(
            device=x.device, dtype=x.dtype
        )
        return x * keep / (1.0 - self.p)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        out, state = self.lstm(x, *args, **kwargs)
        if self.training and self.p > 0:
            if isinstance(out, nn.utils.rnn.PackedSequence):
                out = out._replace(data=self._drop(out.data))
            else:
                out = self._drop(out)
        return out, state


def apply_noised_embedding(model: nn.Module, sigma: float, *, rng: Any) -> nn.Module:
    """Replace the input embedding of ``model`` by a :class:`NoisedEmbedding` (in place; returns model)."""
    _, emb = input_embedding(model)
    replace_input_embedding(model, NoisedEmbedding(emb, sigma, as_torch(rng)))
    return model


def apply_dropout_embedding(model: nn.Module, p: float, *, rng: Any) -> nn.Module:
    """Replace the input embedding of ``model`` by a :class:`DropoutEmbedding` (in place; returns model)."""
    _, emb = input_embedding(model)
    replace_input_embedding(model, DropoutEmbedding(emb, p, as_torch(rng)))
    return model


def apply_lstm_dropout(model: nn.Module, p: float, *, rng: Any) -> nn.Module:
    """Wrap every LSTM / GRU (torch or opacus DP*) in ``model`` with :class:`LSTMOutputDropout`."""
    g = as_torch(rng)
    targets = [
        (n, m)
        for n, m in model.named_modules()
        if isinstance(m, (nn.LSTM, nn.GRU, nn.RNN))
        or type(m).__name__ in ("DPLSTM", "DPGRU", "DPRNN")
    ]
    if not targets:
        raise InvalidArgument(
            f"model: no LSTM/GRU layer found in {type(model).__name__} for LSTM dropout"
        )
    for name, mod in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, LSTMOutputDropout(mod, p, g))
    return model


def _logits(out: Any) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out


def _unit(x: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(x.shape[0], -1)
    return (flat / (flat.norm(dim=1, keepdim=True) + 1e-12)).view_as(x)


def _kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    p = torch.log_softmax(p_logits, dim=-1)
    q = torch.log_softmax(q_logits, dim=-1)
    return (p.exp() * (p - q)).sum(-1).mean()


def adversarial_embedding_loss(
    model: nn.Module,
    inputs: Mapping[str, Any],
    *,
    epsilon: float = 1.0,
    xi: float = 1e-6,
    rng: Any,
    forward: Callable[[nn.Module, Mapping[str, Any]], Any] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Virtual adversarial training on the embedding output (Miyato et al. 2017).

    Runs the clean forward pass, finds the perturbation r_adv (L2 norm ``epsilon`` per example) of the
    embedding output that most changes the prediction (one power iteration from a random direction
    scaled by ``xi``) and returns ``(clean_logits, vat_term)`` with
    ``vat_term = KL(p(.|e) || p(.|e + r_adv))``. Train on ``task_loss(clean_logits) + alpha * vat_term``.
    """
    check_positive("epsilon", epsilon)
    check_positive("xi", xi)
    fwd = forward or (lambda m, x: m(**x))
    _, emb = input_embedding(model)
    state: dict[str, Any] = {"r": None, "shape": None}

    def hook(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        state["shape"] = output.shape
        return output if state["r"] is None else output + state["r"].to(output.dtype)

    h = emb.register_forward_hook(hook)
    try:
        clean = _logits(fwd(model, inputs))
        g = as_torch(rng)
        d = torch.randn(state["shape"], generator=g).to(clean.device)
        r = (xi * _unit(d)).requires_grad_(True)
        state["r"] = r
        kl = _kl(clean.detach(), _logits(fwd(model, inputs)))
        (grad,) = torch.autograd.grad(kl, r, allow_unused=True)
        if grad is None:  # pragma: no cover
            grad = torch.zeros_like(r)
        state["r"] = epsilon * _unit(grad.detach())
        vat = _kl(clean.detach(), _logits(fwd(model, inputs)))
    finally:
        h.remove()
    return clean, vat


def position_embedding_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Absolute position embeddings of HF models (GPT-2 ``wpe``, BERT ``position_embeddings``)."""
    return [
        (n, m)
        for n, m in model.named_modules()
        if isinstance(m, nn.Embedding) and (n.endswith("wpe") or n.endswith("position_embeddings"))
    ]


def freeze_embeddings(
    model: nn.Module, *, word: bool = True, position: bool = False
) -> tuple[str, ...]:
    """Freeze the word (and optionally position) embeddings of ``model`` (FILM's defense).

    Sets ``requires_grad=False`` on their weights; for GPT-2 with tied weights this also freezes
    the output projection (same tensor). Returns the names of the frozen parameters. Build the
    optimizer *after* freezing (or it keeps the tensors with ``grad=None``, which is harmless).

    Args:
        model: a Hugging Face style model (GPT-2 / BERT / any with ``get_input_embeddings``).
        word: freeze the word embeddings.
        position: freeze the absolute position embeddings (``wpe`` / ``position_embeddings``).

    Raises:
        InvalidArgument: both flags ``False``, or the model has no input / position embedding.
    """
    if not (word or position):
        raise InvalidArgument("freeze_embeddings: at least one of word / position must be True")
    frozen = []
    mods: list[nn.Module] = []
    if word:
        mods.append(input_embedding(model)[1])
    if position:
        pos = position_embedding_modules(model)
        if not pos:
            raise InvalidArgument(f"model: no position embedding found in {type(model).__name__}")
        mods += [m for _, m in pos]
    targets = {id(p) for m in mods for p in m.parameters()}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in targets:
            p.requires_grad_(False)
            frozen.append(name)
    return tuple(frozen)
