"""One engine for private training: :class:`DPEngine` with grouped options, as opacus' ``PrivacyEngine``.

Paper: Abadi et al. 2016 (DP-SGD); ``../shared/papers/dp-bert-and-dp-wordpiece.txt``. Threat model and claim: those
of :mod:`privnlp.mechanisms.training.dp_sgd` (example-level (epsilon, delta)-DP; add/remove neighbours with public
sampling, zero-out with N public otherwise).

The options come in groups, each a frozen dataclass (issue #30 item 5):

* :class:`Noise` -- ``noise_multiplier`` (sigma; ``None``: calibrated from the budget) and ``rng`` (``None``: OS
  entropy; a seed: a reproducible simulation whose claim says "noise seeded");
* :class:`Sampling` -- Poisson or not, and the public ``expected_batch_size`` / ``sample_rate`` /
  ``public_dataset_size`` (:func:`~privnlp.mechanisms.training.dp_sgd.resolve_sampling`);
* :class:`Clipping` -- ``max_grad_norm`` C, the per-sample gradient ``mode`` (``auto``, ``bookkeeping``,
  ``ghost``, ``hooks``, ``functorch``) and what to do with ``tied_embeddings``;
* :class:`Budget` -- ``target_epsilon`` (the hard budget), ``delta`` and the planned ``epochs`` / ``steps``;
* ``accountant`` -- ``"prv"`` (min of dp_accounting PLD and wide-order RDP) or ``"rdp"``.

Usage::

    engine = DPEngine(noise=Noise(rng=None), clipping=Clipping(max_grad_norm=1.0),
                      budget=Budget(target_epsilon=3.0, epochs=2))
    pt = engine.make_private(model, optimizer, loader)     # a PrivateTraining handle
    ...
    engine.epsilon()

:func:`make_private` (this module) is a thin function over it (same keyword arguments as
before, flat).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from opacus import PrivacyEngine
from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed
from torch import nn

from privnlp.accounting import (
    ACCOUNTANTS,
    BudgetGuard,
    DPLedger,
    calibrate_noise_multiplier,
    check_accounting_configuration,
    check_delta,
    default_delta,
    epsilon_for,
    epsilon_no_amplification,
)
from privnlp.accounting.duplicates import (
    DuplicateExamplesWarning,
    duplicate_message,
    find_duplicates,
    group_epsilon,
)
from privnlp.core.errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    check_positive,
    check_range,
)
from privnlp.core.rng import generator_on, noise_torch

from . import bookkeeping as _bk
from . import distributed as _dist
from .batch_axis import GUARDED_MODES, attach_batch_axis_guard
from .devices import check_model_device, check_model_dtypes, noise_summed_grads, sum_dtype
from .dp_sgd import (
    GRAD_SAMPLE_MODES,
    PrivateTraining,
    _check_lstm,
    _count_duplicates,
    _install_guard,
    _poisson_loader,
    _subset_loader,
    _trainable,
    add_batch_position_ids,
    choose_grad_sample_mode,
    handle_tied_embeddings,
    resolve_sampling,
)
from .lora import base_digest, check_peft_model, is_peft_model
from .samplers import ghost_norm_samplers, register_for_model

__all__ = [
    "DPEngine",
    "Noise",
    "Sampling",
    "Clipping",
    "Budget",
    "make_private",
    "private_training",
]


@dataclass(frozen=True)
class Noise:
    """Privacy noise: ``noise_multiplier`` sigma (>= 0; ``None``: calibrated from the :class:`Budget`) and ``rng``
    (``None``: generators seeded from the OS entropy pool, one per device and per process; a seed / Generator: a
    reproducible simulation in one process, and the claim says "noise seeded").

    Attributes:
        noise_multiplier: sigma, the noise std over the clipping norm (``None``: calibrated).
        rng: ``None`` (secure, OS entropy) or a seed / Generator (seeded simulation).
    """

    noise_multiplier: float | None = None
    rng: Any = None


@dataclass(frozen=True)
class Sampling:
    """How batches are drawn: ``poisson`` (what the accountants assume; ``False`` keeps the caller's loader and
    the claim adds the no-amplification epsilon) and the public sampling hyperparameters (give two of
    ``expected_batch_size``, ``sample_rate``, ``public_dataset_size`` for an add/remove claim).

    Attributes:
        poisson: Poisson sampling of each batch (the accountants' assumption).
        expected_batch_size: the public expected batch size B (the noise normaliser).
        sample_rate: the public sampling rate q.
        public_dataset_size: a public bound on N (q = B / N when only B is given).
    """

    poisson: bool = True
    expected_batch_size: int | None = None
    sample_rate: float | None = None
    public_dataset_size: int | None = None


@dataclass(frozen=True)
class Clipping:
    """Per-example clipping: ``max_grad_norm`` C (> 0), the per-sample gradient ``mode`` (one of
    ``GRAD_SAMPLE_MODES``) and ``tied_embeddings`` (``untie`` / ``freeze`` / ``error``).

    Attributes:
        max_grad_norm: the per-example clipping norm C (> 0).
        mode: the per-sample gradient mode (``auto``, ``bookkeeping``, ``ghost``, ``hooks``, ...).
        tied_embeddings: what to do with tied input / output embeddings.
    """

    max_grad_norm: float = 1.0
    mode: str = "auto"
    tied_embeddings: str = "untie"


@dataclass(frozen=True)
class Budget:
    """The privacy budget: ``target_epsilon`` (the step that would exceed it is refused before it is taken),
    ``delta`` (default ``min(1e-5, N^-1.1)`` of the public N) and the planned ``epochs`` / ``steps`` (needed to
    calibrate sigma from ``target_epsilon``).

    Attributes:
        target_epsilon: the epsilon no step may exceed (``None``: no budget).
        delta: the delta of the claim.
        epochs: planned passes (for calibration).
        steps: planned logical steps (for calibration).
    """

    target_epsilon: float | None = None
    delta: float | None = None
    epochs: float | None = None
    steps: int | None = None


@dataclass
class DPEngine:
    """Private training with grouped options; :meth:`make_private` returns the
    :class:`~privnlp.mechanisms.training.dp_sgd.PrivateTraining` handle (kept as ``engine.private``).

    Attributes:
        noise: :class:`Noise`.
        sampling: :class:`Sampling`.
        clipping: :class:`Clipping`.
        budget: :class:`Budget`.
        accountant: ``"prv"`` (reported: min of dp_accounting PLD and wide-order RDP) or ``"rdp"``.
        unit: the privacy unit of one dataset element (``example``, ``record``, ``user``...).
        dedup: train on the first copy of each duplicated example.
        distributed: ``None``: DP-SGD on every rank when a process group of >= 2 ranks exists; ``True`` requires
            one; ``False`` never.
    """

    noise: Noise = field(default_factory=Noise)
    sampling: Sampling = field(default_factory=Sampling)
    clipping: Clipping = field(default_factory=Clipping)
    budget: Budget = field(default_factory=Budget)
    accountant: str = "prv"
    unit: str = "example"
    dedup: bool = False
    distributed: bool | None = None
    private: PrivateTraining | None = field(default=None, init=False, repr=False)

    def epsilon(self) -> float:
        """Epsilon spent so far by the last :meth:`make_private` run (see ``PrivateTraining.epsilon``)."""
        if self.private is None:
            raise InvalidArgument("DPEngine.epsilon: call make_private first")
        return self.private.epsilon()

    def make_private(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        data_loader: Any,
        *,
        wrap_model: bool = True,
        duplicate_keys: Any = None,
    ) -> PrivateTraining:
        """Make ``model`` / ``optimizer`` / ``data_loader`` private with DP-SGD (opacus).

        The steps, in order (each named below): check the options and the loader, drop or count duplicates,
        resolve the public sampling and delta, prepare the model (per-sample rules, DP-LoRA, device, dtypes,
        tied weights, clipping mode), plan the steps and calibrate sigma, draw the generators, wrap with opacus,
        and build the handle with its ledger and budget guard.

        Args:
            model: the model (``model.train()`` is called, as Hugging Face's ``Trainer`` does).
            optimizer: its optimizer.
            data_loader: a DataLoader over a sized (map-style) dataset.
            wrap_model: ``False`` attaches opacus hooks to ``model`` itself (the HF ``Trainer`` integration).
            duplicate_keys: optional per-example keys for duplicate detection.

        Returns:
            The handle (also ``self.private``).

        Raises:
            InvalidArgument / InvalidPrivacyParameter: a bad option, named with its allowed range; raised before
                any step is taken and before any epsilon is spent.
        """
        self._check_options(model)
        n = self._check_loader(model, data_loader)
        notes: list[str] = []
        data_loader, n, dups = self._deduplicate(data_loader, n, duplicate_keys, notes)
        s = self.sampling
        sampling = resolve_sampling(
            n,
            len(data_loader),
            expected_batch_size=s.expected_batch_size,
            sample_rate=s.sample_rate,
            public_dataset_size=s.public_dataset_size,
        )
        # the default delta uses the public N where there is one (a default computed from the private N would
        # publish it); the check also holds for the actual N (an error before training releases nothing)
        delta = (
            default_delta(sampling.reference_size)
            if self.budget.delta is None
            else self.budget.delta
        )
        check_delta(delta, max(n, sampling.reference_size))
        device, dist_ctx, mode, digest = self._prepare_model(model, optimizer, sampling, notes)
        noise_multiplier, planned, acc_rate = self._plan(sampling, float(delta), data_loader, dups)
        g_noise, g_sample, g_workers, noise_seeded = self._generators(device, notes)
        gsm, dp_opt, dl, hooks = self._wrap_opacus(
            model,
            optimizer,
            data_loader,
            sampling=sampling,
            noise_multiplier=noise_multiplier,
            mode=mode,
            dist_ctx=dist_ctx,
            generators=(g_noise, g_sample, g_workers),
            wrap_model=wrap_model,
        )
        ledger = DPLedger()
        guard = BudgetGuard(ledger, self.budget.target_epsilon, float(delta), self.accountant)
        if dist_ctx is not None:
            _dist.attach(dist_ctx, dp_opt, guard)
        _install_guard(dp_opt, guard, acc_rate)
        if self.noise.noise_multiplier is None and planned is not None:
            # sigma was calibrated so that the planned steps fit the target with the guard's own accountant
            guard.note_fits(noise_multiplier, acc_rate, planned)
        pt = PrivateTraining(
            model=gsm,
            optimizer=dp_opt,
            data_loader=dl,
            original_model=model,
            grad_sample_mode=mode,
            ledger=ledger,
            guard=guard,
            noise_multiplier=float(noise_multiplier),
            max_grad_norm=float(self.clipping.max_grad_norm),
            sample_rate=sampling.sample_rate,
            expected_batch_size=sampling.expected_batch_size,
            dataset_size=n,
            public_dataset_size=sampling.public_dataset_size,
            public_sampling=sampling.public,
            delta=float(delta),
            accountant=self.accountant,
            target_epsilon=self.budget.target_epsilon,
            poisson_sampling=self.sampling.poisson,
            planned_steps=planned,
            unit=self.unit,
            notes=tuple(notes),
            hooks=tuple(hooks),
            noise_seeded=noise_seeded,
            generators={"noise": g_noise, "sampling": g_sample},
            duplicates=dups,
        )
        _track_grad_norm(pt, device)
        pt.base_digest = digest
        self.private = pt if dist_ctx is None else _dist.finish(dist_ctx, pt)
        return self.private

    # -- the steps of make_private ---------------------------------------------------------------------------
    def _check_options(self, model: nn.Module) -> None:
        """Every option in its range (named), before anything is touched."""
        if not isinstance(model, nn.Module):
            raise InvalidArgument(f"model must be a torch.nn.Module; got {type(model).__name__}")
        check_positive("max_grad_norm", self.clipping.max_grad_norm, error=InvalidPrivacyParameter)
        if self.accountant not in ACCOUNTANTS:
            raise InvalidArgument(
                f"accountant must be one of {sorted(ACCOUNTANTS)}; got {self.accountant!r}"
            )
        if self.clipping.mode not in GRAD_SAMPLE_MODES:
            raise InvalidArgument(
                f"grad_sample_mode must be one of {GRAD_SAMPLE_MODES}; got {self.clipping.mode!r}"
            )
        sigma, target = self.noise.noise_multiplier, self.budget.target_epsilon
        if sigma is not None:
            check_range("noise_multiplier", sigma, 0.0, math.inf, error=InvalidPrivacyParameter)
        if target is not None:
            check_positive("target_epsilon", target, error=InvalidPrivacyParameter)
        if sigma is None and target is None:
            raise InvalidPrivacyParameter(
                "pass noise_multiplier (>= 0) or target_epsilon (> 0) to make_private"
            )
        if self.budget.epochs is not None:
            check_positive("epochs", self.budget.epochs)
        if self.budget.steps is not None:
            check_range("steps", self.budget.steps, 1, math.inf, integer=True)
        if not isinstance(self.dedup, bool):
            raise InvalidArgument(f"dedup must be True or False; got {self.dedup!r}")

    @staticmethod
    def _check_loader(model: nn.Module, data_loader: Any) -> int:
        """The dataset size N (a sized, non-empty dataset) and a model with something to train."""
        try:
            n = len(data_loader.dataset)
        except (AttributeError, TypeError):
            raise InvalidArgument(
                "data_loader must be a torch DataLoader over a sized dataset"
            ) from None
        if n == 0 or len(data_loader) == 0:
            raise InvalidArgument("data_loader is empty (dataset size must be >= 1)")
        if not _trainable(model):
            raise InvalidArgument(
                "model has no trainable parameters (requires_grad=False everywhere); nothing to train"
            )
        return n

    def _deduplicate(
        self, data_loader: Any, n: int, duplicate_keys: Any, notes: list[str]
    ) -> tuple[Any, int, Any]:
        """Count duplicates; with ``dedup`` train on one copy of each (the note never publishes a private count
        when the sampling is public)."""
        dups = _count_duplicates(data_loader.dataset, duplicate_keys)
        if dups is None or not dups.has_duplicates or not self.dedup:
            return data_loader, n, dups
        s = self.sampling
        public = any(
            v is not None for v in (s.expected_batch_size, s.sample_rate, s.public_dataset_size)
        )
        notes.append(
            f"dedup=True: {dups.method} duplicates removed (up to {dups.max_copies} copies of a record)"
            if public  # the counts would publish the private dataset size
            else f"dedup=True: trained on {dups.n_unique} unique of {dups.n} examples ({dups.method} "
            f"duplicates removed; up to {dups.max_copies} copies of a record)"
        )
        data_loader = _subset_loader(data_loader, dups.keep)
        n = len(data_loader.dataset)
        # what is trained on: no duplicates left
        return data_loader, n, find_duplicates(range(n), method=dups.method)

    def _prepare_model(
        self, model: nn.Module, optimizer: Any, sampling: Any, notes: list[str]
    ) -> tuple[torch.device, Any, str, Any]:
        """Per-sample rules, DP-LoRA checks, one device, dtypes, tied weights and the clipping mode:
        ``(device, distributed context, mode, base-weight digest)``."""
        _check_lstm(model)
        register_for_model(model)  # per-sample rules for HF Conv1D and RMSNorm layers (issue #29)
        digest = None
        if is_peft_model(model):  # DP-LoRA: only the adapters private (issue #29 item 4)
            n_adapter = check_peft_model(model, _bk._samplers()[0])
            digest = base_digest(model)
            n_base = sum(p.numel() for p in model.parameters()) - n_adapter
            notes.append(
                f"DP-LoRA: only the adapters are trained and private ({n_adapter} parameters); the {n_base} base "
                "weights are frozen public weights (byte-identical after training: verify_base_unchanged)"
            )
        device = check_model_device(model)  # one device, one the noise generator can follow
        check_model_dtypes(model)
        dist_ctx = _dist.resolve(self.distributed)
        if dist_ctx is not None:
            _dist.check_noise_rng(dist_ctx, self.noise.rng, self.sampling.poisson)
        tie_note = handle_tied_embeddings(model, optimizer, self.clipping.tied_embeddings)
        if tie_note:
            notes.append(tie_note)
        if not _trainable(model):
            raise InvalidArgument(
                "model has no trainable parameters left after freezing tied weights"
            )
        mode = (
            choose_grad_sample_mode(model, int(math.ceil(sampling.expected_batch_size)))
            if self.clipping.mode == "auto"
            else self.clipping.mode
        )
        return device, dist_ctx, mode, digest

    def _plan(
        self, sampling: Any, delta: float, data_loader: Any, dups: Any
    ) -> tuple[float, int | None, float]:
        """The planned steps, sigma (calibrated from the budget when not given) and the accounted sampling rate;
        an inconsistent accounting configuration and the duplicates' group epsilon are reported here, before
        training (never after it)."""
        q, poisson = sampling.sample_rate, self.sampling.poisson
        # a shuffled / fixed-size loader claims no amplification: calibration, budget and ledger use rate 1
        acc_rate = q if poisson else 1.0
        planned = None
        if self.budget.steps is not None:
            planned = int(self.budget.steps)
        elif self.budget.epochs is not None:
            planned = max(1, int(round(self.budget.epochs / q)))
        sigma = self.noise.noise_multiplier
        if sigma is None:
            if planned is None:
                raise InvalidArgument(
                    "target_epsilon without noise_multiplier needs epochs or steps to calibrate sigma"
                )
            sigma = calibrate_noise_multiplier(
                self.budget.target_epsilon, delta, acc_rate, planned, self.accountant
            )
        check_accounting_configuration(float(sigma), acc_rate, planned, delta, self.accountant)
        if dups is not None and dups.has_duplicates:
            k_steps = planned or len(data_loader)
            runs = [(float(sigma), q, k_steps)]
            eps1 = (
                epsilon_for(runs, delta, self.accountant).epsilon
                if poisson
                else epsilon_no_amplification(runs, delta)
            )
            geps = group_epsilon(
                runs, dups.max_copies, delta, self.accountant, poisson_sampling=poisson
            )
            warnings.warn(
                duplicate_message(
                    dups,
                    epsilon=eps1,
                    group_eps=geps,
                    delta=delta,
                    where=f"make_private (after {k_steps} {'planned ' if planned else ''}steps)",
                ),
                DuplicateExamplesWarning,
                stacklevel=3,
            )
        return float(sigma), planned, acc_rate

    def _generators(self, device: torch.device, notes: list[str]) -> tuple[Any, Any, Any, bool]:
        """Privacy noise and Poisson masks: OS entropy unless the caller seeds a simulation. The masks on the CPU,
        the noise on the parameters' device (issue #29 item 1)."""
        (g_noise, g_sample, g_workers), noise_seeded = noise_torch(self.noise.rng, 3)
        g_noise = generator_on(g_noise, device, seeded=noise_seeded)
        if noise_seeded and device.type != "cpu":
            notes.append(
                f"noise seeded on {device.type}: reproducible on the same device kind only (a {device.type} "
                "and a cpu run draw different noise from one seed)"
            )
        if not noise_seeded:
            notes.append(
                "noise and Poisson masks drawn from torch's PRNG seeded from os.urandom (fresh on every "
                "make_private and every resume)"
            )
        return g_noise, g_sample, g_workers, noise_seeded

    def _wrap_opacus(
        self,
        model: nn.Module,
        optimizer: Any,
        data_loader: Any,
        *,
        sampling: Any,
        noise_multiplier: float,
        mode: str,
        dist_ctx: Any,
        generators: tuple[Any, Any, Any],
        wrap_model: bool,
    ) -> tuple[Any, Any, Any, list[Any]]:
        """opacus' PrivacyEngine on our Poisson loader and generators, our normaliser, book-keeping / fp32
        clipping: ``(grad-sample module, DP optimizer, loader, hooks)``."""
        g_noise, g_sample, g_workers = generators
        max_grad_norm = float(self.clipping.max_grad_norm)
        low_precision_guard = _refuse_low_precision_ghost(model) if mode == "ghost" else None
        hooks = [add_batch_position_ids(model), low_precision_guard]
        # ids built inside the model without a batch axis (nanoGPT's wpe(arange(T))): refused in the forward
        if mode in GUARDED_MODES:
            hooks += attach_batch_axis_guard(model, mode)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            engine = PrivacyEngine(accountant="rdp")
            if self.sampling.poisson:
                dl = (
                    _poisson_loader(data_loader, sampling.sample_rate, g_sample)
                    if dist_ctx is None
                    else _dist.poisson_loader(
                        dist_ctx, data_loader, g_sample, sample_rate=sampling.sample_rate
                    )
                )
                # DataLoader draws a worker base seed from ``dl.generator`` at every new iteration: keep those draws
                # off the Poisson-mask generator, so the masks do not depend on where iterations (and resumes) start
                dl.generator = g_workers
            else:
                dl = data_loader
            try:
                out = engine.make_private(
                    module=model if dist_ctx is None else _dist.wrap_model(dist_ctx, model),
                    optimizer=optimizer,
                    data_loader=dl,
                    noise_multiplier=noise_multiplier,
                    max_grad_norm=max_grad_norm,
                    poisson_sampling=False,
                    noise_generator=g_noise,
                    grad_sample_mode="no_op" if mode == "bookkeeping" else mode,
                    criterion=nn.CrossEntropyLoss(),
                    wrap_model=wrap_model,
                )
            except (NotImplementedError, ValueError) as e:
                for h in hooks:
                    if h is not None:
                        h.remove()
                raise InvalidArgument(
                    f"model cannot be made private by opacus ({mode} mode): {e}"
                ) from e
        if len(out) == 4:
            gsm, dp_opt, _crit, dl = out
        else:
            gsm, dp_opt, dl = out
        if mode == "ghost":
            # ghost norms as upper bounds in floating point (opacus' Gram sum can cancel: .rounding); on this
            # module only, opacus' process-wide registry is left as it is
            gsm.NORM_SAMPLERS = ghost_norm_samplers(type(gsm).NORM_SAMPLERS)
        if self.sampling.poisson and hasattr(gsm, "forbid_grad_accumulation"):
            gsm.forbid_grad_accumulation()
        # opacus derives its normaliser from len(dataset) (the private N); ours is the resolved one (public where the
        # caller gave it). opacus' distributed optimizer divides by the per-rank share and all-reduces the mean.
        dp_opt.expected_batch_size = sampling.expected_batch_size / (
            1 if dist_ctx is None else dist_ctx.world_size
        )
        if dist_ctx is None:  # (distributed.attach installs the split noise of several ranks)
            _lean_noise(dp_opt)
            _lean_scale(dp_opt)
        if (
            mode == "bookkeeping"
        ):  # one backward pass, clipped sums from book-kept activations (issue #20)
            hooks.append(_bk.attach(gsm, model, dp_opt, max_grad_norm))
        elif mode in ("hooks", "functorch"):
            _fp32_clipping(
                dp_opt
            )  # bf16 per-sample gradients: norms and clip factors in fp32 (issue #29)
        return gsm, dp_opt, dl, hooks


def _refuse_low_precision_ghost(model: nn.Module) -> Any:
    """Ghost clipping in low precision is refused: opacus computes the ghost norms in the activations' dtype, so
    under bf16 (parameters or ``torch.autocast``) one example's clipped gradient came out 1.5e-3 (GPT-2) to 2.0e-3
    (Llama) above C (a review, 2026-11-27), and ghost's clipped sum is autograd's, in the parameters' dtype.
    bf16 / fp16 trainable parameters are refused here; a forward under autocast is refused by the returned pre-hook,
    in the forward, before any gradient, noise or accounting step."""
    low = [
        n
        for n, p in model.named_parameters()
        if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16)
    ]
    if low:
        raise InvalidArgument(
            f"grad_sample_mode='ghost' with {len(low)} bfloat16 / float16 trainable parameters "
            f"(first: {low[0]!r}): opacus' ghost norms would be computed in that precision and clipped gradients "
            "could exceed max_grad_norm; use grad_sample_mode='bookkeeping' or 'hooks' (norms and sums in float32)"
        )

    def pre_hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        if torch.is_grad_enabled() and any(torch.is_autocast_enabled(d) for d in ("cuda", "cpu")):
            raise InvalidArgument(
                "grad_sample_mode='ghost' under torch.autocast: opacus computes the ghost norms in the autocast "
                "dtype and clipped gradients could exceed max_grad_norm (no step was taken, no epsilon spent); "
                "use grad_sample_mode='bookkeeping' or 'hooks' (norms and sums in float32 under autocast)"
            )

    return model.register_forward_pre_hook(pre_hook, with_kwargs=True)


def _track_grad_norm(pt: PrivateTraining, device: torch.device) -> None:
    """``pt.last_grad_norm``: a 0-dim tensor holding the L2 norm of the last step's *privatized* gradient (the sum
    of clipped per-sample gradients plus noise, over the expected batch size: what the optimizer applies), updated
    in place at every step. The clipped sum before the noise is not private and is never exposed."""
    pt.last_grad_norm = torch.zeros((), device=device)
    record = pt.optimizer.step_hook

    def step_hook(opt: Any) -> None:
        record(opt)
        grads = [p.grad for p in opt.params if p.grad is not None]
        if grads:
            norms = torch._foreach_norm([g.float() for g in grads])
            pt.last_grad_norm.copy_(torch.linalg.vector_norm(torch.stack(norms)))

    pt.optimizer.step_hook = step_hook


def _lean_noise(optimizer: Any) -> None:
    """opacus' ``add_noise`` with :func:`~privnlp.mechanisms.training.devices.noised_sum`: the same noise from the
    same generator, without a zeros tensor per parameter per step and the out-of-place sum (measured on CPU: 13 of
    the 87 ms that opacus' noise took for a 11M-parameter BERT)."""

    def add_noise() -> None:
        noise_summed_grads(optimizer, optimizer.noise_multiplier * optimizer.max_grad_norm)

    optimizer.add_noise = add_noise


def _lean_scale(optimizer: Any) -> None:
    """opacus' ``scale_grad`` (the mean reduction's division by the expected batch size) as one multi-tensor
    division instead of one per parameter (~200 kernel launches less per step for a BERT-base on a GPU): the same
    quotients on the CPU; on CUDA ``t /= b`` multiplies by ``1/b``, so they may differ in the last bit
    (post-processing of the noised gradient)."""

    def scale_grad() -> None:
        if optimizer.loss_reduction == "mean":
            denom = optimizer.expected_batch_size * optimizer.accumulated_iterations
            torch._foreach_div_([p.grad for p in optimizer.params], float(denom))

    optimizer.scale_grad = scale_grad


def _fp32_clipping(optimizer: Any) -> None:
    """opacus' ``clip_and_accumulate`` with the per-sample norms, the clip factors and the weighted sum in fp32.

    opacus computes the norms in the per-sample gradients' dtype: under bf16 autocast they are bf16, and the
    clipped gradient of one example then exceeds C by up to ~0.1% (measured; ``test_decoders.py``). The sum stays in
    float32 for bf16 parameters (:func:`~privnlp.mechanisms.training.devices.sum_dtype`): noised there, then cast."""

    def clip_and_accumulate() -> None:
        samples = optimizer.grad_samples
        if len(samples[0]) == 0:
            factor = torch.zeros((0,), device=samples[0].device)
        else:
            per_param = [g.reshape(len(g), -1).float().norm(2, dim=-1) for g in samples]
            dev = per_param[0].device
            norms = torch.stack([n.to(dev) for n in per_param], dim=1).norm(2, dim=1)
            factor = (optimizer.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        for p in optimizer.params:
            _check_processed_flag(p.grad_sample)
            g = optimizer._get_flat_grad_sample(p)
            grad = torch.einsum("i,i...", factor.to(g.device), g.float()).to(sum_dtype(p.dtype))
            p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
            _mark_as_processed(p.grad_sample)

    optimizer.clip_and_accumulate = clip_and_accumulate


def make_private(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data_loader: Any,
    *,
    noise_multiplier: float | None = None,
    target_epsilon: float | None = None,
    epochs: float | None = None,
    steps: int | None = None,
    max_grad_norm: float = 1.0,
    delta: float | None = None,
    accountant: str = "prv",
    poisson_sampling: bool = True,
    grad_sample_mode: str = "auto",
    tied_embeddings: str = "untie",
    unit: str = "example",
    wrap_model: bool = True,
    rng: Any = None,
    dedup: bool = False,
    duplicate_keys: Any = None,
    distributed: bool | None = None,
    expected_batch_size: int | None = None,
    sample_rate: float | None = None,
    public_dataset_size: int | None = None,
) -> PrivateTraining:
    """Make ``model`` / ``optimizer`` / ``data_loader`` private with DP-SGD (opacus).

    Args:
        noise_multiplier: sigma; if ``None``, calibrated from ``target_epsilon`` and ``epochs``/``steps``.
        target_epsilon: the hard budget: the step that would exceed it raises
            :class:`~privnlp.core.errors.PrivacyBudgetExceeded` before it is taken.
        epochs / steps: planned training length (needed for calibration).
        max_grad_norm: per-example clipping norm C (> 0).
        delta: default ``min(1e-5, N^-1.1)``; must be < 1/N.
        accountant: ``"prv"`` (default) or ``"rdp"`` (opacus); dp_accounting PLD / RDP runs in parallel.
        poisson_sampling: Poisson sampling (default). ``False`` keeps the loader (shuffled / fixed-size)
            and the claim also states the no-amplification epsilon.
        grad_sample_mode: ``auto`` (see :func:`choose_grad_sample_mode`: hooks while a batch's per-sample
            gradients are small, book-keeping beyond -- one backward pass, no per-sample gradients -- or ghost
            where book-keeping does not apply), ``bookkeeping``, ``ghost``, ``hooks``, ``functorch``.
        tied_embeddings: ``untie`` / ``freeze`` / ``error`` for shared weights (GPT-2 wte/lm_head).
        unit: the privacy unit of one dataset element (``example``, ``record``, ``user``...).
        wrap_model: ``False`` attaches opacus hooks to ``model`` itself (``pt.model`` is then the hooks
            object; keep calling the original model) — used by the HF ``Trainer`` integration.
        rng: ``None`` (default): the noise and the Poisson masks come from generators seeded from the OS
            entropy pool (secure; a resume never replays them). A seed / Generator: a reproducible
            simulation in one process; the claim then says "noise seeded: not private against anyone who
            knows the seed". Never pass a seed that another party knows (e.g. a federated server's).
        dedup: train on the first copy of each duplicated example (exact duplicates of the dataset's rows,
            or of ``duplicate_keys``). Without it, duplicates are counted, a
            :class:`~privnlp.accounting.duplicates.DuplicateExamplesWarning` states the count and the group
            epsilon of the most repeated record, and the claim carries both.
        duplicate_keys: optional per-example keys (same order as the dataset) for duplicate detection, e.g.
            :func:`~privnlp.accounting.duplicates.normalize_text` of each text (near duplicates).
        distributed: ``None`` (default): DP-SGD on all ranks when a torch.distributed process group with >= 2
            ranks is initialized (torchrun); ``True`` requires one; ``False`` never. The claim and ledger are the
            single-process ones for the same global batch (:mod:`privnlp.mechanisms.training.distributed`).
        expected_batch_size / sample_rate / public_dataset_size: the sampling rate q and the normaliser B (noise
            std on the mean sigma*C/B) as *public* hyperparameters (issue #28 item 2): give two of them
            (``public_dataset_size`` is a public upper bound on N; q = B / N_public). The claim is then
            add/remove-DP and names no private dataset size: N and N+1 examples train with the same q, B and
            noise. Without them (default) q = 1/len(data_loader) and B are computed from the dataset size N,
            which an add/remove neighbour can change: the claim is then for zero-out neighbours with N public
            (:func:`resolve_sampling`).
    """
    engine = DPEngine(
        noise=Noise(noise_multiplier=noise_multiplier, rng=rng),
        sampling=Sampling(
            poisson=poisson_sampling,
            expected_batch_size=expected_batch_size,
            sample_rate=sample_rate,
            public_dataset_size=public_dataset_size,
        ),
        clipping=Clipping(
            max_grad_norm=max_grad_norm, mode=grad_sample_mode, tied_embeddings=tied_embeddings
        ),
        budget=Budget(target_epsilon=target_epsilon, delta=delta, epochs=epochs, steps=steps),
        accountant=accountant,
        unit=unit,
        dedup=dedup,
        distributed=distributed,
    )
    return engine.make_private(
        model, optimizer, data_loader, wrap_model=wrap_model, duplicate_keys=duplicate_keys
    )


@contextlib.contextmanager
def private_training(
    model: nn.Module, optimizer: torch.optim.Optimizer, data_loader: Any, **kwargs: Any
) -> Iterator[PrivateTraining]:
    """Context-manager form of :func:`make_private`; opacus hooks are removed on exit.

    >>> with private_training(model, opt, loader, noise_multiplier=1.0, max_grad_norm=1.0, rng=0) as pt:  # doctest: +SKIP
    ...     ...

    Args:
        model: the model to train.
        optimizer: its optimizer.
        data_loader: a DataLoader over a sized dataset.
        **kwargs: the keyword arguments of :func:`make_private` (``noise_multiplier``, ``target_epsilon``,
            ``max_grad_norm``, ``delta``, ``rng``, ...).

    Yields:
        The ``PrivateTraining`` handle.

    Raises:
        InvalidArgument: as :func:`make_private`.
        InvalidPrivacyParameter: as :func:`make_private`.
    """
    pt = make_private(model, optimizer, data_loader, **kwargs)
    try:
        yield pt
    finally:
        pt.close()
