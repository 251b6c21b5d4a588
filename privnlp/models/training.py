"""Small, deterministic training loops for the tiny models (plain PyTorch, AdamW).

* :func:`lm_batch` — the causal-LM batch every privnlp module reuses: ``input_ids``,
  ``attention_mask``, explicit per-row ``position_ids`` and ``labels`` (-100 on padding).
  ``position_ids`` are built with ``.repeat(batch, 1)``, not ``.expand``: with opacus 1.6 +
  transformers 5 an expanded (stride-0) or missing ``position_ids`` breaks per-sample gradients
  of GPT-2's position embedding (see ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` for the
  DP-SGD setting these models are trained in).
* :func:`train_lm`, :func:`train_classifier`, :func:`train_tagger` -> :class:`TrainLog`.

No global RNG: data order comes from ``rng`` and dropout draws from a forked, seeded torch RNG
(the caller's ``torch.random.get_rng_state()`` is unchanged after a call).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from privnlp.core.errors import InvalidArgument, check_positive, check_range
from privnlp.core.rng import as_numpy

from ._seed import seeded

__all__ = [
    "TrainLog",
    "LMBatch",
    "ClassifierBatch",
    "lm_batch",
    "lm_batch_from_ids",
    "position_ids_for",
    "classifier_batch",
    "pad_sequences",
    "train_lm",
    "train_classifier",
    "train_tagger",
    "IGNORE_INDEX",
]

IGNORE_INDEX = -100


@dataclass(frozen=True)
class TrainLog:
    """What a training loop did: the loss of every step, the number of steps, wall seconds.

    Attributes:
        losses: the training loss of every step, in order.
        steps: the number of optimizer steps.
        seconds: wall-clock seconds of the loop.
    """

    losses: tuple[float, ...]
    steps: int
    seconds: float

    @property
    def first(self) -> float:
        return self.losses[0]

    @property
    def last(self) -> float:
        return self.losses[-1]

    def mean_first(self, k: int = 5) -> float:
        """Mean loss of the first ``k`` steps (smooths minibatch noise)."""
        return float(np.mean(self.losses[:k]))

    def mean_last(self, k: int = 5) -> float:
        """Mean loss of the last ``k`` steps."""
        return float(np.mean(self.losses[-k:]))


class _TensorBatch(Mapping):
    """A frozen dataclass of tensors that unpacks as keyword arguments: ``model(**batch)``."""

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def _keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self) if getattr(self, f.name) is not None)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def to(self, device: Any) -> Any:
        return type(self)(
            **{
                f.name: (
                    None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
                )
                for f in fields(self)
            }
        )  # type: ignore[arg-type]


@dataclass(frozen=True)
class LMBatch(_TensorBatch):
    """Causal-LM batch; ``model(**batch)`` returns the mean next-token loss over non-pad labels."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    labels: torch.Tensor


@dataclass(frozen=True)
class ClassifierBatch(_TensorBatch):
    """Sequence-classification batch (``token_type_ids`` only when the tokenizer returns them)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor | None = None
    token_type_ids: torch.Tensor | None = None


def _check_texts(texts: Any, name: str = "texts") -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InvalidArgument(f"{name} must be a sequence of strings")
    if len(texts) == 0:
        raise InvalidArgument(f"{name} must not be empty")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidArgument(f"{name}[{i}] must be a str; got {type(t).__name__}")
    return list(texts)


def position_ids_for(input_ids: torch.Tensor) -> torch.Tensor:
    """``arange(T)`` per row, materialized with ``.repeat`` (contiguous; never ``.expand``)."""
    b, t = input_ids.shape
    return torch.arange(t, dtype=torch.long, device=input_ids.device).unsqueeze(0).repeat(b, 1)


def _encode_lm(tokenizer: Any, texts: list[str], max_length: int, add_eos: bool) -> list[list[int]]:
    eos = tokenizer.eos_token if add_eos else None
    return tokenizer(
        [t + eos if eos else t for t in texts],
        add_special_tokens=False,
        truncation=True,
        max_length=int(max_length),
    )["input_ids"]


def _pad_id(tokenizer: Any) -> int:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return int(tokenizer.eos_token_id or 0)


def lm_batch_from_ids(
    rows: Sequence[Sequence[int]], pad_id: int, *, min_length: int = 1
) -> LMBatch:
    """Right-pad already tokenized rows into an :class:`LMBatch` (labels -100 on padding), at least
    ``min_length`` positions wide."""
    if len(rows) == 0:
        raise InvalidArgument("rows must not be empty")
    t = max(int(min_length), max(len(r) for r in rows))
    ids = torch.full((len(rows), t), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(rows), t), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)
        mask[i, : len(r)] = 1
    labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
    return LMBatch(
        input_ids=ids, attention_mask=mask, position_ids=position_ids_for(ids), labels=labels
    )


def lm_batch(
    tokenizer: Any, texts: Sequence[str], max_length: int = 64, *, add_eos: bool = True
) -> LMBatch:
    """Tokenize ``texts`` into a right-padded causal-LM batch: ``model(**lm_batch(tok, texts)).loss``.

    Each text is followed by the tokenizer's eos token (when it has one and ``add_eos``), truncated
    to ``max_length`` tokens, no bos. ``labels`` equal ``input_ids`` with padding set to -100
    (decided by the attention mask, since GPT-2's pad token is its eos token); the model shifts
    them itself. ``position_ids`` are explicit per row (``.repeat``, contiguous) for opacus.

    Args:
        tokenizer: a Hugging Face tokenizer (e.g. :func:`train_bpe_tokenizer`'s).
        texts: the records, one string each (non-empty sequence).
        max_length: tokens per row after truncation, in [2, 2**20].
        add_eos: append the eos token to every text.

    Returns:
        ``LMBatch(input_ids, attention_mask, position_ids, labels)``, long tensors of shape (n, t).

    Raises:
        InvalidArgument: ``max_length`` out of range, or ``texts`` empty or holding a non-string.
    """
    texts = _check_texts(texts)
    check_range("max_length", max_length, 2, 2**20, integer=True)
    return lm_batch_from_ids(_encode_lm(tokenizer, texts, max_length, add_eos), _pad_id(tokenizer))


def classifier_batch(
    tokenizer: Any, texts: Sequence[str], labels: Sequence[int] | None = None, max_length: int = 64
) -> ClassifierBatch:
    """Tokenize ``texts`` (with the tokenizer's special tokens, e.g. ``[CLS] ... [SEP]``) into a padded batch.

    Args:
        tokenizer: a Hugging Face tokenizer (called with ``padding=True, truncation=True``).
        texts: the texts; a non-empty sequence of strings.
        labels: one class index per text, or ``None``.
        max_length: truncation length in tokens, an integer in [2, 2**20].

    Returns:
        ``ClassifierBatch(input_ids, attention_mask, labels, token_type_ids)`` tensors.

    Raises:
        InvalidArgument: ``texts`` empty or holding a non-string, ``max_length`` out of range, or ``labels`` of
            another length.
    """
    texts = _check_texts(texts)
    check_range("max_length", max_length, 2, 2**20, integer=True)
    enc = tokenizer(
        texts, padding=True, truncation=True, max_length=int(max_length), return_tensors="pt"
    )
    lab = None
    if labels is not None:
        if len(labels) != len(texts):
            raise InvalidArgument(
                f"labels must have one entry per text ({len(texts)}); got {len(labels)}"
            )
        lab = torch.as_tensor(list(labels), dtype=torch.long)
    return ClassifierBatch(
        input_ids=enc["input_ids"],
        attention_mask=enc["attention_mask"],
        labels=lab,
        token_type_ids=enc.get("token_type_ids"),
    )


def pad_sequences(
    seqs: Sequence[Sequence[int]], *, pad: int = 0, name: str = "token_ids"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad integer sequences -> ``(padded (B, T) long tensor, lengths (B,))``.

    Args:
        seqs: non-empty integer sequences; not empty.
        pad: the padding value.
        name: the argument name used in error messages.

    Returns:
        ``(padded, lengths)``.

    Raises:
        InvalidArgument: ``seqs`` is empty or holds an empty sequence.
    """
    if len(seqs) == 0:
        raise InvalidArgument(f"{name} must not be empty")
    lengths = [len(s) for s in seqs]
    if min(lengths) < 1:
        raise InvalidArgument(f"{name}: every sequence needs at least one element")
    out = torch.full((len(seqs), max(lengths)), int(pad), dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out, torch.as_tensor(lengths, dtype=torch.long)


def _batches(n: int, batch_size: int, steps: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """``steps`` batches of indices: epochs of fresh permutations from ``rng`` (last partial batch wraps)."""
    order = np.empty(0, dtype=np.int64)
    for _ in range(steps):
        while len(order) < min(batch_size, n):
            order = np.concatenate([order, rng.permutation(n)])
        take = min(batch_size, n)
        yield order[:take]
        order = order[take:]


def _check_loop(steps: int, batch_size: int, lr: float) -> None:
    check_range("steps", steps, 1, 10**9, integer=True)
    check_range("batch_size", batch_size, 1, 10**7, integer=True)
    check_positive("lr", lr)


def _run(
    model: torch.nn.Module,
    step_loss: Any,
    n: int,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    rng: Any,
    progress: bool,
) -> TrainLog:
    gen = as_numpy(rng)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise InvalidArgument("model has no trainable parameters (all requires_grad=False)")
    opt = torch.optim.AdamW(params, lr=float(lr), weight_decay=float(weight_decay))
    losses: list[float] = []
    t0 = time.perf_counter()
    was_training = model.training
    model.train()
    it = _batches(n, int(batch_size), int(steps), gen)
    if progress:
        it = tqdm(it, total=int(steps), desc="train", leave=False)
    try:
        with seeded(int(gen.integers(0, 2**63 - 1))):  # dropout draws here, not from the global RNG
            for idx in it:
                opt.zero_grad(set_to_none=True)
                loss = step_loss(idx)
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
    finally:
        model.train(was_training)
    return TrainLog(losses=tuple(losses), steps=int(steps), seconds=time.perf_counter() - t0)


def train_lm(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    steps: int,
    batch_size: int = 8,
    lr: float = 3e-3,
    max_length: int = 64,
    weight_decay: float = 0.0,
    rng: Any,
    progress: bool = False,
) -> TrainLog:
    """Train a causal LM (e.g. :func:`~privnlp.models.tiny_gpt2`) on ``texts`` for ``steps`` AdamW steps.

    Batches come from :func:`lm_batch` (explicit per-row ``position_ids``); the order is drawn from
    ``rng`` (numpy Generator / int seed / torch Generator). The model is left in its previous mode.

    Args:
        model: a causal LM returning ``.loss`` when called with ``labels``.
        tokenizer: its tokenizer.
        texts: the training texts; a non-empty sequence of strings.
        steps: the number of optimizer steps, an integer in [1, 10**9].
        batch_size: texts per step, an integer in [1, 10**7] (capped at the number of texts).
        lr: the AdamW learning rate; > 0.
        max_length: truncation length in tokens, an integer in [2, 2**20].
        weight_decay: AdamW weight decay.
        rng: the data-order randomness (keyword-only; also seeds dropout).
        progress: show a progress bar.

    Returns:
        The per-step losses and the time taken.

    Raises:
        InvalidArgument: an argument out of range, ``texts`` empty, or a model without trainable parameters.
    """
    texts = _check_texts(texts)
    _check_loop(steps, batch_size, lr)
    check_range("max_length", max_length, 2, 2**20, integer=True)
    rows = _encode_lm(tokenizer, texts, max_length, True)  # tokenize once
    pad = _pad_id(tokenizer)

    def step_loss(idx: np.ndarray) -> torch.Tensor:
        return model(**lm_batch_from_ids([rows[i] for i in idx], pad)).loss

    return _run(
        model,
        step_loss,
        len(texts),
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        weight_decay=weight_decay,
        rng=rng,
        progress=progress,
    )


def train_classifier(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    labels: Sequence[int],
    *,
    steps: int,
    batch_size: int = 16,
    lr: float = 3e-3,
    max_length: int = 64,
    weight_decay: float = 0.0,
    rng: Any,
    progress: bool = False,
) -> TrainLog:
    """Train a sequence classifier (e.g. :func:`~privnlp.models.tiny_bert_classifier`) with cross-entropy.

    Args:
        model: a sequence classifier returning ``.loss`` when called with ``labels``.
        tokenizer: its tokenizer.
        texts: the training texts; a non-empty sequence of strings.
        labels: one class index per text, in [0, num_labels).
        steps: the number of optimizer steps, an integer in [1, 10**9].
        batch_size: texts per step, an integer in [1, 10**7].
        lr: the AdamW learning rate; > 0.
        max_length: truncation length in tokens (see :func:`classifier_batch`).
        weight_decay: AdamW weight decay.
        rng: the data-order randomness (keyword-only; also seeds dropout).
        progress: show a progress bar.

    Returns:
        The per-step losses and the time taken.

    Raises:
        InvalidArgument: an argument out of range, a label out of range, or ``labels`` of another length.
    """
    texts = _check_texts(texts)
    if len(labels) != len(texts):
        raise InvalidArgument(
            f"labels must have one entry per text ({len(texts)}); got {len(labels)}"
        )
    num_labels = getattr(getattr(model, "config", None), "num_labels", None)
    for i, y in enumerate(labels):
        if (
            isinstance(y, bool)
            or not isinstance(y, (int, np.integer))
            or y < 0
            or (num_labels and y >= num_labels)
        ):
            raise InvalidArgument(
                f"labels[{i}] must be an int in [0, {num_labels or 'num_labels'}); got {y!r}"
            )
    labels = [int(y) for y in labels]
    _check_loop(steps, batch_size, lr)

    def step_loss(idx: np.ndarray) -> torch.Tensor:
        batch = classifier_batch(
            tokenizer, [texts[i] for i in idx], [labels[i] for i in idx], max_length
        )
        return model(**batch).loss

    return _run(
        model,
        step_loss,
        len(texts),
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        weight_decay=weight_decay,
        rng=rng,
        progress=progress,
    )


def train_tagger(
    model: Any,
    token_ids: Sequence[Sequence[int]],
    tag_ids: Sequence[Sequence[int]],
    *,
    steps: int,
    batch_size: int = 16,
    lr: float = 1e-2,
    weight_decay: float = 0.0,
    rng: Any,
    progress: bool = False,
) -> TrainLog:
    """Train a :class:`~privnlp.models.BiLSTMTagger` on id sequences (``tag_ids[i]`` aligned with ``token_ids[i]``).

    Args:
        model: a :class:`~privnlp.models.BiLSTMTagger` (anything with ``loss(x, y, lengths)`` and ``pad_id``).
        token_ids: one token-id sequence per sentence.
        tag_ids: the tag ids, aligned with ``token_ids``.
        steps: the number of optimizer steps, an integer in [1, 10**9].
        batch_size: sentences per step, an integer in [1, 10**7].
        lr: the AdamW learning rate; > 0.
        weight_decay: AdamW weight decay.
        rng: the data-order randomness (keyword-only).
        progress: show a progress bar.

    Returns:
        The per-step losses and the time taken.

    Raises:
        InvalidArgument: misaligned sequences or an argument out of range.
    """
    if len(token_ids) != len(tag_ids):
        raise InvalidArgument(
            f"tag_ids must have one sequence per token_ids row ({len(token_ids)}); got {len(tag_ids)}"
        )
    for i, (a, b) in enumerate(zip(token_ids, tag_ids)):
        if len(a) != len(b):
            raise InvalidArgument(f"tag_ids[{i}] has {len(b)} tags for {len(a)} tokens")
    _check_loop(steps, batch_size, lr)
    pad = getattr(model, "pad_id", 0)

    def step_loss(idx: np.ndarray) -> torch.Tensor:
        x, lengths = pad_sequences([token_ids[i] for i in idx], pad=pad)
        y, _ = pad_sequences([tag_ids[i] for i in idx], pad=IGNORE_INDEX, name="tag_ids")
        return model.loss(x, y, lengths)

    return _run(
        model,
        step_loss,
        len(token_ids),
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        weight_decay=weight_decay,
        rng=rng,
        progress=progress,
    )
