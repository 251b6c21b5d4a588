"""Per-sample gradient rules for the layers of common decoders that opacus 1.6 has none for (issue #29 item 2).

Paper: Bu et al. 2023 ("Differentially Private Optimization on Large Model at Small Cost", book-keeping) and Li et
al. 2022 (ghost norms); DP-SGD: Abadi et al. 2016. Registered with opacus' own registries
(``register_grad_sampler`` / ``register_norm_sampler``), so hooks, ghost and book-keeping mode all use them:

* Hugging Face ``Conv1D`` (GPT-2 family): ``y = x W + b`` with ``W`` of shape ``[in, out]`` -- a linear layer
  with the weight transposed. Per-sample gradient ``W_i = sum_t a_it^T g_it``; norms by the ghost norm
  ``<a a^T, g g^T>`` or the instantiated gradient, whichever is cheaper (as for ``nn.Linear``).
* RMSNorm (``torch.nn.RMSNorm``, ``LlamaRMSNorm`` and the RMSNorm classes copied from it: Mistral, Qwen2, ...):
  ``y = w * xhat`` with ``xhat = x / sqrt(mean(x^2) + eps)`` computed in fp32; per-sample gradient
  ``w_i = sum_t g_it * xhat_it``. Gemma's ``(1 + w) * xhat`` has the same derivative. A class is recognised by its
  name ending in ``RMSNorm``, a single ``weight`` parameter and an ``eps`` / ``variance_epsilon`` attribute.

Rotary position embeddings have no parameters and grouped-query attention is made of ``nn.Linear`` layers, so a
Llama-style decoder needs nothing else.

The registration is process-wide (opacus' registries are class attributes, read at every backward pass, so a rule
cannot be scoped to one model) and that is safe: it only adds rules for classes opacus 1.6 has none for (where
opacus would refuse the layer or fall back to functorch's instantiated per-sample gradients), the rules are exact
(the loop tests), and a rule already registered for a class by someone else is never replaced (see
:func:`register_for_model`). Each rule is tested against per-sample gradients computed by a loop
(``tests/training/test_decoders.py``). Hand-written because opacus has no rule for these layers and functorch's
fallback instantiates every per-sample gradient.
"""

from __future__ import annotations

import torch
from opacus.grad_sample import GradSampleModule, GradSampleModuleFastGradientClipping
from opacus.grad_sample.utils import register_grad_sampler, register_norm_sampler
from torch import nn

from .rounding import (
    LAMBDA,
    U32,
    ghost_sq_norms,
    gradient_tokens,
    instantiated_sq_norms,
    sum_sq_norms,
)

__all__ = [
    "register_for_model",
    "is_conv1d",
    "is_rmsnorm",
    "conv1d_grad_sample",
    "conv1d_norm_sample",
    "linear_norm_sample",
    "embedding_norm_sample",
    "ghost_norm_samplers",
    "rmsnorm_grad_sample",
]

_REGISTERED: set[type] = set()
#: opacus' own embedding norm sampler (wrapped by :func:`embedding_norm_sample`)
_OPACUS_EMBEDDING_NORM = GradSampleModuleFastGradientClipping.NORM_SAMPLERS[nn.Embedding]


def is_conv1d(module: nn.Module) -> bool:
    """A Hugging Face ``transformers.pytorch_utils.Conv1D`` (checked by name and shape, no transformers import)."""
    t = type(module)
    return (
        t.__name__ == "Conv1D"
        and t.__module__.startswith("transformers")
        and hasattr(module, "nf")
        and isinstance(getattr(module, "weight", None), torch.Tensor)
    )


def is_rmsnorm(module: nn.Module) -> bool:
    """An RMSNorm layer with one ``weight`` (torch's, Llama's and its copies)."""
    if isinstance(module, nn.RMSNorm):
        return module.weight is not None
    names = [n for n, _ in module.named_parameters(recurse=False)]
    return (
        type(module).__name__.endswith("RMSNorm")
        and names == ["weight"]
        and (hasattr(module, "variance_epsilon") or hasattr(module, "eps"))
    )


def _rms_eps(module: nn.Module, x: torch.Tensor) -> float:
    eps = getattr(module, "variance_epsilon", None)
    if eps is None:
        eps = getattr(module, "eps", None)
    return float(torch.finfo(x.dtype).eps) if eps is None else float(eps)


def _xhat(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The normalised input in fp32 (what the layer multiplies by its weight, before the cast back)."""
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + _rms_eps(module, x))


def conv1d_grad_sample(
    layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor
) -> dict[nn.Parameter, torch.Tensor]:
    """Per-sample gradients of a ``Conv1D``: ``[B, in, out]`` for the weight, ``[B, out]`` for the bias."""
    a = activations[0].to(backprops.dtype)
    ret = {}
    if layer.weight.requires_grad:
        ret[layer.weight] = torch.einsum("n...i,n...j->nij", a, backprops)
    if layer.bias is not None and layer.bias.requires_grad:
        ret[layer.bias] = torch.einsum("n...k->nk", backprops)
    return ret


def _linear_norms(
    layer: nn.Module, a: torch.Tensor, g: torch.Tensor, want_w: bool, want_b: bool
) -> dict[nn.Parameter, torch.Tensor]:
    """Per-sample gradient norms of a linear map (``nn.Linear`` or ``Conv1D``: ``||a^T g|| = ||g^T a||``) in fp32, by
    the cheaper of the ghost norm and the instantiated gradient, each an upper bound in floating point (.rounding)."""
    a, g = a.float(), g.float()
    n = g.shape[0]
    ret = {}
    if g.dim() == 2:  # one token per example: products of sums of squares, nothing cancels
        if want_w:
            ret[layer.weight] = ((g * g).sum(1) * (a * a).sum(1)).sqrt()
        if want_b:
            ret[layer.bias] = g.norm(2, dim=1)
        return ret
    a, g = a.reshape(n, -1, a.shape[-1]), g.reshape(n, -1, g.shape[-1])
    if want_w:
        t, d, p = g.shape[1], a.shape[-1], g.shape[-1]
        if t * (d + p) <= d * p:
            sq = ghost_sq_norms(
                torch.bmm(g, g.transpose(1, 2)), torch.bmm(a, a.transpose(1, 2)), d, p
            )
        else:
            sq = instantiated_sq_norms(torch.bmm(g.transpose(1, 2), a), g, a)
        ret[layer.weight] = sq.sqrt()
    if want_b:
        ret[layer.bias] = sum_sq_norms(g.sum(1), g).sqrt()
    return ret


def linear_norm_sample(
    layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor
) -> dict[nn.Parameter, torch.Tensor]:
    """Per-sample gradient norms of an ``nn.Linear`` or a ``Conv1D`` (its weight transposed: the same norms) without
    per-sample gradients, in fp32, each an upper bound in floating point: opacus' own Gram sum can cancel (a crafted
    example's norm computed 0.0 where it is 7.0, so it escaped clipping); used by ghost mode and book-keeping."""
    return _linear_norms(
        layer,
        activations[0],
        backprops,
        layer.weight.requires_grad,
        layer.bias is not None and layer.bias.requires_grad,
    )


#: the ``Conv1D`` rule registered with opacus (the norms of ``x W`` and ``x W^T`` per example are the same)
conv1d_norm_sample = linear_norm_sample


def embedding_norm_sample(
    layer: nn.Embedding, activations: list[torch.Tensor], backprops: torch.Tensor
) -> dict[nn.Parameter, torch.Tensor]:
    """opacus' ``nn.Embedding`` norm (per-id sums of ``g``) plus the rounding margin of a sum over the example's ``T`` tokens
    (``.rounding.sum_sq_norms``): tokens of one id whose gradients cancel get a larger norm, never a smaller one."""
    ret = dict(_OPACUS_EMBEDDING_NORM(layer, activations, backprops))
    if layer.weight in ret:
        n = backprops.shape[0]
        g = backprops.reshape(n, -1, backprops.shape[-1])
        norm = ret[layer.weight].double()
        tok = torch.linalg.vector_norm(g, dim=2, dtype=torch.float32).double().pow(2)  # n x T
        # T: the example's own nonzero-gradient tokens (not the padded width: see .rounding)
        err = LAMBDA * U32 * gradient_tokens(tok).sqrt() * tok.sum(1).sqrt()
        ret[layer.weight] = (norm + err).to(ret[layer.weight].dtype)
    return ret


def ghost_norm_samplers(registry: dict) -> dict:
    """``registry`` (opacus' ``NORM_SAMPLERS``) with the linear and embedding norms replaced by the upper bounds
    above: set on one ghost-mode module's instance (``gsm.NORM_SAMPLERS = ...``), so opacus' process-wide registry is
    left as it is."""
    return {**registry, nn.Linear: linear_norm_sample, nn.Embedding: embedding_norm_sample}


def rmsnorm_grad_sample(
    layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor
) -> dict[nn.Parameter, torch.Tensor]:
    """Per-sample gradient of an RMSNorm weight: ``sum_t g_it * xhat_it`` (computed in fp32)."""
    if not layer.weight.requires_grad:
        return {}
    xhat = _xhat(layer, activations[0]).to(activations[0].dtype).float()
    g = backprops.float()
    n = g.shape[0]
    gs = (g * xhat).reshape(n, -1, g.shape[-1]).sum(1)
    return {layer.weight: gs.to(layer.weight.dtype)}


def register_for_model(model: nn.Module) -> list[str]:
    """Register the rules above with opacus for every Conv1D / RMSNorm class in ``model`` (idempotent).

    A class that already has a grad sampler (or, for Conv1D, a norm sampler) registered by someone else -- the user's
    own rule, registered before privnlp saw the class -- keeps it: privnlp never replaces a rule it did not write.

    Returns:
        The class names for which this call registered at least one rule.
    """

    new: list[str] = []
    grad_s = GradSampleModule.GRAD_SAMPLERS
    norm_s = GradSampleModuleFastGradientClipping.NORM_SAMPLERS
    for mod in model.modules():
        t = type(mod)
        if t in _REGISTERED:
            continue
        if is_conv1d(mod):
            rules = [(grad_s, register_grad_sampler, conv1d_grad_sample)]
            rules.append((norm_s, register_norm_sampler, conv1d_norm_sample))
        elif is_rmsnorm(mod):
            rules = [(grad_s, register_grad_sampler, rmsnorm_grad_sample)]
        else:
            continue
        added = False
        for registry, register, rule in rules:
            if t not in registry:
                register(t)(rule)
                added = True
        _REGISTERED.add(t)
        if added:
            new.append(t.__name__)
    return new
