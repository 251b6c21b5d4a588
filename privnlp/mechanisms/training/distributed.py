"""DP-SGD on N processes (``torch.distributed``): one claim, one ledger, one hard budget.

Papers: Abadi et al. 2016 (DP-SGD), ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (DP-SGD at scale with
large logical batches built across devices). Library: opacus' distributed support
(:class:`opacus.distributed.DifferentiallyPrivateDistributedDataParallel`,
:class:`opacus.optimizers.DistributedDPOptimizer`, ``DPDataLoader(distributed=True)``); what is written
here is only what opacus 1.6 gets wrong or leaves open for a *privacy* guarantee (each item says why):

* **Sampling.** Every rank holds a fixed, disjoint shard of the dataset and includes each of its examples
  independently with the *global* sample rate ``q = 1 / len(data_loader)``; the union over ranks is
  therefore exactly one Poisson sample of the whole dataset at rate ``q`` (what the accountants assume).
  opacus' ``DistributedUniformWithReplacementSampler`` *skips* empty local batches, so one rank would run
  fewer steps than another (the collectives then pair different steps, or hang): our sampler yields the
  empty batch, and the step is a noise-only step on that rank (:class:`KeepEmptyDistributedSampler`).
* **Clipping.** Per-sample clipping to ``C`` happens on each rank (opacus hooks / ghost); the sum of the
  clipped gradients over ranks is the single-process clipped sum of the same global batch.
* **Noise.** opacus adds the whole ``N(0, (sigma C)^2)`` on rank 0 only. We instead draw it on every rank
  from that rank's *own* secure generator (``os.urandom``) with std ``sigma C / sqrt(W)``: the all-reduced
  sum has std exactly ``sigma C`` (the single-process noise, added once), and no single rank knows more
  than ``1/W`` of the noise variance (with opacus' scheme rank 0 knows all of it). A seed is refused in a
  distributed run: every rank gets the same launch arguments, so a seed would be shared between ranks and
  any of them could recompute (and subtract) the others' noise. The all-reduce is one flat buffer.
* **Ledger and budget.** Every rank keeps the same :class:`~privnlp.accounting.DPLedger` (same sigma, same
  global ``q``, one event per global step): its epsilon equals the single-process run's for the same global
  batch, steps and sigma. The budget check is all-reduced (MAX): when any rank refuses a step, every rank
  raises :class:`~privnlp.core.errors.PrivacyBudgetExceeded` before adding noise -- no rank trains on alone.
* **Checkpoints.** Only rank 0 writes (atomically, then a barrier); the checkpoint holds no world size,
  so a run resumes on any number of ranks with the ledger restored exactly (a secure run resumes from
  fresh OS entropy).

Threat model: the released model (or every noised update) is observed by anyone; the W ranks are the
trusted training job (they see their shard's raw gradients). Guarantee: example-level (epsilon, delta)-DP,
the same claim as single-process DP-SGD.

Launch (CPU, gloo on loopback)::

    torchrun --nproc_per_node 2 -m privnlp.cli.main train --noise-multiplier 1.0 --steps 20 --out runs/ddp
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any

import torch
from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
from opacus.utils.uniform_sampler import DistributedUniformWithReplacementSampler
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from privnlp.core.errors import InvalidArgument, PrivacyBudgetExceeded
from privnlp.core.rng import noise_is_seeded

from .devices import noise_summed_grads
from .dp_sgd import _poisson_loader

__all__ = [
    "DistributedContext",
    "resolve",
    "check_noise_rng",
    "poisson_loader",
    "wrap_model",
    "attach",
    "finish",
    "KeepEmptyDistributedSampler",
    "init_from_env",
    "is_rank_zero",
    "broadcast_object",
    "process_group_from_env",
]


class DistributedContext:
    """Rank and world size of an initialized default process group (``world_size >= 2``)."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size

    def __repr__(self) -> str:
        return f"DistributedContext(rank={self.rank}, world_size={self.world_size})"


def _initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def resolve(distributed: bool | None) -> DistributedContext | None:
    """``None`` (auto): distributed when a default process group with >= 2 ranks is initialized.
    ``True``: require one. ``False``: single process (even inside a process group)."""
    if distributed is not None and not isinstance(distributed, bool):
        raise InvalidArgument(
            f"distributed must be True, False or None (auto); got {distributed!r}"
        )
    if distributed is False:
        return None
    if not _initialized():
        if distributed:
            raise InvalidArgument(
                "distributed=True needs an initialized torch.distributed process group "
                "(launch with torchrun and call torch.distributed.init_process_group('gloo'), or "
                "privnlp.mechanisms.training.distributed.init_from_env())"
            )
        return None
    w = torch.distributed.get_world_size()
    if w < 2 and not distributed:
        return None
    return DistributedContext(torch.distributed.get_rank(), w)


def init_from_env(backend: str | None = None) -> DistributedContext | None:
    """Initialize the default process group from torchrun's environment (``WORLD_SIZE``, ``RANK``,
    ``MASTER_ADDR``...) when ``WORLD_SIZE > 1`` and none is initialized; returns the context (or ``None``
    in a single process). Backend: ``gloo`` on CPU, ``nccl`` when CUDA is available."""
    if _initialized():
        return resolve(None)
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return None
    if backend is None:
        backend = (
            "nccl"
            if torch.cuda.is_available() and os.environ.get("PRIVNLP_DDP_BACKEND") != "gloo"
            else "gloo"
        )
    torch.distributed.init_process_group(backend)
    return resolve(None)


def is_rank_zero() -> bool:
    return not _initialized() or torch.distributed.get_rank() == 0


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` of rank ``src`` on every rank (identity in a single process)."""
    if not _initialized():
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def check_noise_rng(ctx: DistributedContext, rng: Any, poisson_sampling: bool = True) -> None:
    """Refuse a noise seed in a distributed run (it would be shared by every rank), and a non-Poisson loader."""
    if not poisson_sampling:
        raise InvalidArgument(
            "poisson_sampling=False is not supported in a distributed run (each rank samples its "
            "shard with Poisson sampling at the global rate); pass poisson_sampling=True"
        )

    if noise_is_seeded(rng):
        raise InvalidArgument(
            f"rng: a seed was given to a distributed run (rank {ctx.rank} of {ctx.world_size}); every rank gets the "
            "same launch arguments, so the seed would be shared and any rank could recompute the others' privacy "
            "noise. Distributed DP-SGD draws its noise and Poisson masks from each rank's own OS entropy: pass "
            "rng=None (reproducible noise is available only in a single-process simulation)"
        )


# ----------------------------------------------------------------------------- sampling
class KeepEmptyDistributedSampler(DistributedUniformWithReplacementSampler):
    """opacus' distributed Poisson batch sampler, but an empty local batch is *yielded* (not skipped): every
    rank runs exactly ``num_batches`` steps per pass, so the collectives of step t pair step t everywhere.
    Each example of this rank's shard is included with probability ``sample_rate`` (the global rate)."""

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(
                self.shuffle_seed + self.epoch
            )  # public partition of the data (not privacy randomness)
            indices = torch.randperm(self.total_size, generator=g)
        else:
            indices = torch.arange(self.total_size)
        indices = indices[self.rank : self.total_size : self.num_replicas]
        for _ in range(self.num_batches):
            mask = torch.rand(self.num_samples, generator=self.generator) < self.sample_rate
            yield indices[mask.nonzero(as_tuple=False).reshape(-1)]


def poisson_loader(
    ctx: DistributedContext,
    data_loader: Any,
    generator: torch.Generator,
    *,
    sample_rate: float | None = None,
) -> Any:
    """opacus' distributed ``DPDataLoader`` over ``data_loader``'s dataset at the global rate ``sample_rate``
    (default ``1 / len(data_loader)``), keeping empty local batches (``len()`` = batches of one pass)."""
    q = 1.0 / len(data_loader) if sample_rate is None else float(sample_rate)
    dl = _poisson_loader(data_loader, q, generator, distributed=True)
    dl.batch_sampler.__class__ = (
        KeepEmptyDistributedSampler  # same state, iteration that keeps empty batches
    )
    return dl


def wrap_model(ctx: DistributedContext, model: nn.Module) -> nn.Module:
    """opacus' DPDDP: broadcasts rank 0's parameters (every rank starts from the same model) and marks the
    module as distributed for opacus (per-rank expected batch size, distributed DP optimizer)."""
    return DPDDP(model)


# ----------------------------------------------------------------------------- optimizer: noise, reduce, budget
def attach(ctx: DistributedContext, optimizer: Any, guard: Any) -> None:
    """Install split secure noise, a flat all-reduce and the collective budget check on opacus'
    distributed DP optimizer (called before privnlp's budget guard wraps ``add_noise``)."""
    if getattr(optimizer, "world_size", None) != ctx.world_size:
        raise InvalidArgument(
            f"internal: expected opacus' distributed DP optimizer for {ctx.world_size} ranks; got "
            f"{type(optimizer).__name__}"
        )
    w = ctx.world_size

    def add_noise() -> None:
        noise_summed_grads(
            optimizer, optimizer.noise_multiplier * optimizer.max_grad_norm / math.sqrt(w)
        )

    def reduce_gradients() -> None:
        params = [
            p for p in optimizer.params if p.grad is not None
        ]  # (bookkeeping turns requires_grad off)
        if not params:
            return
        flat = _flatten_dense_tensors([p.grad for p in params])
        torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM)
        if optimizer.loss_reduction == "mean":
            flat /= w
        for p, g in zip(params, _unflatten_dense_tensors(flat, [p.grad for p in params])):
            p.grad.copy_(g)

    optimizer.add_noise = add_noise
    optimizer.reduce_gradients = reduce_gradients

    local_check = guard.check_step

    def check_step(noise_multiplier: float, sample_rate: float) -> None:
        err: PrivacyBudgetExceeded | None = None
        try:
            local_check(noise_multiplier, sample_rate)
        except PrivacyBudgetExceeded as e:
            err = e
        flag = torch.tensor([0 if err is None else 1], dtype=torch.int32)
        if torch.distributed.get_backend() == "nccl":  # pragma: no cover - GPU clusters
            flag = flag.cuda()
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        if int(flag.item()):
            if err is not None:
                raise err
            raise PrivacyBudgetExceeded(
                f"refusing DP-SGD step {guard.ledger.steps + 1}: another rank's budget check refused it (rank "
                f"{ctx.rank} stops with it: no rank trains on alone)"
            )

    guard.check_step = check_step


def finish(ctx: DistributedContext, pt: Any) -> Any:
    """Global expected batch size, the claim's note, rank-0-only checkpoints."""
    pt.expected_batch_size = int(round(float(pt.optimizer.expected_batch_size) * ctx.world_size))
    pt.notes = tuple(pt.notes) + (
        f"distributed: {ctx.world_size} ranks (torch.distributed {torch.distributed.get_backend()}); Poisson sampling "
        f"at the global rate on disjoint shards; per-rank secure noise std sigma*C/sqrt({ctx.world_size}), summed "
        "over ranks: std sigma*C (single-process noise); one ledger (same events on every rank); budget check "
        "all-reduced",
    )
    pt.distributed = ctx
    local_save = pt.save_checkpoint

    def save_checkpoint(path: str | os.PathLike) -> Any:
        """Rank 0 writes the checkpoint (atomically); every rank waits for it (barrier)."""
        out = None
        try:
            if ctx.rank == 0:
                out = local_save(path)
        finally:
            torch.distributed.barrier()
        return out if out is not None else Path(path)

    pt.save_checkpoint = save_checkpoint
    return pt


@contextlib.contextmanager
def process_group_from_env(backend: str | None = None):
    """``with process_group_from_env() as ctx:`` -- :func:`init_from_env`, and destroy the group on exit if it
    was created here."""
    created = not _initialized()
    ctx = init_from_env(backend)
    try:
        yield ctx
    finally:
        if created and _initialized():
            torch.distributed.destroy_process_group()
