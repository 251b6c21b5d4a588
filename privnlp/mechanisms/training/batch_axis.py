"""A batch-axis guard for opacus' per-sample modes (``hooks``, ``functorch``, ``ghost``).

opacus takes dim 0 of a layer's activations as the batch. A model that builds an embedding's ids inside its forward
without a batch axis -- nanoGPT's ``self.wpe(torch.arange(T))`` (shape ``(T,)``), broadcast over the batch -- has a
``T x d`` output whose gradient is the batch's sum. When the Poisson batch size ``B`` happens to equal ``T`` every
shape check passes and row ``t`` of the position table is clipped by example ``t``'s factor: one example's clipped
gradient was measured at 2.0 C (hooks mode; ghost 1.006 C). :func:`attach_batch_axis_guard` refuses such a forward
before any backward, noise or accounting step (the book-keeping mode has the same check in ``bookkeeping.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from privnlp.core.errors import InvalidArgument

__all__ = ["GUARDED_MODES", "attach_batch_axis_guard"]

#: the opacus modes whose per-sample gradients read dim 0 of a layer's activations as the batch
GUARDED_MODES = ("hooks", "functorch", "ghost")
_MAX_DEPTH = 4  # nesting of lists / tuples / dicts searched for the model's tensor inputs


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors among ``args`` and ``kwargs``, also inside (nested) lists, tuples and dicts (depth <= 4), in
    order (breadth first): the first is the one whose dim 0 is the batch size."""
    out, level, depth = [], [*args, *kwargs.values()], 0
    while level:
        nxt = []
        for x in level:
            if isinstance(x, torch.Tensor):
                out.append(x)
            elif isinstance(x, (list, tuple)) and depth < _MAX_DEPTH:
                nxt.extend(x)
            elif isinstance(x, dict) and depth < _MAX_DEPTH:
                nxt.extend(x.values())
        level, depth = nxt, depth + 1
    return out


class _BatchAxisGuard:
    """The model's pre-hook (records the batch's storages and ``B``) and the embeddings' forward hook (checks)."""

    def __init__(self, model: nn.Module, mode: str) -> None:
        self.mode = mode
        self.storages: set[int] = set()
        self.batch_size = 0
        self.names = {
            m: name or type(model).__name__
            for name, m in model.named_modules()
            if isinstance(m, nn.Embedding) and m.weight.requires_grad
        }

    def __deepcopy__(self, memo: dict) -> _BatchAxisGuard:
        # opacus' functorch mode deep-copies each layer with its hooks (make_functional): share this guard rather than
        # copy it, and with it (through ``names``) every embedding of the model
        return self

    def model_inputs(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Runs after the pre-hooks registered before it (torch hands each with-kwargs pre-hook the ``(args,
        kwargs)`` the previous one returned), so the engine's per-row ``position_ids`` count as inputs."""
        if not torch.is_grad_enabled():
            return
        xs = _tensors(args, kwargs)
        # a view (slice, unsqueeze, expand) of an input shares its storage: the model may reshape what it is given
        self.storages = {x.untyped_storage().data_ptr() for x in xs}
        # the first tensor with a dim 0 (a scalar such as HF's num_items_in_batch has none)
        self.batch_size = next((int(x.shape[0]) for x in xs if x.dim() > 0), 0)

    def embedding_ids(self, module: nn.Module, inputs: tuple, output: Any) -> None:
        if (
            not (torch.is_grad_enabled() and module.training)
            or not inputs
            or not isinstance(inputs[0], torch.Tensor)
        ):
            return  # opacus captures no activations in eval mode or under no_grad either
        if torch._C._functorch.maybe_current_level() is not None:
            return  # opacus' functorch mode re-runs the layer per example inside vmap / grad: checked at the forward
        ids, b = inputs[0], self.batch_size
        passed = ids.untyped_storage().data_ptr() in self.storages
        # passed in with dim 0 == B (also one id per example, shape (B,)); built inside: per-row ids derived from
        # the inputs, or rows expanded to B. Passed in with dim 0 != B ((1, T) position ids): opacus gives that
        # table a per-sample gradient of batch 1, the same broadcast (silent when it is (T,) and T == B)
        if b <= 1 or (ids.dim() > 0 and ids.shape[0] == b and (passed or ids.dim() >= 2)):
            return
        where = "passed to" if passed else "built inside"
        raise InvalidArgument(
            f"grad_sample_mode={self.mode!r}: the trainable embedding {self.names.get(module, '?')!r} reads ids "
            f"{where} the model with shape {tuple(ids.shape)} and no batch axis of size B={b} (dim 0); "
            "opacus would read their first axis as the batch and clip rows of its gradient with other examples' "
            "factors (when it happens to equal B, no shape check notices). Pass the ids to the model with a batch "
            "axis (e.g. position_ids=... of shape (B, T)), expand them inside the model "
            "(ids.expand(B, -1).contiguous(): opacus' ghost mode fails on stride-0 ids), or freeze the layer "
            "(weight.requires_grad_(False))"
        )


def attach_batch_axis_guard(model: nn.Module, mode: str) -> list[RemovableHandle]:
    """Refuse, in the forward, a trainable ``nn.Embedding`` whose ids are built inside the model without a batch axis.

    A forward pre-hook (``with_kwargs=True``) on ``model`` records, while gradients are enabled, the storages of its
    tensor inputs (also inside nested lists / tuples / dicts, depth <= 4) and ``B`` = dim 0 of the first one that
    has a dim 0 (batch first). A forward hook on every ``nn.Embedding`` with a trainable weight accepts, when
    ``B > 1``, only ids with ``shape[0] == B`` that share an input's storage (the batch or a view of it, ``(B,)``
    included) or have ``dim >= 2`` (per-row ids derived from the inputs, or rows expanded to ``B``); any ids when
    ``B <= 1``, under ``no_grad`` or in eval mode (where opacus captures nothing either). Anything else raises in the
    forward, before any backward: no noise is released, no step accounted. Register it after the pre-hooks that add
    inputs (``add_batch_position_ids``): torch hands each with-kwargs pre-hook the ``(args, kwargs)`` the previous
    one returned.

    Not caught (their shape cannot tell them from per-row ids): ids built inside with ``dim >= 2`` whose first axis
    is not the batch but equals ``B`` (T5's ``(q, k)`` relative-position buckets when ``B == q``), and ``(T,)`` ids
    passed in by the caller when ``T == B``.

    Args:
        model: the module the batch is passed to (the wrapped model itself, not opacus' ``GradSampleModule``).
        mode: one of :data:`GUARDED_MODES`.

    Returns:
        The hook handles (``h.remove()`` for each to detach).

    Raises:
        InvalidArgument: ``mode`` is not one of :data:`GUARDED_MODES`; in a forward: the embedding, the ids' shape,
            ``B`` and the fixes.
    """
    if mode not in GUARDED_MODES:
        raise InvalidArgument(
            f"attach_batch_axis_guard: mode must be one of {GUARDED_MODES}, got {mode!r}"
        )
    guard = _BatchAxisGuard(model, mode)
    handles = [model.register_forward_pre_hook(guard.model_inputs, with_kwargs=True)]
    handles += [m.register_forward_hook(guard.embedding_ids) for m in guard.names]
    return handles
