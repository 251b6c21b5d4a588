"""Device and dtype rules of private training (issue #29 items 1 and 3), checked before any step is taken.

* Every trainable parameter on one device, and one where torch can create a random generator for the privacy
  noise (cpu, cuda): opacus draws the noise of each parameter with ``torch.normal(..., generator=g)`` on the
  parameter's device, and a generator on another device fails at the first step (the issue's
  ``Expected a 'cuda' device type for generator but found 'cpu'``).
* No float16 trainable parameters: privnlp has no loss-scaler integration, and without one fp16 per-sample
  gradients underflow and the clipped sums lose the precision the clipping bound rests on. bfloat16 parameters,
  or fp32 parameters under ``torch.autocast(dtype=torch.bfloat16)``, are supported: per-sample norms and the
  clipping run in fp32, the noise is drawn in the parameters' dtype.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from opacus.optimizers.optimizer import (
    _check_processed_flag,
    _generate_noise,
    _mark_as_processed,
)
from torch import nn

from privnlp.core.errors import InvalidArgument

__all__ = [
    "InputsOnDevice",
    "check_model_device",
    "check_model_dtypes",
    "noised_sum",
    "resolve_device",
    "sum_dtype",
]

_DEVICE_SPEC = re.compile(r"cpu|auto|cuda(:\d+)?")


def resolve_device(spec: str, *, name: str = "device") -> str:
    """The device a run trains on: ``"cpu"``, ``"cuda"`` (the current CUDA device), ``"cuda:N"`` or ``"auto"``
    (``"cuda"`` when torch sees a CUDA device, else ``"cpu"``), checked before any work is done.

    Returns:
        The canonical device string (``"cpu"``, ``"cuda"`` or ``"cuda:N"``; ``"auto"`` resolved).

    Raises:
        InvalidArgument: naming ``name``: a spec outside ``cpu``, ``cuda``, ``cuda:N``, ``auto``; a CUDA request
            where torch sees no CUDA device; ``cuda:N`` with ``N`` >= the number of CUDA devices.
    """
    if not isinstance(spec, str) or _DEVICE_SPEC.fullmatch(spec.strip().lower()) is None:
        raise InvalidArgument(f"{name} must be one of cpu, cuda, cuda:N, auto; got {spec!r}")
    spec = spec.strip().lower()
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "cpu":
        return spec
    if not torch.cuda.is_available():
        raise InvalidArgument(
            f"{name} {spec!r} requested but torch sees no CUDA device on this machine "
            f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}); use {name} cpu or auto"
        )
    count = torch.cuda.device_count()
    if ":" in spec and int(spec.split(":", 1)[1]) >= count:
        raise InvalidArgument(
            f"{name} {spec!r}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})"
        )
    return spec


def check_model_device(model: nn.Module) -> torch.device:
    """The one device of ``model``'s trainable parameters.

    Raises:
        InvalidArgument: trainable parameters on several devices (naming one parameter per device), or on a
            device where torch cannot create a generator (``meta``, ...).
    """
    first: dict[torch.device, str] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            first.setdefault(p.device, name)
    if len(first) > 1:
        where = ", ".join(f"{name!r} on {dev}" for dev, name in first.items())
        raise InvalidArgument(
            f"model: trainable parameters on {len(first)} devices ({where}); DP-SGD needs every trainable "
            "parameter on one device (model.to(device)); for several GPUs use DDP (torchrun)"
        )
    if not first:
        return torch.device("cpu")
    dev = next(iter(first))
    if dev.type != "cpu":
        try:
            torch.Generator(device=dev)
        except (RuntimeError, TypeError) as e:
            raise InvalidArgument(
                f"model: parameter {first[dev]!r} is on device {dev}, where torch cannot create a random "
                f"generator for the privacy noise ({e}); train on cpu or cuda"
            ) from e
    return dev


def check_model_dtypes(model: nn.Module) -> None:
    """Refuse float16 trainable parameters (see the module docstring).

    Raises:
        InvalidArgument: naming the first float16 parameter.
    """
    for name, p in model.named_parameters():
        if p.requires_grad and p.dtype == torch.float16:
            raise InvalidArgument(
                f"model: parameter {name!r} is float16; DP-SGD in fp16 needs a loss scaler, which privnlp does "
                "not integrate (per-sample gradients underflow, the clipping bound loses precision): use "
                "bfloat16 parameters, or fp32 parameters under torch.autocast(device_type, dtype=torch.bfloat16)"
            )


def sum_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a clipped sum is kept in until its noise is added: float32 for bfloat16 / float16 parameters,
    the parameters' own dtype otherwise.

    The sum of B clipped gradients rounded to bfloat16 (8 significant bits) before the noise moves by up to
    B * C * 2^-8: two neighbouring datasets' rounded sums differed by 1.8 C on 512 examples (a review, 2026-11-27),
    so the Gaussian mechanism's sensitivity C no longer held. The sum is noised in float32 and only the noised
    gradient is cast to the parameters' dtype (post-processing)."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def noised_sum(
    summed: torch.Tensor,
    *,
    std: float,
    generator: torch.Generator | None,
    secure_mode: bool = False,
) -> torch.Tensor:
    """``summed + N(0, std^2)`` per coordinate, drawn on ``summed``'s device and in its dtype from ``generator``.

    The same draw as opacus' ``_generate_noise`` (one ``torch.normal`` call with the same arguments: the same
    values from the same generator state), without the ``torch.zeros`` tensor it allocates for every parameter at
    every step and with the sum taken in place in the noise tensor (one parameter-sized allocation less; IEEE
    addition is commutative, so the result is bit-identical). ``secure_mode`` (opacus' 2n-draw defence against
    floating-point attacks) keeps opacus' own function."""
    if secure_mode:
        return summed + _generate_noise(
            std=std, reference=summed, generator=generator, secure_mode=True
        )
    if std == 0:
        return summed.clone()
    noise = torch.normal(
        mean=0,
        std=std,
        size=summed.shape,
        device=summed.device,
        generator=generator,
        dtype=summed.dtype,
    )
    return noise.add_(summed)


def noise_summed_grads(optimizer: Any, std: float, *, batched: bool | None = None) -> None:
    """The body of opacus' ``DPOptimizer.add_noise`` with :func:`noised_sum`: each parameter's clipped sum plus
    ``N(0, std^2)`` becomes its ``.grad`` (each summed gradient noised exactly once, as opacus checks).

    ``batched`` (``None``: on a CUDA device, not in secure mode): the noise of all parameters whose sums share a
    dtype is one ``torch.normal`` draw of their total size from the same generator, split into the parameters'
    shapes and added with one ``torch._foreach_add`` (each gradient its own tensor) -- the same distribution (every coordinate an independent
    N(0, std^2)), not the same values as one draw per parameter. On a GPU the per-parameter draws are launch-bound
    (BERT-base: ~200 parameters, 2 kernels each per step; the noise took 5.0-5.3 ms of a book-keeping step on an H100,
    ``scripts/gpu/results/h100-run3.txt``). On the CPU the default keeps opacus' per-parameter draws (bit-identical
    to opacus, so seeded CPU runs and the committed cards are unchanged)."""
    params = list(optimizer.params)
    if batched is None:
        batched = (
            bool(params)
            and params[0].summed_grad is not None
            and params[0].summed_grad.device.type == "cuda"
        )
    if batched and std > 0 and not optimizer.secure_mode:
        _noise_batched(optimizer, params, std)
        return
    for p in params:
        _check_processed_flag(p.summed_grad)
        p.grad = (
            noised_sum(
                p.summed_grad,
                std=std,
                generator=optimizer.generator,
                secure_mode=optimizer.secure_mode,
            )
            .view_as(p)
            .to(p.dtype)
        )  # noised in the sum's dtype (sum_dtype), then cast: post-processing
        _mark_as_processed(p.summed_grad)


class InputsOnDevice(nn.Module):
    """``module`` with its tensor keyword arguments moved to ``device`` first: hands a model on a GPU to a training
    loop that builds its batches on the CPU (``privnlp.models.train_lm``). Same parameters, same modes (``train()``
    / ``eval()`` reach ``module``); the output stays on ``device``."""

    def __init__(self, module: nn.Module, device: str | torch.device) -> None:
        super().__init__()
        self.module = module
        self.device = torch.device(device)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        args = tuple(a.to(self.device) if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {
            k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()
        }
        return self.module(*args, **kwargs)


def _noise_batched(optimizer: Any, params: list, std: float) -> None:
    """:func:`noise_summed_grads` with one draw per dtype of the sums (see there)."""
    for p in params:
        _check_processed_flag(p.summed_grad)
    groups: dict[tuple, list] = {}
    for p in params:
        s = p.summed_grad
        groups.setdefault((s.device, s.dtype), []).append(p)
    for (device, dtype), ps in groups.items():
        sizes = [p.summed_grad.numel() for p in ps]
        flat = torch.normal(
            mean=0.0,
            std=std,
            size=(sum(sizes),),
            device=device,
            generator=optimizer.generator,
            dtype=dtype,
        )
        # out of place: every gradient its own tensor (a view into one buffer would keep the whole buffer alive
        # and be copied whole by opacus' ghost optimizer's deepcopy of p.grad), still one multi-tensor kernel
        noised = torch._foreach_add(
            list(flat.split(sizes)), [p.summed_grad.reshape(-1) for p in ps]
        )
        del flat
        for p, c in zip(ps, noised, strict=True):
            # noised in the sum's dtype, then cast: post-processing
            p.grad = c.view_as(p).to(p.dtype)
    for p in params:
        _mark_as_processed(p.summed_grad)
