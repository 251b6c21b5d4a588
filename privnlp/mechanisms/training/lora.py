"""DP-LoRA: DP-SGD on the LoRA adapters of a ``peft`` model, the base weights frozen (issue #29 item 4).

Papers: Yu et al. 2022 ("Differentially Private Fine-tuning of Language Models": DP on low-rank adapters only),
Hu et al. 2021 (LoRA); DP-SGD: Abadi et al. 2016. Threat model: that of DP-SGD. Claim: example-level
(epsilon, delta)-DP of everything trained -- the adapters (and peft ``modules_to_save`` copies); the base weights
are public pre-trained weights that training never reads a gradient into, checked byte for byte
(:func:`verify_base_unchanged`). The accounting is DP-SGD's, unchanged: it depends on sigma, q and the steps, not
on which parameters are trained.

The adapters are ``nn.Linear`` layers (opacus has their per-sample rule, hooks / ghost / book-keeping apply); a LoRA
type whose trainable parameters sit in a module without a per-sample rule (peft's LoRA on an ``nn.Embedding``
keeps ``lora_embedding_A/B`` in a ``ParameterDict``) is refused before any step, naming the module.

Usage::

    from peft import LoraConfig, get_peft_model
    model = get_peft_model(base, LoraConfig(r=8, target_modules=["c_attn"], fan_in_fan_out=True))
    pt = make_private(model, optimizer, loader, target_epsilon=8, epochs=3, rng=None)
    ...
    verify_base_unchanged(pt)               # raises if a frozen weight moved
    merge_and_save(pt, "out/")              # merged model + claim.json
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from privnlp.core.errors import InvalidArgument
from privnlp.core.report import atomic_write_text

__all__ = [
    "is_peft_model",
    "is_adapter_parameter",
    "check_peft_model",
    "base_digest",
    "verify_base_unchanged",
    "merge_and_save",
]

#: substrings of the parameter names peft gives to what it trains (LoRA / DoRA adapters, modules_to_save copies)
ADAPTER_MARKERS = ("lora_", "modules_to_save")


def is_peft_model(model: nn.Module) -> bool:
    """A ``peft.PeftModel`` (checked without importing peft)."""
    return any(
        c.__name__ == "PeftModel" and c.__module__.startswith("peft") for c in type(model).__mro__
    )


def is_adapter_parameter(name: str) -> bool:
    """Whether a peft model's parameter ``name`` belongs to an adapter (what DP-LoRA trains)."""
    return any(m in name for m in ADAPTER_MARKERS)


def check_peft_model(model: nn.Module, grad_samplers: Any) -> int:
    """Refuse a peft model DP-LoRA cannot train as claimed, before any step.

    Args:
        model: a peft model.
        grad_samplers: opacus' registry of per-sample gradient rules (module type -> rule).

    Returns:
        The number of trainable (adapter) parameters.

    Raises:
        InvalidArgument: a base weight requires grad (naming it), no adapter is trainable, or a trainable adapter
            parameter sits in a module type without a per-sample rule (naming the module and its type).
    """
    base = [
        n for n, p in model.named_parameters() if p.requires_grad and not is_adapter_parameter(n)
    ]
    if base:
        raise InvalidArgument(
            f"model: peft model whose base weight {base[0]!r} requires grad ({len(base)} base parameters in all); "
            "DP-LoRA trains only the adapters: freeze the base (peft does unless the base was unfrozen after "
            "get_peft_model) or list the module in LoraConfig(modules_to_save=...)"
        )
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if n_trainable == 0:
        raise InvalidArgument("model: the peft model has no trainable adapter parameters")
    for name, mod in model.named_modules():
        own = [p for p in mod.parameters(recurse=False) if p.requires_grad]
        if own and type(mod) not in grad_samplers:
            raise InvalidArgument(
                f"model: LoRA module {name!r} ({type(mod).__module__}.{type(mod).__name__}) has no per-sample "
                "gradient rule, so its per-example gradients cannot be clipped; target nn.Linear / Conv1D layers "
                "(LoraConfig(target_modules=...)), not embeddings"
            )
    return n_trainable


def base_digest(model: nn.Module) -> str:
    """A blake2b digest of every frozen (base) parameter's bytes, in name order."""
    h = hashlib.blake2b(digest_size=16)
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if not is_adapter_parameter(name):
            h.update(name.encode())
            h.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def verify_base_unchanged(pt: Any) -> None:
    """Check that the base weights of a DP-LoRA run are byte-identical to those at ``make_private``.

    Raises:
        InvalidArgument: ``pt`` is not a DP-LoRA run, or a base weight changed.
    """
    want = getattr(pt, "base_digest", None)
    if want is None:
        raise InvalidArgument("pt: not a DP-LoRA run (make_private on a peft model)")
    if base_digest(pt.original_model) != want:
        raise InvalidArgument(
            "DP-LoRA: a base weight changed during training; the claim covers the adapters only"
        )


def merge_and_save(pt: Any, path: str | Path) -> Path:
    """Close the private run, check the base weights, merge the adapters into them and save the merged model
    (``save_pretrained``) with the run's ``claim.json``.

    Returns:
        The folder written.
    """
    verify_base_unchanged(pt)
    claim = pt.claim()
    pt.close()
    merged = pt.original_model.merge_and_unload()
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out)
    atomic_write_text(out / "claim.json", json.dumps(claim.to_dict(), indent=2))
    return out
