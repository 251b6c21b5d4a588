"""Training-loop helpers for DP-SGD: a plain-PyTorch loop and a Hugging Face ``Trainer`` subclass.

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (DP-SGD with large logical batches built
from accumulated physical batches). One accounting event is recorded per *logical* step: opacus'
``BatchMemoryManager`` tells the optimizer to skip noise / accounting on all but the last physical
batch of a logical batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from opacus.utils.batch_memory_manager import BatchMemoryManager
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from privnlp.core.claims import PrivacyClaim
from privnlp.core.errors import InvalidArgument, PrivacyBudgetExceeded, check_positive, check_range

from .dp_sgd import (
    PrivateTraining,
    choose_grad_sample_mode,
    per_sample_classification_loss,
    per_sample_lm_loss,
    per_sample_token_loss,
)
from .engine import make_private

__all__ = ["TrainResult", "train_private", "head_loss", "batch_len", "DPTrainer"]  # noqa: F822 (DPTrainer: module __getattr__, transformers loaded on first use)


@dataclass(frozen=True)
class TrainResult:
    """Outcome of :func:`train_private`: mean per-sample loss of every physical batch, logical steps
    taken, epsilon spent, the claim, and whether the budget stopped training.

    Attributes:
        losses: the mean per-sample loss of every physical batch.
        steps: the number of logical (optimizer) steps taken.
        epsilon: the epsilon spent at the run's delta.
        claim: the privacy claim of the run.
        stopped_by_budget: whether training stopped because the next step would exceed the budget.
    """

    losses: tuple[float, ...]
    steps: int
    epsilon: float
    claim: PrivacyClaim
    stopped_by_budget: bool = False


def batch_len(batch: Any) -> int:
    """Number of examples in a batch (tensor, tuple/list of tensors, or dict of tensors)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)) and batch:
        return batch_len(batch[0])
    raise InvalidArgument(f"cannot tell the batch size of a {type(batch).__name__}")


_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def head_loss(model: Any, batch: Any) -> torch.Tensor:
    """The per-example loss of a standard Hugging Face head, so a training loop needs no hand-written loss.

    ``batch`` is either a mapping of model keyword arguments with ``labels`` (the HF convention), or a
    tuple ``(input_ids, labels)`` / ``(input_ids, position_ids, labels)`` (what
    :func:`privnlp.models.lm_batch` + ``TensorDataset`` give). The head is read from the model class:
    ``*ForCausalLM`` / ``*LMHeadModel`` -> shifted token cross-entropy per sequence,
    ``*ForTokenClassification`` -> token cross-entropy per sequence, ``[B, C]`` logits -> sequence
    classification. Anything else: pass ``loss_fn`` yourself.

    Args:
        model: the (possibly opacus-wrapped) model.
        batch: a mapping with ``labels`` or a tuple ``(input_ids, [position_ids,] labels)``.

    Returns:
        ``[B]`` per-example losses (the privacy unit is the example).
    """
    if isinstance(batch, Mapping):
        kwargs = dict(batch)
        if "labels" not in kwargs:
            raise InvalidArgument("head_loss: a mapping batch needs 'labels' (or pass loss_fn)")
        labels = kwargs.pop("labels")
    elif isinstance(batch, (tuple, list)) and len(batch) in (2, 3):
        labels = batch[-1]
        kwargs = {"input_ids": batch[0]}
        if len(batch) == 3:
            kwargs["position_ids"] = batch[1]
    else:
        raise InvalidArgument(
            "head_loss: batch must be a mapping with 'labels' or a tuple (input_ids, [position_ids,] "
            f"labels); got {type(batch).__name__}: pass loss_fn(model, batch) -> [B] losses"
        )
    out = model(**kwargs)
    logits = getattr(out, "logits", out)
    name = type(getattr(model, "_module", model)).__name__  # opacus wraps the model
    if logits.dim() == 2:
        return per_sample_classification_loss(logits, labels)
    if logits.dim() == 3 and name.endswith(_CAUSAL_SUFFIXES):
        return per_sample_lm_loss(logits, labels)
    if logits.dim() == 3 and name.endswith("ForTokenClassification"):
        return per_sample_token_loss(logits, labels)
    raise InvalidArgument(
        f"head_loss: no standard loss for {name} (logits of shape {tuple(logits.shape)}); "
        "pass loss_fn(model, batch) -> [B] per-example losses"
    )


def train_private(
    pt: PrivateTraining,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    *,
    epochs: float | None = None,
    steps: int | None = None,
    max_physical_batch_size: int | None = None,
    stop_at_budget: bool = False,
    on_step: Callable[[PrivateTraining, float], None] | None = None,
    progress: bool = False,
) -> TrainResult:
    """Run DP-SGD with the handle from :func:`make_private`.

    Args:
        loss_fn: ``loss_fn(model, batch) -> per-sample losses [B]`` (e.g. with
            :func:`~privnlp.mechanisms.training.dp_sgd.per_sample_lm_loss`); ``None``: the loss of
            the model's standard Hugging Face head (:func:`head_loss`).
        epochs / steps: stop after this many passes / logical steps (one of them is required).
        max_physical_batch_size: split logical (Poisson) batches into physical batches of at most
            this size with opacus' ``BatchMemoryManager`` (one accounting event per logical step).
        stop_at_budget: catch :class:`PrivacyBudgetExceeded` and stop (default: re-raise).
        on_step: called after each logical step with ``(pt, mean loss of the last physical batch)``.
    """
    loss_fn = head_loss if loss_fn is None else loss_fn
    if (epochs is None) == (steps is None):
        raise InvalidArgument("train_private: pass exactly one of epochs (> 0) or steps (>= 1)")
    if epochs is not None:
        check_positive("epochs", epochs)
    if steps is not None:
        check_range("steps", steps, 1, float("inf"), integer=True)
    if max_physical_batch_size is not None:
        check_range(
            "max_physical_batch_size", max_physical_batch_size, 1, float("inf"), integer=True
        )
    n_batches = len(pt.data_loader)
    target = int(steps) if steps is not None else max(1, int(round(epochs * n_batches)))
    start = pt.steps
    losses: list[float] = []
    stopped = False
    bar = None
    if progress:
        bar = tqdm(total=target, desc="DP-SGD", unit="step")

    def physical_batches():
        if max_physical_batch_size is None:
            yield from pt.data_loader
            return

        with BatchMemoryManager(
            data_loader=pt.data_loader,
            max_physical_batch_size=int(max_physical_batch_size),
            optimizer=pt.optimizer,
        ) as dl:
            yield from dl

    pt.model.train() if hasattr(pt.model, "train") else None
    try:
        while pt.steps - start < target:
            for batch in physical_batches():
                before = pt.steps
                pt.optimizer.zero_grad(set_to_none=True)
                if batch_len(batch) == 0:
                    pt.noise_only_step()
                else:
                    lps = loss_fn(pt.model, batch)
                    loss = pt.loss(lps)
                    with (
                        warnings.catch_warnings()
                    ):  # benign with opacus hooks when the first layer's inputs
                        warnings.filterwarnings(
                            "ignore", message="Full backward hook is firing"
                        )  # are token ids
                        loss.backward()
                    pt.optimizer.step()
                    losses.append(float(lps.detach().mean()))
                if pt.steps > before:
                    if bar is not None:
                        bar.update(pt.steps - before)
                    if on_step is not None:
                        on_step(pt, losses[-1] if losses else float("nan"))
                    if pt.steps - start >= target:
                        break
    except PrivacyBudgetExceeded:
        if not stop_at_budget:
            raise
        stopped = True
    finally:
        if bar is not None:
            bar.close()
    return TrainResult(tuple(losses), pt.steps - start, pt.epsilon(), pt.claim(), stopped)


def _trainer_mode(
    model: Any, batch_size: int, mode: str | None, *, ddp: bool, low_precision: bool
) -> str | None:
    """The grad-sample mode ``DPTrainer`` passes to ``make_private`` (``None``: the caller's choice unchanged).

    Book-keeping turns ``requires_grad`` off during training, which torch DDP (wrapped by the Trainer) refuses: under
    DDP ``auto`` takes ghost clipping where it would take book-keeping, and an explicit request is refused. Ghost
    clipping is refused under autocast (its norms in bf16 exceed C), so with the Trainer's ``bf16`` / ``fp16``
    ``auto`` takes hooks where it would take ghost (per-sample norms and sums in fp32)."""
    mode = mode or "auto"
    if ddp and mode == "bookkeeping":
        raise InvalidArgument(
            "DPTrainer under torchrun/accelerate (DDP): grad_sample_mode='bookkeeping' is not "
            "supported with the Trainer's DDP wrapper; use 'ghost' or 'hooks', or train_private"
        )
    if mode != "auto":
        return None
    chosen = choose_grad_sample_mode(model, batch_size)
    if ddp and chosen == "bookkeeping":
        chosen = "ghost"
    if low_precision and chosen == "ghost":
        chosen = "hooks"
    return chosen if (ddp or low_precision) else None


def _make_dp_trainer() -> type:
    from transformers import Trainer

    class DPTrainer(Trainer):
        """``transformers.Trainer`` that trains with DP-SGD (opacus hooks on the model, Poisson loader,
        DP optimizer with the hard budget). Extra keyword arguments:

        * ``dp``: dict of :func:`make_private` keyword arguments (``noise_multiplier`` or
          ``target_epsilon`` + ``epochs``, ``max_grad_norm``, ``delta``, ``accountant``...).
        * ``per_sample_loss``: ``f(logits, labels) -> [B]`` (default: causal-LM loss for models whose
          config says ``is_decoder``/``gpt2``, sequence-classification cross-entropy otherwise).
        * ``dp_rng``: seed / generator for the noise and the sampler.

        HF's own gradient clipping is disabled (``max_grad_norm=0``); the privacy handle is
        ``trainer.private`` (``trainer.private.claim()``).

        Multi-process (``torchrun --nproc_per_node W script.py`` or ``accelerate launch``): DP-SGD runs on every
        rank with one ledger (:mod:`privnlp.mechanisms.training.distributed`); the expected global batch is
        ``per_device_train_batch_size x W``; ``dp_rng`` must stay ``None`` (secure noise on each rank).
        """

        def __init__(
            self,
            *args: Any,
            dp: dict | None = None,
            per_sample_loss: Callable | None = None,
            dp_rng: Any = None,
            **kwargs: Any,
        ) -> None:
            super().__init__(*args, **kwargs)
            if not dp:
                raise InvalidArgument("DPTrainer needs dp={...} (make_private keyword arguments)")
            if int(self.args.gradient_accumulation_steps) != 1:
                raise InvalidArgument(
                    "DPTrainer: gradient_accumulation_steps must be 1 (each optimizer step is one "
                    "Poisson-sampled DP batch; for large logical batches use train_private with "
                    f"max_physical_batch_size); got {self.args.gradient_accumulation_steps}"
                )
            self.dp = dict(dp)
            self.per_sample_loss = per_sample_loss
            self.dp_rng = dp_rng
            self.private: PrivateTraining | None = None
            self.args.max_grad_norm = 0.0

        def _default_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            if logits.dim() == 3:
                cfg = getattr(self.model, "config", None)
                causal = getattr(cfg, "model_type", "") in ("gpt2", "gpt_neo", "llama") or getattr(
                    cfg, "is_decoder", False
                )
                return per_sample_lm_loss(logits, labels, shift=bool(causal))
            return torch.nn.functional.cross_entropy(logits, labels, reduction="none")

        def get_train_dataloader(self):  # type: ignore[override]
            if self.private is None:
                ds = self.train_dataset
                if hasattr(ds, "column_names"):
                    ds = self._remove_unused_columns(ds, description="training")
                # under torchrun / accelerate launch (DDP) the expected *global* batch is per_device x world_size,
                # as in HF; each rank Poisson-samples its shard at that global rate (issue #20, distributed.py)
                dl = DataLoader(
                    ds,
                    batch_size=self.args.per_device_train_batch_size * max(1, self.args.world_size),
                    collate_fn=self.data_collator,
                )
                # from_pretrained returns an eval-mode model; HF's Trainer calls model.train() before training,
                # and opacus refuses a model in eval mode (issue #29 item 7)
                self.model.train()
                if self.optimizer is None:
                    super().create_optimizer()
                dp = dict(self.dp)
                mode = (
                    _trainer_mode(  # DDP (the Trainer's wrapper, issue #20); bf16 / fp16 autocast
                        self.model,
                        dl.batch_size,
                        dp.get("grad_sample_mode"),
                        ddp=self.args.world_size > 1,
                        low_precision=bool(self.args.bf16 or self.args.fp16),
                    )
                )
                if mode is not None:
                    dp["grad_sample_mode"] = mode
                self.private = make_private(
                    self.model, self.optimizer, dl, wrap_model=False, rng=self.dp_rng, **dp
                )
                self.optimizer = self.private.optimizer
            return self.private.data_loader

        def _get_grad_norm(self, model: Any, grad_norm: Any = None) -> Any:  # type: ignore[override]
            # HF computes this before optimizer.step() from p.grad: the raw (unclipped, noiseless) gradient in
            # hooks mode -- not private -- and None (logged as 0) under book-keeping. Log instead the norm of the
            # privatized gradient the DP optimizer applies: a 0-dim tensor filled in place by the step, read by
            # HF's logging after the step (issue #29 item 7)
            if self.private is None:
                return None
            return self.private.last_grad_norm

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # type: ignore[override]
            # the Trainer zeroes gradients through model.zero_grad(), which leaves opacus' per-sample
            # gradients (hooks mode) and their processed flags behind: zero through the DP optimizer so
            # each step sees only its own batch (gradient accumulation is refused in __init__)
            self.private.optimizer.zero_grad(set_to_none=True)
            inputs = dict(inputs)
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            fn = self.per_sample_loss or self._default_loss
            loss = self.private.loss(fn(outputs.logits, labels))
            return (loss, outputs) if return_outputs else loss

    return DPTrainer


def __getattr__(name: str) -> Any:
    if name == "DPTrainer":
        cls = _make_dp_trainer()
        globals()["DPTrainer"] = cls
        return cls
    raise AttributeError(name)
