"""DP-SGD on opacus with a hard privacy budget and a persisted dp_accounting ledger.

Papers: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (DP-SGD for BERT; sharded noise
sigma*sqrt(P)), ``../shared/papers/film-recovering-private-text-in-fl.txt`` (DPSGD as a defense
against FILM, with the noise-threshold attack variant), Abadi et al. 2016 (DP-SGD).

Threat model: anyone who sees the trained model or every intermediate noised update (an
honest-but-curious server / eavesdropper / black-box querier of the released LM). Guarantee:
(epsilon, delta)-DP at the example level -- add/remove one training example when the sampling rate and the
expected batch size are public hyperparameters (``expected_batch_size`` + ``public_dataset_size`` or
``sample_rate``); by default they are computed from the dataset size N, and the relation is zero-out
neighbours with N public (issue #28 item 2) --, accounted with the
tightest sound accountant (``prv`` default: min of dp_accounting PLD and wide-order RDP; ``rdp``:
dp_accounting RDP with orders up to 8192); opacus' accountants are diagnostics. Poisson sampling is the
default (what the accountants assume); with a shuffled / fixed-size loader the claim also states the
epsilon without amplification by sampling.

Privacy noise and its seeds: ``rng=None`` (default) draws the noise and the Poisson masks from
generators seeded from ``os.urandom``; ``rng=`` a seed / Generator is a reproducible simulation and
the claim says "noise seeded". Checkpoints store the state of both generators of a seeded run (a
resumed run equals the uninterrupted one and never replays noise); a secure run resumes with fresh
OS entropy. Duplicated examples are counted (``dedup=True`` drops the copies) and the claim states the
group epsilon of the most repeated record (:mod:`privnlp.accounting.duplicates`).

Usage::

    pt = make_private(model, optimizer, loader, target_epsilon=3.0, epochs=2, max_grad_norm=1.0, rng=0)
    for batch in pt.data_loader:
        pt.optimizer.zero_grad()
        loss = pt.loss(per_sample_loss(pt.model, batch))   # per-sample losses, shape [B]
        loss.backward()
        pt.optimizer.step()          # raises PrivacyBudgetExceeded *before* a step over budget
    print(pt.claim().statement())
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from opacus.data_loader import DPDataLoader
from opacus.grad_sample import GradSampleModule, GradSampleModuleFastGradientClipping
from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, Subset

from privnlp.accounting import (
    REPORTED,
    BudgetGuard,
    DPLedger,
)
from privnlp.accounting.adversaries import dp_sgd_adversary_bounds
from privnlp.accounting.duplicates import (
    duplicate_message,
    find_duplicates,
    group_epsilon,
    row_keys,
)
from privnlp.core.claims import AdversaryBound, PrivacyClaim
from privnlp.core.errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    PrivacyBudgetExceeded,
    check_range,
)

from .bookkeeping import supports_bookkeeping
from .samplers import register_for_model

__all__ = [
    "PrivateTraining",
    "SamplingPlan",
    "resolve_sampling",
    "per_sample_lm_loss",
    "per_sample_classification_loss",
    "per_sample_token_loss",
    "add_batch_position_ids",
    "handle_tied_embeddings",
    "tied_parameter_names",
    "choose_grad_sample_mode",
    "GRAD_SAMPLE_MODES",
    "TIED_EMBEDDINGS",
]

GRAD_SAMPLE_MODES = ("auto", "ghost", "hooks", "functorch", "bookkeeping")  # bookkeeping: issue #20
TIED_EMBEDDINGS = ("untie", "freeze", "error")


# ----------------------------------------------------------------------------- per-sample losses
def per_sample_lm_loss(
    logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = -100, shift: bool = True
) -> torch.Tensor:
    """Causal-LM loss per sequence: mean token cross-entropy of each row (shape ``[B]``).

    The privacy unit is the sequence (one training example).

    Args:
        logits: ``[B, T, V]`` logits.
        labels: ``[B, T]`` token ids, ``ignore_index`` where nothing is scored.
        ignore_index: the label of unscored positions.
        shift: predict token ``t+1`` from position ``t`` (causal LM); ``False`` for tagging.

    Returns:
        ``[B]`` mean cross-entropy (nats) over each row's scored tokens.
    """
    if shift:
        logits, labels = logits[:, :-1, :], labels[:, 1:]
    b, t, v = logits.shape
    tok = nn.functional.cross_entropy(
        logits.reshape(-1, v), labels.reshape(-1), ignore_index=ignore_index, reduction="none"
    ).view(b, t)
    valid = (labels != ignore_index).sum(1).clamp(min=1)
    return tok.sum(1) / valid


def per_sample_token_loss(
    logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = -100
) -> torch.Tensor:
    """Token-classification (tagging) loss per sequence, shape ``[B]``.

    Args:
        logits: ``[B, T, num_tags]`` logits.
        labels: ``[B, T]`` tag ids, ``ignore_index`` at padding.
        ignore_index: the label of unscored positions.

    Returns:
        ``[B]`` mean cross-entropy (nats) per sequence.
    """
    return per_sample_lm_loss(logits, labels, ignore_index=ignore_index, shift=False)


def per_sample_classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sequence-classification cross-entropy per example, shape ``[B]``.

    Args:
        logits: ``[B, C]`` logits.
        labels: ``[B]`` class indices.

    Returns:
        ``[B]`` cross-entropy (nats).
    """
    return nn.functional.cross_entropy(logits, labels, reduction="none")


# ----------------------------------------------------------------------------- model preparation
def _forward_params(model: nn.Module) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover
        return set()


def add_batch_position_ids(model: nn.Module) -> Any:
    """Install a forward pre-hook that passes explicit per-row ``position_ids`` (and zero
    ``token_type_ids`` for BERT-like models) when the caller gives only ``input_ids``.

    With opacus 1.6 + transformers 5 the models otherwise build ``position_ids`` of batch size 1
    (``.expand``/broadcast), and opacus' per-sample embedding gradients fail. We build them with
    ``.repeat(B, 1)`` -- or, for RoBERTa-style embeddings (``create_position_ids_from_input_ids`` and a
    ``padding_idx``), with the model's own per-row rule (positions from ``padding_idx + 1``). Returns the hook handle (``.remove()`` to undo).
    """
    params = _forward_params(model)
    want_pos = "position_ids" in params
    # RoBERTa-style embeddings number positions from padding_idx + 1 and give pads padding_idx: use the model's own
    # rule (per row: it has the batch axis opacus needs), not 0..T-1, or a pretrained model reads wrong positions
    own_rule = next(
        (
            (m.create_position_ids_from_input_ids, m.padding_idx)
            for m in model.modules()
            if callable(getattr(m, "create_position_ids_from_input_ids", None))
            and isinstance(getattr(m, "padding_idx", None), int)
        ),
        None,
    )
    cfg = getattr(model, "config", None)
    want_tt = "token_type_ids" in params and getattr(cfg, "type_vocab_size", 0)

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        ids = kwargs.get(
            "input_ids", args[0] if args and isinstance(args[0], torch.Tensor) else None
        )
        if ids is None or ids.dim() != 2:
            return args, kwargs
        b, t = ids.shape
        if want_pos and kwargs.get("position_ids") is None:
            kwargs["position_ids"] = (
                own_rule[0](ids, own_rule[1])
                if own_rule is not None
                else torch.arange(t, device=ids.device).unsqueeze(0).repeat(b, 1)
            )
        if want_tt and kwargs.get("token_type_ids") is None:
            kwargs["token_type_ids"] = torch.zeros((b, t), dtype=torch.long, device=ids.device)
        return args, kwargs

    if not (want_pos or want_tt):
        return None
    return model.register_forward_pre_hook(hook, with_kwargs=True)


def tied_parameter_names(model: nn.Module) -> list[list[str]]:
    """Groups of parameter names that share one trainable tensor (e.g. GPT-2's wte / lm_head)."""
    groups: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            mod_name = name.rpartition(".")[0]
            owner = model.get_submodule(mod_name) if mod_name else model
            # opacus' DPLSTM/DPGRU expose their RNNLinear weights under torch-style alias names: not a tie
            if any(c.__name__ == "DPRNNBase" for c in type(owner).__mro__):
                continue
            groups.setdefault(id(p), []).append(name)
    return [g for g in groups.values() if len(g) > 1]


def _set_param(model: nn.Module, name: str, value: nn.Parameter) -> None:
    mod_name, _, attr = name.rpartition(".")
    mod = model.get_submodule(mod_name) if mod_name else model
    setattr(mod, attr, value)


def handle_tied_embeddings(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, how: str = "untie"
) -> str | None:
    """Resolve tied (shared) trainable weights before DP-SGD.

    ``untie``: every extra use gets its own copy (added to the optimizer's param group of the
    original); HF ``config.tie_word_embeddings`` is set to False. ``freeze``: the shared tensor is
    frozen (for GPT-2 this freezes both the input and the output embedding). ``error``: refuse.
    Returns a note for the claim, or ``None`` if nothing was tied.
    """
    if how not in TIED_EMBEDDINGS:
        raise InvalidArgument(f"tied_embeddings must be one of {TIED_EMBEDDINGS}; got {how!r}")
    groups = tied_parameter_names(model)
    if not groups:
        return None
    if how == "error":
        raise InvalidArgument(
            f"model has tied trainable weights {groups}; pass tied_embeddings='untie' or 'freeze'"
        )
    params = dict(model.named_parameters(remove_duplicate=False))
    if how == "freeze":
        for g in groups:
            params[g[0]].requires_grad_(False)
        return f"tied weights {groups} frozen (not trained)"
    for g in groups:
        orig = params[g[0]]
        for name in g[1:]:
            new = nn.Parameter(orig.detach().clone())
            _set_param(model, name, new)
            if optimizer is not None:
                for group in optimizer.param_groups:
                    if any(p is orig for p in group["params"]):
                        group["params"].append(new)
                        break
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "tie_word_embeddings"):
        cfg.tie_word_embeddings = False
    return f"tied weights {groups} untied (independent copies trained)"


#: ``grad_sample_mode="auto"`` picks ghost clipping only when the per-sample gradients that hooks mode
#: materialises (batch size x trainable parameters x 4 bytes) would exceed this many bytes: below it,
#: hooks mode (one backward pass) is faster; above it, ghost clipping (two backward passes, no
#: per-sample gradient tensors) is what fits in memory.
AUTO_GHOST_BYTES = 2 << 30
#: issue #20: above this many bytes of per-sample gradients per batch, ``auto`` picks book-keeping clipping (one
#: backward pass, no per-sample gradients; all-MiniLM-L6-v2 at batch 16: 1.03x the non-private step vs hooks 3.9x,
#: ghost 1.5x) when every trainable layer has an opacus grad sampler; below it hooks is faster (tiny BERT: 1.8x vs 2.4x).
AUTO_BOOKKEEPING_BYTES = 128 << 20


def choose_grad_sample_mode(model: nn.Module, batch_size: int | None = None) -> str:
    """``bookkeeping`` when every trainable layer has an opacus norm/grad sampler, no weight is shared and
    the per-sample gradients of a ``batch_size`` batch would take more than :data:`AUTO_BOOKKEEPING_BYTES`
    (unknown batch size: whenever possible); ``ghost`` where book-keeping does not apply and they would exceed
    :data:`AUTO_GHOST_BYTES`; else ``hooks`` (opacus then uses functorch for layers without a sampler, e.g.
    HF ``Conv1D``)."""

    register_for_model(model)  # HF Conv1D (GPT-2) and RMSNorm (Llama) rules: issue #29 item 2
    if tied_parameter_names(model):
        return "hooks"
    known = set(GradSampleModuleFastGradientClipping.NORM_SAMPLERS) | set(
        GradSampleModule.GRAD_SAMPLERS
    )
    for mod in model.modules():
        if any(p.requires_grad for p in mod.parameters(recurse=False)):
            if type(mod) not in known or "RNN" in type(mod).__name__:
                return "hooks"
    if batch_size is not None:
        per_sample_bytes = int(batch_size) * sum(p.numel() for p in _trainable(model)) * 4
        if per_sample_bytes <= min(AUTO_GHOST_BYTES, AUTO_BOOKKEEPING_BYTES):
            return "hooks"
    if supports_bookkeeping(model):
        return "bookkeeping"  # beats ghost (one backward instead of two, same memory class) -- issue #20
    if batch_size is not None and per_sample_bytes <= AUTO_GHOST_BYTES:
        return "hooks"
    return "ghost"


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _check_lstm(model: nn.Module) -> None:
    for name, mod in model.named_modules():
        if type(mod) in (nn.LSTM, nn.GRU, nn.RNN) and any(
            p.requires_grad for p in mod.parameters()
        ):
            raise InvalidArgument(
                f"model: layer {name!r} is a torch {type(mod).__name__}, which has no per-sample gradients in opacus; "
                "build it with opacus.layers.DPLSTM (privnlp.models.BiLSTMTagger(..., dp_compatible=True)) or "
                "convert with opacus.validators.ModuleValidator.fix before creating the optimizer"
            )


# ----------------------------------------------------------------------------- sampling (issue #28 item 2)
#: the neighbouring relation of a claim whose sampling rate and normaliser come from the dataset size N
ZERO_OUT = "zero-out (dataset size N public)"
ADD_REMOVE = "add/remove"


@dataclass(frozen=True)
class SamplingPlan:
    """The sampling rate q and the normaliser B of DP-SGD, and where they come from.

    Attributes:
        sample_rate: Poisson inclusion probability q of each example per step.
        expected_batch_size: B, the fixed denominator of the noisy mean (noise std sigma*C/B).
        public_dataset_size: the public N (bound) that q and B were derived from; ``None`` when the caller gave
            q and B directly, or in the default (data-derived) mode.
        public: q and B are public hyperparameters (independent of the private dataset size).
        neighbouring: the relation the claim holds for: ``"add/remove"`` when public, else zero-out neighbours
            with N public (an added / removed example can change q = 1/len(loader) and B).
        reference_size: the N that the default delta uses (the public N where there is one).
    """

    sample_rate: float
    expected_batch_size: float
    public_dataset_size: int | None
    public: bool
    neighbouring: str
    reference_size: int


def _positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise InvalidArgument(f"{name} must be an integer >= 1; got {v!r}")
    return int(v)


def resolve_sampling(
    n: int,
    n_batches: int,
    *,
    expected_batch_size: int | None = None,
    sample_rate: float | None = None,
    public_dataset_size: int | None = None,
) -> SamplingPlan:
    """Resolve DP-SGD's sampling rate q and normaliser B.

    Public mode (any of the three keyword arguments given; two of them are needed): q and B never depend on
    the private dataset size, so the claim holds for add/remove neighbours. ``expected_batch_size`` B with
    ``public_dataset_size`` N_pub (a public upper bound on N): q = B / N_pub; with ``sample_rate`` q: both as
    given; ``sample_rate`` with ``public_dataset_size``: B = q * N_pub. Default (none given): q = 1/n_batches
    and B = int(n * q) as opacus computes them from the private N: an added example can change both, so the
    claim is for zero-out neighbours with N public.

    Args:
        n: the number of training examples (private unless the claim makes it public).
        n_batches: ``len(data_loader)``.
        expected_batch_size: public expected batch size B (integer >= 1).
        sample_rate: public Poisson sampling rate q in (0, 1].
        public_dataset_size: public bound on N (integer >= 1); must be >= n.

    Returns:
        A :class:`SamplingPlan`.

    Raises:
        InvalidArgument: only one of the three given, all three given, or a value out of range.
    """
    given = {
        k: v
        for k, v in (
            ("expected_batch_size", expected_batch_size),
            ("sample_rate", sample_rate),
            ("public_dataset_size", public_dataset_size),
        )
        if v is not None
    }
    if not given:
        q = 1.0 / n_batches
        return SamplingPlan(q, int(n * q), None, False, ZERO_OUT, n)
    if len(given) != 2:
        raise InvalidArgument(
            "public sampling: give exactly two of expected_batch_size (integer >= 1), sample_rate (in (0, 1]) "
            f"and public_dataset_size (integer >= 1, a public bound on N); got {sorted(given)}"
        )
    if expected_batch_size is not None:
        expected_batch_size = _positive_int("expected_batch_size", expected_batch_size)
    if public_dataset_size is not None:
        public_dataset_size = _positive_int("public_dataset_size", public_dataset_size)
        if public_dataset_size < n:
            raise InvalidArgument(
                f"public_dataset_size must be a public upper bound on the dataset size (>= {n}); got "
                f"{public_dataset_size}"
            )
    if sample_rate is not None:
        check_range("sample_rate", sample_rate, 0.0, 1.0, error=InvalidPrivacyParameter)
        if not sample_rate > 0:
            raise InvalidPrivacyParameter(f"sample_rate must be in (0, 1]; got {sample_rate!r}")
        q = float(sample_rate)
    if expected_batch_size is not None and public_dataset_size is not None:
        if expected_batch_size > public_dataset_size:
            raise InvalidArgument(
                f"expected_batch_size must be <= public_dataset_size ({public_dataset_size}); got "
                f"{expected_batch_size}"
            )
        q = expected_batch_size / public_dataset_size
    b = float(expected_batch_size) if expected_batch_size is not None else q * public_dataset_size
    ref = public_dataset_size if public_dataset_size is not None else int(math.ceil(b / q))
    return SamplingPlan(q, b, public_dataset_size, True, ADD_REMOVE, max(1, ref))


def _poisson_loader(
    data_loader: Any, sample_rate: float, generator: torch.Generator, *, distributed: bool = False
) -> Any:
    """opacus' ``DPDataLoader`` over ``data_loader``'s dataset at ``sample_rate``: ``from_data_loader`` with the
    rate given (``from_data_loader`` itself takes 1/len(data_loader), computed from the private N)."""

    if isinstance(data_loader.dataset, IterableDataset):
        raise InvalidArgument(
            "data_loader: Poisson sampling needs a map-style dataset, not an IterableDataset"
        )
    return DPDataLoader(
        data_loader.dataset,
        sample_rate=sample_rate,
        collate_fn=data_loader.collate_fn,
        generator=generator,
        distributed=distributed,
        num_workers=data_loader.num_workers,
        pin_memory=data_loader.pin_memory,
        timeout=data_loader.timeout,
        worker_init_fn=data_loader.worker_init_fn,
        multiprocessing_context=data_loader.multiprocessing_context,
        prefetch_factor=data_loader.prefetch_factor,
        persistent_workers=data_loader.persistent_workers,
    )


def _derived_seed(state: torch.Tensor, name: str) -> int:
    """A 63-bit seed derived from a saved generator state (resume on another device kind)."""
    h = hashlib.blake2b(state.cpu().numpy().tobytes(), digest_size=8, person=b"privnlp-resume")
    h.update(name.encode())
    return int.from_bytes(h.digest(), "little") & ((1 << 63) - 1)


def _umask_mode() -> int:
    """``0o666`` minus the process umask (read by setting and restoring it: os has no getter)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def _num(x: float) -> float | int:
    """``x`` as an int when it is integral (an expected batch size of 16, not 16.0)."""
    return int(x) if float(x).is_integer() else float(x)


# ----------------------------------------------------------------------------- the handle
class PrivateTraining:
    """The private model / optimizer / data loader plus the ledger and the budget.

    Attributes: ``model`` (opacus GradSampleModule: call it like the original), ``optimizer``
    (opacus DPOptimizer with the budget guard), ``data_loader`` (Poisson-sampled unless
    ``poisson_sampling=False``), ``ledger`` (:class:`~privnlp.accounting.DPLedger`), ``guard``,
    and the configuration. Use :meth:`loss` on per-sample losses so ghost clipping works.
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        optimizer: Any,
        data_loader: Any,
        original_model: nn.Module,
        grad_sample_mode: str,
        ledger: DPLedger,
        guard: BudgetGuard,
        noise_multiplier: float,
        max_grad_norm: float,
        sample_rate: float,
        expected_batch_size: float,
        dataset_size: int,
        delta: float,
        accountant: str,
        target_epsilon: float | None,
        poisson_sampling: bool,
        planned_steps: int | None,
        unit: str,
        notes: tuple[str, ...],
        hooks: tuple = (),
        noise_seeded: bool = False,
        generators: dict | None = None,
        duplicates: Any = None,
        public_dataset_size: int | None = None,
        public_sampling: bool = False,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.data_loader = data_loader
        self.original_model = original_model
        self.grad_sample_mode = grad_sample_mode
        self.ledger = ledger
        self.guard = guard
        self.noise_multiplier = noise_multiplier
        self.max_grad_norm = max_grad_norm
        self.sample_rate = sample_rate
        self.expected_batch_size = expected_batch_size
        self.dataset_size = dataset_size
        self.delta = delta
        self.accountant = accountant
        self.target_epsilon = target_epsilon
        self.poisson_sampling = poisson_sampling
        self.planned_steps = planned_steps
        self.unit = unit
        self.notes = notes
        self.hooks = hooks
        self.noise_seeded = noise_seeded
        self.generators = dict(generators or {})
        self.duplicates = duplicates
        self.public_dataset_size = public_dataset_size
        self.public_sampling = public_sampling
        # set by the engine: the norm of the privatized gradient (a 0-dim tensor updated at every step)
        self.last_grad_norm: torch.Tensor | None = None
        self.base_digest: str | None = None  # DP-LoRA: digest of the frozen base weights (lora.py)
        self.closed = False

    @property
    def neighbouring(self) -> str:
        """``"add/remove"`` when q and B are public hyperparameters, else zero-out neighbours with N public."""
        return ADD_REMOVE if self.public_sampling else ZERO_OUT

    # -- training helpers ------------------------------------------------------------------
    def loss(self, loss_per_sample: torch.Tensor) -> Any:
        """Reduce per-sample losses (shape ``[B]``) for ``.backward()``: the mean in hooks mode, the
        opacus double-backward tensor in ghost mode."""
        if loss_per_sample.dim() != 1:
            raise InvalidArgument(
                f"loss_per_sample must have shape [batch]; got {tuple(loss_per_sample.shape)}"
            )
        if self.grad_sample_mode == "ghost":
            return DPTensorFastGradientClipping(self.model, self.optimizer, loss_per_sample, "mean")
        return loss_per_sample.mean()

    def noise_only_step(self) -> None:
        """Take a step on an empty (Poisson) batch: clipped sum = 0, noise and accounting as usual."""
        for p in self.optimizer.params:
            if self.grad_sample_mode == "ghost":
                p.grad = torch.zeros_like(p)
            else:
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
        self.optimizer.step()

    @property
    def steps(self) -> int:
        """Logical DP-SGD steps taken (accounting events)."""
        return self.ledger.steps

    def allowed_steps(self) -> float:
        return self.guard.allowed_steps(self.optimizer.noise_multiplier, self.accounting_rate)

    @property
    def accounting_rate(self) -> float:
        """The sampling rate the ledger, the budget and the calibration use: the Poisson rate q, or 1 for a
        shuffled / fixed-size loader (no amplification by sampling is claimed for it)."""
        return float(self.sample_rate) if self.poisson_sampling else 1.0

    # -- privacy ---------------------------------------------------------------------------
    def estimate(self):
        return self.ledger.epsilon(self.delta, self.accountant)

    def epsilon(self) -> float:
        """Epsilon spent so far at ``self.delta``: the tightest sound accountant's value (``prv``: the minimum of
        dp_accounting PLD and wide-order RDP; ``rdp``: dp_accounting RDP); opacus' accountants are diagnostics
        in :meth:`claim`, never part of this number."""
        return self.estimate().epsilon

    def group_epsilon(self, k: int | None = None) -> float:
        """Epsilon of a record present ``k`` times (default: the most repeated record of the data)."""
        if k is None:
            k = self.duplicates.max_copies if self.duplicates is not None else 1
        return group_epsilon(
            self.ledger.as_tuple(),
            int(k),
            self.delta,
            self.accountant,
            poisson_sampling=self.poisson_sampling,
        )

    def adversary_bounds(self, epsilon: float | None = None) -> tuple[AdversaryBound, ...]:
        """The guarantee against each adversary of central DP-SGD (issue #28 item 1).

        Named adversaries (:data:`privnlp.accounting.adversaries.DP_SGD_ADVERSARIES`): the white-box analyst
        (every noised update of training, i.e. every intermediate model, and the released model -- not which
        examples were sampled) and the black-box querier (the released model's outputs). DP-SGD's accounting
        covers every noised step, so both get the same epsilon: amplified by Poisson sampling, which neither
        observes; with a shuffled / fixed-size loader (``poisson_sampling=False``) the no-amplification epsilon
        (the ledger then accounts every step at rate 1, so the budget refuses at this epsilon too).

        Args:
            epsilon: the ledger's reported epsilon at the claim's delta (``None``: computed).
        """
        eps = self.estimate().epsilon if epsilon is None else float(epsilon)
        return dp_sgd_adversary_bounds(
            epsilon=eps,
            delta=self.delta,
            accountant=REPORTED[self.accountant],
            poisson_sampling=self.poisson_sampling,
            epsilon_no_amplification=None
            if self.poisson_sampling
            else self.ledger.epsilon_no_amplification(self.delta),
        )

    def claim(self) -> PrivacyClaim:
        """The :class:`~privnlp.core.claims.PrivacyClaim`: (epsilon, delta)-DP per example against each named
        adversary (:meth:`adversary_bounds`; the headline is the strongest), with the ledger, the notes and
        every accountant's epsilon in ``extra``."""
        est = self.ledger.cross_check(self.delta, self.accountant)
        extra: dict[str, Any] = {
            "noise_multiplier": float(self.optimizer.noise_multiplier),
            "max_grad_norm": float(self.max_grad_norm),
            "sample_rate": float(self.sample_rate),
            "accounted_sample_rate": self.accounting_rate,
            "expected_batch_size": _num(self.expected_batch_size),
            "steps": int(self.steps),
            "epsilon_opacus": est.opacus,
            "epsilon_dp_accounting": est.dp_accounting,
            "epsilon_pld": est.diagnostics.get("dp_accounting.pld", math.nan),
            "epsilon_rdp_wide": est.diagnostics.get("dp_accounting.rdp_wide", math.nan),
            "sampling": "poisson" if self.poisson_sampling else "shuffled/fixed-size",
            "grad_sample_mode": self.grad_sample_mode,
        }
        if self.target_epsilon is not None:
            extra["target_epsilon"] = float(self.target_epsilon)
        notes = list(self.notes)
        # issue #28 item 2: a private dataset size is never published; with q and B derived from N, N is public
        # by the claim's own relation (zero-out neighbours)
        if self.public_sampling:
            if self.public_dataset_size is not None:
                extra["public_dataset_size"] = int(self.public_dataset_size)
            notes.append(
                "sampling rate and expected batch size are public hyperparameters (independent of the "
                "dataset size): add/remove neighbours"
            )
        else:
            extra["dataset_size"] = int(self.dataset_size)
            notes.append(
                "sampling rate 1/len(data_loader) and the expected batch size are computed from the dataset size "
                "N, which adding or removing an example can change: the guarantee is for zero-out neighbours "
                "(one example replaced by a null example) with N public; pass expected_batch_size and "
                "public_dataset_size (or sample_rate) to make_private for add/remove neighbours"
            )
        if "cross_check" in est.diagnostics:
            notes.append("accountant diagnostic: " + est.diagnostics["cross_check"])
        if self.duplicates is not None:
            extra["max_copies"] = int(self.duplicates.max_copies)
            if (
                not self.public_sampling
            ):  # counts of the private data are published only when N is public
                extra["duplicated_examples"] = int(self.duplicates.duplicated_examples)
            if self.duplicates.has_duplicates:
                extra["group_epsilon"] = self.group_epsilon()
                notes.append(
                    duplicate_message(
                        self.duplicates,
                        epsilon=est.epsilon,
                        group_eps=extra["group_epsilon"],
                        delta=self.delta,
                    )
                    if not self.public_sampling
                    else f"duplicated examples: a record with k={self.duplicates.max_copies} copies is only "
                    f"protected at group size k: epsilon {extra['group_epsilon']:.4g} instead of "
                    f"{est.epsilon:.4g} (delta {self.delta:.3g})"
                )
        if not self.poisson_sampling:
            extra["epsilon_no_amplification"] = self.ledger.epsilon_no_amplification(self.delta)
            notes.append(
                "the loader is shuffled/fixed-size, not Poisson: no amplification by sampling is claimed; every "
                "step is accounted as a full-batch Gaussian mechanism (epsilon_no_amplification is the headline)"
            )
        bounds = self.adversary_bounds(est.epsilon)
        if self.poisson_sampling:
            notes.append(
                "the trainer, who draws the Poisson masks, is trusted: an adversary who also learned which "
                "examples each step sampled is not covered by the amplified epsilon; against it "
                f"(every step counted, no amplification) epsilon <= "
                f"{self.ledger.epsilon_no_amplification(self.delta):.4g}"
            )
        return PrivacyClaim.dp(
            max(b.epsilon for b in bounds),
            self.delta,
            self.unit,
            adversaries=bounds,
            neighbouring=self.neighbouring,
            accountant=f"{REPORTED[self.accountant]} (reported); opacus.{self.accountant} diagnostic",
            ledger=self.ledger.to_dict(),
            notes=tuple(notes),
            extra=extra,
            noise_seeded=bool(self.noise_seeded),
        )

    def privacy_statement(self) -> str:
        """A TF-Privacy-style multi-line privacy statement."""
        c = self.claim()
        b, t = _num(self.expected_batch_size), self.steps
        epochs = t * self.sample_rate
        over = (
            f"{self.dataset_size} examples (a public dataset size)"
            if not self.public_sampling
            else f"a dataset of at most {self.public_dataset_size} examples (a public bound)"
            if self.public_dataset_size is not None
            else "a dataset of private size"
        )
        lines = [
            f"DP-SGD performed over {over} with sampling rate {self.sample_rate:.4g} and expected batch size "
            f"{b} for {epochs:.3g} epochs ({t} steps).",
            f"Noise multiplier {self.optimizer.noise_multiplier:.4g}, clipping norm {self.max_grad_norm:.4g}, "
            f"sampling: {c.extra['sampling']}, per-sample gradients: {self.grad_sample_mode}.",
            "",
            f"Epsilon with each example occurring once per epoch (Poisson sampling assumed), delta = {self.delta:.3g}:",
            f"  epsilon = {c.epsilon:.4f}   [{REPORTED[self.accountant]}; diagnostics: "
            + ", ".join(
                f"{name} {c.extra[key]:.4f}"
                for name, key in (
                    ("dp_accounting PLD", "epsilon_pld"),
                    ("RDP (wide orders)", "epsilon_rdp_wide"),
                    (f"opacus {self.accountant}", "epsilon_opacus"),
                )
                if not math.isnan(c.extra[key])
            )
            + "]",
        ]
        eps_na = c.extra.get(
            "epsilon_no_amplification", self.ledger.epsilon_no_amplification(self.delta)
        )
        lines.append(f"Epsilon assuming no amplification by sampling: {eps_na:.4f}")
        if self.target_epsilon is not None:
            lines.append(
                f"Budget: target epsilon {self.target_epsilon:.4g}; further steps allowed at these settings: "
                f"{self.allowed_steps()}"
            )
        lines.append(f"Privacy unit: one {self.unit} ({self.neighbouring} neighbours).")
        lines.append("Per adversary (the headline epsilon is the strongest's):")
        lines.extend(f"  {a.describe()}" for a in c.adversaries)
        lines.append(
            "Noise: "
            + (
                "seeded by the caller (reproducible simulation): not private against anyone who "
                "knows the seed"
                if self.noise_seeded
                else "fresh OS entropy (os.urandom-seeded)"
            )
        )
        for note in c.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)

    # -- checkpoints -----------------------------------------------------------------------
    def _rng_state(self) -> dict[str, Any]:
        """Generator states of a *seeded* run (a secure run stores none: it resumes from fresh entropy,
        and a stored Mersenne-Twister state would let a checkpoint reader recompute past noise). Each state is
        stored with its device kind (a CUDA generator's state is its seed and offset); on CUDA the device's
        global generator (dropout masks) is stored too."""
        if not self.noise_seeded:
            return {"seeded": False}
        # torch's global RNG drives non-private randomness (dropout masks): restored too, so that a seeded
        # resumed run equals the uninterrupted one
        st: dict[str, Any] = {
            "seeded": True,
            "torch_global": torch.get_rng_state(),
            "devices": {k: g.device.type for k, g in self.generators.items()},
            **{k: g.get_state() for k, g in self.generators.items()},
        }
        noise_dev = self.generators["noise"].device if "noise" in self.generators else None
        if noise_dev is not None and noise_dev.type == "cuda":
            st["cuda_global"] = torch.cuda.get_rng_state(noise_dev)
        return st

    def _load_rng_state(self, st: dict[str, Any] | None) -> None:
        if st is None:
            if self.noise_seeded:
                raise InvalidArgument(
                    "checkpoint: it holds no generator states (written by an older privnlp); resuming it with a "
                    "seeded rng would replay the noise and the Poisson batches of step 1 -- resume with rng=None "
                    "(fresh OS entropy)"
                )
            return
        if self.noise_seeded and st.get("seeded"):
            devices = st.get("devices", {})
            for k, g in self.generators.items():
                if k not in st:
                    raise InvalidArgument(f"checkpoint: no state for the {k} generator")
                saved_kind = devices.get(k, "cpu")
                if saved_kind == g.device.type:
                    g.set_state(st[k])
                else:
                    # resumed on another device kind: the saved stream cannot continue here (a CUDA state is a
                    # seed and an offset, a CPU one a Mersenne-Twister state); continue from a seed derived from
                    # the saved state: reproducible, and a new stream, so no noise is replayed
                    g.manual_seed(_derived_seed(st[k], k))
                    self.notes = tuple(self.notes) + (
                        f"resumed on {g.device.type} from a {saved_kind} checkpoint: the seeded {k} generator "
                        "continues from a seed derived from its saved state (reproducible; no draw replayed, but "
                        "not the uninterrupted run's stream)",
                    )
            if "torch_global" in st:
                torch.set_rng_state(st["torch_global"])
            noise_dev = self.generators["noise"].device if "noise" in self.generators else None
            if "cuda_global" in st and noise_dev is not None and noise_dev.type == "cuda":
                torch.cuda.set_rng_state(st["cuda_global"], noise_dev)
        elif self.noise_seeded and not st.get("seeded"):
            # the checkpointed steps used secure noise: a seeded continuation cannot replay them
            pass
        if st.get("seeded"):
            self.noise_seeded = True  # earlier steps were seeded: the claim keeps saying so

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": "privnlp.dp_sgd_checkpoint/1",
            "ledger": self.ledger.to_dict(),
            "rng": self._rng_state(),
            "config": {
                "noise_multiplier": float(self.optimizer.noise_multiplier),
                "max_grad_norm": float(self.max_grad_norm),
                "sample_rate": float(self.sample_rate),
                "delta": float(self.delta),
                "accountant": self.accountant,
                "target_epsilon": self.target_epsilon,
                "dataset_size": int(self.dataset_size),
            },
            "model": self.original_model.state_dict(),
            "optimizer": self.optimizer.original_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], *, strict_config: bool = True) -> None:
        if state.get("format") != "privnlp.dp_sgd_checkpoint/1":
            raise InvalidArgument(
                "checkpoint: not a privnlp DP-SGD checkpoint (format privnlp.dp_sgd_checkpoint/1)"
            )
        cfg = state["config"]
        if strict_config:
            for k in ("sample_rate", "delta", "accountant", "dataset_size"):
                mine = getattr(self, k)
                if cfg[k] != mine:
                    raise InvalidArgument(
                        f"checkpoint: {k}={cfg[k]!r} differs from this run's {k}={mine!r}; "
                        "resuming under other accounting parameters is refused"
                    )
        self.original_model.load_state_dict(state["model"])
        self.optimizer.original_optimizer.load_state_dict(state["optimizer"])
        restored = DPLedger.from_dict(state["ledger"])
        self._load_rng_state(
            state.get("rng") if restored.steps else state.get("rng", {"seeded": False})
        )
        self.ledger.runs[:] = restored.runs

    def save_checkpoint(self, path: str | os.PathLike) -> Path:
        """Atomically save model, optimizer and the ledger (temp file + ``os.replace``).

        The file gets the mode ``open(path, "w")`` would give it (``0o666`` minus the umask), not the
        temp file's ``0o600``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            os.chmod(tmp, _umask_mode())  # mkstemp creates 0600: honour the umask as open() would
            torch.save(self.state_dict(), tmp)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return path

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        self.load_state_dict(torch.load(path, map_location="cpu", weights_only=False))

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Remove opacus hooks and our forward pre-hooks (the original model is usable again)."""
        if self.closed:
            return
        for h in self.hooks:
            if h is not None:
                h.remove()
        with contextlib.suppress(Exception):
            self.model._close()
        self.closed = True

    def __enter__(self) -> PrivateTraining:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _install_guard(optimizer: Any, guard: BudgetGuard, sample_rate: float) -> None:
    orig_add_noise = optimizer.add_noise

    def guarded_add_noise() -> None:
        try:
            guard.check_step(optimizer.noise_multiplier, sample_rate)
        except PrivacyBudgetExceeded:
            # nothing computed for the refused step may leak: drop the clipped sums
            for p in optimizer.params:
                p.summed_grad = None
                p.grad = None
                if hasattr(p, "grad_sample"):
                    p.grad_sample = None
            optimizer._is_last_step_skipped = False
            raise
        orig_add_noise()

    optimizer.add_noise = guarded_add_noise
    optimizer.step_hook = lambda opt: guard.record(opt.noise_multiplier, sample_rate)


def _count_duplicates(dataset: Any, keys: Any) -> Any:
    """A :class:`~privnlp.accounting.duplicates.DuplicateReport` of the dataset's examples (``None`` if they
    cannot be read cheaply)."""
    n = len(dataset)
    if keys is not None:
        keys = list(keys)
        if len(keys) != n:
            raise InvalidArgument(
                f"duplicate_keys must have one key per example ({n}); got {len(keys)}"
            )
        return find_duplicates(keys, method="caller-keyed")
    tensors = getattr(dataset, "tensors", None)
    if tensors is not None:
        return find_duplicates(row_keys(tensors), method="exact")
    try:

        def key(item: Any) -> bytes:
            h = hashlib.blake2b(digest_size=16)
            parts = (
                item.values()
                if isinstance(item, dict)
                else (item if isinstance(item, (tuple, list)) else (item,))
            )
            for p in parts:
                h.update(
                    p.detach().cpu().numpy().tobytes()
                    if isinstance(p, torch.Tensor)
                    else repr(p).encode()
                )
            return h.digest()

        if n > 1_000_000:
            return None
        return find_duplicates([key(dataset[i]) for i in range(n)], method="exact")
    except Exception:  # noqa: BLE001 - an unreadable dataset is not counted (the claim then has no max_copies)
        return None


def _subset_loader(dl: Any, keep: Any) -> Any:
    return DataLoader(
        Subset(dl.dataset, list(keep)),
        batch_size=dl.batch_size,
        collate_fn=dl.collate_fn,
        num_workers=dl.num_workers,
        drop_last=dl.drop_last,
        pin_memory=dl.pin_memory,
        shuffle=isinstance(dl.sampler, RandomSampler),
        generator=dl.generator,
    )
