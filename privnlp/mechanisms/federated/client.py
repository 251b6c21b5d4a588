"""Client side of federated training: Flower-shaped messages, tasks and the local update.

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (Algorithm 1, ``UserUpdate``: E local
epochs of minibatch SGD from the global model, the update is ``theta_local - theta_global``);
``../shared/papers/fl-dp-sequence-tagging-ner.txt`` (clients run DP-SGD locally: record-level DP).

Message shapes mirror Flower's Message API (``flwr.app``): the server sends :class:`FitIns` (an
``ArrayRecord`` of the global weights + a ``ConfigRecord``), the client answers :class:`FitRes` (an
``ArrayRecord`` holding the model *delta* + a ``MetricRecord`` with ``num-examples``). The embedded
simulator passes these dataclasses in-process; the Flower apps convert them to/from real Messages.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privnlp.accounting.duplicates import (
    DuplicateExamplesWarning,
    duplicate_message,
    group_epsilon,
)
from privnlp.core.errors import InvalidArgument, check_positive, check_range
from privnlp.mechanisms.training import make_private, train_private
from privnlp.mechanisms.training.dp_sgd import per_sample_lm_loss, per_sample_token_loss
from privnlp.models.builders import tiny_gpt2
from privnlp.models.tagger import BiLSTMTagger
from privnlp.models.training import lm_batch

__all__ = [
    "FitIns",
    "FitRes",
    "Task",
    "ClientData",
    "trainable_state",
    "local_update",
    "lm_task",
    "lm_client_data",
    "tagger_task",
]


@dataclass(frozen=True)
class FitIns:
    """Server -> client (Flower: ``RecordDict({"arrays": ArrayRecord, "config": ConfigRecord})``).

    Attributes:
        arrays: the global model's trainable parameters (name -> tensor).
        config: the fit instructions (``local-epochs``, ``batch-size``, ``lr``, ``local-steps``, ``seed``, the
            ``dp-*`` keys; see :func:`local_update`).
    """

    arrays: Mapping[str, torch.Tensor]
    config: Mapping[str, Any]


@dataclass(frozen=True)
class FitRes:
    """Client -> server (Flower: ``RecordDict({"arrays": ArrayRecord, "metrics": MetricRecord})``).

    ``arrays`` is the model delta (local - global) of the trainable parameters; ``metrics`` holds at
    least ``num-examples``; with client DP-SGD also ``dp-steps``, ``dp-sample-rate``, ``dp-noise-multiplier``.

    Attributes:
        arrays: the model delta, parameter name -> tensor.
        metrics: ``num-examples``, ``loss``, ``local-steps`` and, with client DP-SGD, the ``dp-*`` values.
    """

    arrays: Mapping[str, torch.Tensor]
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ClientData:
    """One client's examples as aligned tensors (first dimension = examples).

    Attributes:
        tensors: aligned tensors whose first dimension indexes the client's examples.

    Raises:
        InvalidArgument: ``tensors`` is empty or the first dimensions differ.
    """

    tensors: tuple[torch.Tensor, ...]

    def __post_init__(self) -> None:
        if not self.tensors or any(t.shape[0] != self.tensors[0].shape[0] for t in self.tensors):
            raise InvalidArgument(
                "ClientData.tensors must be non-empty and share the first dimension"
            )

    @property
    def num_examples(self) -> int:
        return int(self.tensors[0].shape[0])


@dataclass(frozen=True)
class Task:
    """What is trained: the architecture, a per-sample loss and (optionally) an evaluation.

    ``loss_fn(model, batch) -> per-sample losses [B]`` where ``batch`` is a tuple of tensors (a
    :class:`ClientData` slice). ``model_factory`` must build identical architectures on every call.

    Attributes:
        model_factory: builds a fresh model (same architecture on every call).
        loss_fn: ``(model, batch) -> per-sample losses [B]``.
        tokenizer: the tokenizer of a text task (``None`` for id-level tasks).
        evaluate: ``model -> metrics`` on held-out data, or ``None``.
    """

    model_factory: Callable[[], nn.Module]
    loss_fn: Callable[[nn.Module, Sequence[torch.Tensor]], torch.Tensor]
    tokenizer: Any = None
    evaluate: Callable[[nn.Module], Mapping[str, float]] | None = None


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached copies of the trainable parameters (what FedAvg averages)."""
    return {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}


def _load(model: nn.Module, arrays: Mapping[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    missing = set(params) - set(arrays) - {k for k, p in params.items() if not p.requires_grad}
    if missing:
        raise InvalidArgument(f"FitIns.arrays misses parameters {sorted(missing)[:5]}")
    with torch.no_grad():
        for k, v in arrays.items():
            if k not in params:
                raise InvalidArgument(f"FitIns.arrays has unknown parameter {k!r}")
            params[k].copy_(v)


def local_update(
    task: Task,
    data: ClientData,
    ins: FitIns,
    *,
    model: nn.Module | None = None,
    rng: Any = None,
    dedup: bool | None = None,
) -> FitRes:
    """Algorithm 1's ``UserUpdate``: load the global weights, train locally, return the delta.

    ``ins.config`` keys: ``local-epochs`` (E), ``batch-size`` (B), ``lr`` (eta), ``local-steps`` (cap, 0 =
    none), ``seed``; client DP-SGD when ``dp-noise-multiplier`` >= 0 and ``dp-max-grad-norm`` > 0 are present
    (Poisson sampling within the client, opacus, ``dp-delta``, ``dp-dedup``). ``fedsgd``: one full-batch
    gradient step.

    Privacy noise: the config's ``seed`` comes from the server, so it drives only non-private randomness
    (the data order of plain local SGD). Client DP-SGD noise and Poisson masks come from ``rng``:
    ``None`` (default, what the Flower ClientApp uses) = fresh OS entropy on every call, so the server
    cannot recompute and subtract them; a seed / Generator only for a reproducible single-process
    simulation (the reply then carries ``dp-noise-seeded = 1`` and the claim says "noise seeded").
    ``dedup`` (default: the config's ``dp-dedup``, else False): client DP-SGD on one copy of each
    duplicated example; duplicates are always counted (``dp-max-copies`` in the metrics, and a
    :class:`~privnlp.accounting.duplicates.DuplicateExamplesWarning`).

    Args:
        task: what is trained.
        data: the client's examples.
        ins: the global weights and the fit instructions; ``local-epochs`` and ``lr`` must be > 0,
            ``batch-size`` an integer in [1, 10**7].
        model: a model to reuse (rebuilt from ``task.model_factory`` when ``None`` or with client DP-SGD).
        rng: the client DP-SGD noise source (``None`` = OS entropy; a seed only for a single-process simulation).
        dedup: train client DP-SGD on one copy of each duplicated example (``None`` = the config's ``dp-dedup``).

    Returns:
        The delta of the trainable parameters and the metrics.

    Raises:
        InvalidArgument: a config value out of range, or ``ins.arrays`` not matching the model's parameters.
    """
    cfg = dict(ins.config)
    epochs = float(cfg.get("local-epochs", 1))
    bs = int(cfg.get("batch-size", 8))
    lr = float(cfg.get("lr", 0.1))
    cap = int(cfg.get("local-steps", 0))
    seed = int(cfg.get("seed", 0))
    fedsgd = bool(cfg.get("fedsgd", False))
    check_positive("local-epochs", epochs)
    check_range("batch-size", bs, 1, 10**7, integer=True)
    check_positive("lr", lr)
    n = data.num_examples
    dp = "dp-max-grad-norm" in cfg and float(cfg["dp-max-grad-norm"]) > 0
    if model is None or dp:
        model = task.model_factory()
    _load(model, ins.arrays)
    start = trainable_state(model)
    model.train()
    metrics: dict[str, float] = {"num-examples": float(n)}
    if fedsgd:
        bs, epochs, cap = n, 1.0, 1
    if dp:
        dd = bool(cfg.get("dp-dedup", False)) if dedup is None else bool(dedup)
        metrics.update(_dp_local(task, model, data, epochs, bs, lr, cap, cfg, rng=rng, dedup=dd))
    else:
        metrics.update(_sgd_local(task, model, data, epochs, bs, lr, cap, seed))
    end = dict(model.named_parameters())
    delta = {k: (end[k].detach() - v) for k, v in start.items()}
    return FitRes(delta, metrics)


def _sgd_local(
    task: Task,
    model: nn.Module,
    data: ClientData,
    epochs: float,
    bs: int,
    lr: float,
    cap: int,
    seed: int,
) -> dict[str, float]:
    n = data.num_examples
    g = torch.Generator().manual_seed(seed)
    # plain SGD by hand: torch.optim.SGD's first use imports torch._dynamo (~4 s), paid again by every
    # short-lived Flower ClientApp process
    params = [p for p in model.parameters() if p.requires_grad]
    steps_per_epoch = max(1, math.ceil(n / bs))
    total = max(1, int(round(epochs * steps_per_epoch)))
    if cap > 0:
        total = min(total, cap)
    losses = []
    order = torch.empty(0, dtype=torch.long)
    for _ in range(total):
        if order.numel() < min(bs, n):
            order = torch.cat([order, torch.randperm(n, generator=g)])
        idx, order = order[: min(bs, n)], order[min(bs, n) :]
        batch = tuple(t[idx] for t in data.tensors)
        for p in params:
            p.grad = None
        loss = task.loss_fn(model, batch).mean()
        loss.backward()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-lr)
        losses.append(float(loss.detach()))
    return {"loss": float(sum(losses) / len(losses)), "local-steps": float(total)}


def _dp_local(
    task: Task,
    model: nn.Module,
    data: ClientData,
    epochs: float,
    bs: int,
    lr: float,
    cap: int,
    cfg: Mapping[str, Any],
    *,
    rng: Any,
    dedup: bool,
) -> dict[str, float]:
    """Client DP-SGD (record level) with the training developer's opacus wrapper. The server's ``seed`` is
    deliberately not an argument: the noise and the Poisson masks come from ``rng`` (None = OS entropy)."""

    sigma = float(cfg["dp-noise-multiplier"])
    clip = float(cfg["dp-max-grad-norm"])
    delta = float(cfg.get("dp-delta", 1e-5))
    n = data.num_examples
    loader = DataLoader(TensorDataset(*data.tensors), batch_size=min(bs, n))
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    steps = max(1, int(round(epochs * len(loader))))
    if cap > 0:
        steps = min(steps, cap)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", DuplicateExamplesWarning
        )  # re-issued below with the client's wording
        pt = make_private(
            model,
            opt,
            loader,
            noise_multiplier=sigma,
            max_grad_norm=clip,
            delta=min(delta, 0.5 / n),
            accountant="rdp",
            grad_sample_mode="hooks",
            tied_embeddings="error",
            unit="record",
            rng=rng,
            dedup=dedup,
        )
    dups = pt.duplicates
    if dups is not None and dups.has_duplicates:
        runs = [(sigma, pt.sample_rate, steps)]
        warnings.warn(
            duplicate_message(
                dups,
                epsilon=group_epsilon(runs, 1, pt.delta, "rdp"),
                group_eps=group_epsilon(runs, dups.max_copies, pt.delta, "rdp"),
                delta=pt.delta,
                where=f"client DP-SGD (one local update of {steps} steps)",
            ),
            DuplicateExamplesWarning,
            stacklevel=3,
        )
    try:
        with (
            warnings.catch_warnings()
        ):  # opacus hooks on a model whose inputs need no grad: harmless
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            res = train_private(pt, lambda m, b: task.loss_fn(m, b), steps=steps)
    finally:
        pt.close()
    losses = res.losses or (float("nan"),)
    out = {
        "loss": float(sum(losses) / len(losses)),
        "local-steps": float(res.steps),
        "dp-steps": float(res.steps),
        "dp-sample-rate": float(pt.sample_rate),
        "dp-noise-multiplier": sigma,
        "dp-noise-seeded": float(bool(pt.noise_seeded)),
    }
    if dups is not None:
        out["dp-max-copies"] = float(dups.max_copies)
    return out


# ----------------------------------------------------------------------------- ready-made tasks
def _lm_loss(model: nn.Module, batch: Sequence[torch.Tensor]) -> torch.Tensor:
    ids, mask = batch[0], batch[1]
    labels = ids.masked_fill(mask == 0, -100)
    pos = torch.arange(ids.shape[1]).unsqueeze(0).repeat(ids.shape[0], 1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    return per_sample_lm_loss(logits, labels)


def lm_task(
    tokenizer: Any,
    *,
    n_layer: int = 1,
    n_embd: int = 32,
    n_head: int = 2,
    n_positions: int = 64,
    seed: int = 0,
    evaluate: Callable | None = None,
) -> Task:
    """Tiny GPT-2 next-word prediction (untied embeddings, so client DP-SGD keeps the parameter set).

    Args:
        tokenizer: the tokenizer (its size fixes the vocabulary; eos serves as bos / pad).
        n_layer: transformer layers.
        n_embd: embedding width.
        n_head: attention heads (must divide ``n_embd``).
        n_positions: the longest sequence in tokens.
        seed: the initialisation seed (the same architecture and weights on every call).
        evaluate: ``model -> metrics`` on held-out data, or ``None``.

    Returns:
        The task (per-sample next-token loss on ``(input_ids, attention_mask)`` batches).
    """
    tok_id = tokenizer.eos_token_id

    def factory() -> nn.Module:
        return tiny_gpt2(
            len(tokenizer),
            n_layer=n_layer,
            n_embd=n_embd,
            n_head=n_head,
            n_positions=n_positions,
            tie_word_embeddings=False,
            bos_token_id=tok_id,
            eos_token_id=tok_id,
            pad_token_id=tok_id,
            seed=seed,
        )

    return Task(factory, _lm_loss, tokenizer, evaluate)


def lm_client_data(
    tokenizer: Any, texts_by_client: Mapping[str, Sequence[str]], *, max_length: int = 48
) -> dict[str, ClientData]:
    """Tokenize each client's texts once into right-padded ``(input_ids, attention_mask)``.

    Args:
        tokenizer: the tokenizer.
        texts_by_client: client id -> that client's texts (not empty).
        max_length: truncation length in tokens.

    Returns:
        Client id -> :class:`ClientData` of ``(input_ids, attention_mask)``.

    Raises:
        InvalidArgument: a client without texts.
    """

    out = {}
    for cid, texts in texts_by_client.items():
        if not texts:
            raise InvalidArgument(f"client {cid!r} has no texts")
        b = lm_batch(tokenizer, list(texts), max_length=max_length)
        out[str(cid)] = ClientData((b.input_ids, b.attention_mask))
    return out


def _tag_loss(model: nn.Module, batch: Sequence[torch.Tensor]) -> torch.Tensor:
    ids, tags = batch[0], batch[1]
    return per_sample_token_loss(model(ids), tags)


def tagger_task(
    vocab_size: int,
    num_tags: int,
    *,
    emb_dim: int = 32,
    hidden: int = 32,
    seed: int = 0,
    evaluate: Callable | None = None,
    dp_compatible: bool = True,
) -> Task:
    """BiLSTM tagger with a softmax head; ``dp_compatible=True`` builds it with opacus' DPLSTM so client
    DP-SGD works (per-sample gradients); ``False`` uses ``nn.LSTM`` (several times faster, no client DP-SGD).

    Args:
        vocab_size: the number of token ids.
        num_tags: the number of tags.
        emb_dim: embedding width.
        hidden: hidden width of each LSTM direction.
        seed: the initialisation seed.
        evaluate: ``model -> metrics`` on held-out data, or ``None``.
        dp_compatible: use opacus' DPLSTM (needed for client DP-SGD).

    Returns:
        The task (per-token loss on ``(token_ids, tag_ids)`` batches; tags padded with -100).
    """

    def factory() -> nn.Module:
        return BiLSTMTagger(
            vocab_size,
            num_tags,
            emb_dim=emb_dim,
            hidden=hidden,
            dp_compatible=dp_compatible,
            seed=seed,
        )

    return Task(factory, _tag_loss, None, evaluate)
