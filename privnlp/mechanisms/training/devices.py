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

import torch
from torch import nn

from privnlp.core.errors import InvalidArgument

__all__ = ["check_model_device", "check_model_dtypes"]


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
