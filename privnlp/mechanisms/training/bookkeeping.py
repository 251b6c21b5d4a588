"""Book-keeping (BK) per-sample clipping for DP-SGD: one backward pass, no per-sample gradients.

Paper: Bu, Wang, Zha, Karypis, "Differentially Private Optimization on Large Model at Small Cost" (ICML 2023,
FastDP's book-keeping; the ghost-norm trick is Goodfellow 2015 / Li et al. 2022 "Large language models can be
strong differentially private learners"); DP-SGD: Abadi et al. 2016, see ``../shared/papers/dp-bert-and-dp-wordpiece.txt``.
fastDP / private-transformers are not installable here, so BK is written on opacus' grad-sample layers (its
norm samplers and grad samplers); what is hand-written is the single-backward bookkeeping (opacus' ghost
clipping runs a second backward pass).

How: forward hooks store each trainable layer's input ``a`` and a tensor hook its output gradient ``g``
(book-keeping); the layers' weights do not require grad during the pass, so autograd computes only the
activation gradients (no weight gradients at all). At ``optimizer.step()``:

1. per-sample gradient norms per layer from ``(a, g)``, each an upper bound in floating point (a rounding margin
   for terms that can cancel: :mod:`.rounding`): linear / Conv1D layers by the cheaper of the ghost norm
   ``<a a^T, g g^T>`` and the instantiated per-sample gradient (the paper's mixed ghost norm), with ``a a^T``
   computed once for layers that read the same input (BERT's query / key / value); embeddings by the ghost norm
   with one-hot inputs, ``sum_{t,t'} [id_t = id_t'] <g_t, g_t'>`` (no ``torch.unique``: opacus' embedding norm
   sampler sorts (example, id) pairs into a tensor whose size the host must read, a GPU synchronisation every
   step); other layers by opacus' norm or grad samplers; summed over layers -> ``||grad_i||``;
2. ``c_i = min(1, C / (||grad_i|| + 1e-6))`` (opacus' formula);
3. the clipped sum per layer without a second backward pass: linear ``W: g^T diag(c) a`` with ``c`` folded into
   the narrower of ``a`` and ``g`` (an LM head's ``g`` is vocabulary-wide: scaling ``a`` avoids a batch x tokens x
   vocabulary copy), ``b: sum_i c_i sum_t g_it``; embedding: ``index_add`` of ``c*g`` at the token ids; any other
   opacus layer: its grad sampler on ``(a, c*g)`` summed over the batch (linear in ``g``);
4. opacus' DP optimizer adds the noise ``N(0, (sigma C)^2)``, scales by the expected batch size and steps
   (the same noise, budget guard and accounting as hooks / ghost mode).

Threat model and claim: those of DP-SGD (example-level (epsilon, delta)-DP); BK computes the same clipped sum
as hooks mode (tests compare them), so the claim is unchanged. BK refuses what would break the per-sample
bookkeeping instead of clipping wrongly: a weight shared by two layers, a layer run twice in one backward pass, a
layer's input changed in place after the layer read it, output gradients whose first dimension is not the batch,
and an embedding of ids built inside the model without a batch axis (nanoGPT's ``wpe(torch.arange(T))``: with
``B == T`` it passed every shape check and one example's clipped gradient came out at 2 C). The clipped sum runs with
autocast off (an ``optimizer.step()`` inside ``torch.autocast`` once ran it in bf16: 1.2e-3 above C).
Adversarial tests against a single-example loop: ``tests/training/test_bookkeeping_review.py``.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch
from opacus.grad_sample import GradSampleModule, GradSampleModuleFastGradientClipping
from torch import nn

from privnlp.core.errors import InvalidArgument

from .devices import sum_dtype
from .rounding import ghost_sq_norms, instantiated_sq_norms, sum_sq_norms
from .samplers import ghost_norm_samplers, is_conv1d, register_for_model

__all__ = ["BookKeeping", "supports_bookkeeping", "attach"]


def _samplers() -> tuple[dict, dict]:
    """opacus' grad samplers and its norm samplers, the linear / embedding norms replaced by privnlp's upper bounds
    (:func:`.samplers.ghost_norm_samplers`: linear layers with a frozen part, sequences over 1,024 tokens)."""
    return GradSampleModule.GRAD_SAMPLERS, ghost_norm_samplers(
        GradSampleModuleFastGradientClipping.NORM_SAMPLERS
    )


def _trainable_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [
        (n, m)
        for n, m in model.named_modules()
        if any(p.requires_grad for p in m.parameters(recurse=False))
    ]


def supports_bookkeeping(model: nn.Module) -> bool:
    """Every layer with trainable parameters has an opacus grad sampler (and is not an RNN); HF ``Conv1D`` and
    RMSNorm layers get theirs from :mod:`privnlp.mechanisms.training.samplers`."""
    register_for_model(model)
    grad_s, _ = _samplers()
    mods = _trainable_modules(model)
    return bool(mods) and all(type(m) in grad_s and "RNN" not in type(m).__name__ for _, m in mods)


#: low-precision activation dtypes (autocast): their matmuls run on the device's tensor cores, accumulated in fp32
_LOWP = (torch.bfloat16, torch.float16)
#: whether this torch has ``torch.mm(..., out_dtype=)`` for low-precision CUDA inputs (``None``: not tried yet)
_MM_OUT_DTYPE: bool | None = None


def _mm32(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x @ y`` (2-D or batched 3-D) accumulated and returned in fp32. Low-precision CUDA inputs stay in their
    dtype (products of two bf16 / fp16 numbers are exact in fp32: the same result as casting them first, at
    tensor-core speed); anything else, or a torch without ``out_dtype``, is cast to fp32 first."""
    global _MM_OUT_DTYPE
    mm = torch.bmm if x.dim() == 3 else torch.mm
    if x.dtype in _LOWP and x.dtype == y.dtype and x.is_cuda and _MM_OUT_DTYPE is not False:
        try:
            out = mm(x, y, out_dtype=torch.float32)
            _MM_OUT_DTYPE = True
            return out
        except (RuntimeError, TypeError):  # torch without mm.dtype / bmm.dtype
            _MM_OUT_DTYPE = False
    return mm(x.float(), y.float())


def _tensor_key(x: torch.Tensor) -> tuple:
    """Identity of a tensor's values: its memory, layout, dtype and in-place version."""
    return (x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.dtype, x._version)


def _gram(
    x: torch.Tensor,
    cache: dict | None,
    dtype: torch.dtype | None = None,
    source: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x x^T`` per example (``n x T x T``, fp32) of ``x`` cast to ``dtype`` (the matmul's operand dtype; ``None``:
    ``x``'s own), computed once per input tensor when ``cache`` is given: layers that read the same activation share
    it. The key is the identity of ``source`` (default ``x``), which must be the book-kept tensor (alive for the
    whole step), never a temporary copy: a freed copy's address is reused by the next one (a stale Gram for
    another layer's input)."""
    key = (*_tensor_key(x if source is None else source), tuple(x.shape), dtype)
    if cache is not None and key in cache:
        return cache[key]
    xc = x if dtype is None else x.to(dtype)
    gram = _mm32(xc, xc.transpose(1, 2))
    if cache is not None:
        cache[key] = gram
    return gram


#: sequence length up to which the embedding norm is the ghost norm (its ``n x T x T`` Gram matrices); longer
#: sequences use opacus' sort-based embedding norm sampler
EMBEDDING_GHOST_MAX_T = 1024


def _embedding_sq_norms(ids: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Squared per-sample gradient norm of an embedding table from its token ids and output gradients: the ghost
    norm with one-hot inputs, ``||sum_t e_{id_t} g_t^T||^2 = sum_{t,t'} [id_t = id_t'] <g_t, g_t'>`` (Li et al.
    2022's ghost clipping applied to the embedding; padding positions count, as in opacus' per-sample gradient)."""
    n = g.shape[0]
    ids = ids.reshape(n, -1)
    g = g.reshape(n, ids.shape[1], -1).float()
    same = (ids.unsqueeze(2) == ids.unsqueeze(1)).to(g.dtype)
    # an upper bound in floating point: the one-hot Gram is exact, the g g^T entries get the ghost margin (.rounding)
    return ghost_sq_norms(torch.bmm(g, g.transpose(1, 2)), same, 1, g.shape[-1])


def _split_lowp(x32: torch.Tensor, lowp: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``x32 = hi + lo`` with ``hi``, ``lo`` in ``lowp``: 16 significant bits for bf16 instead of 8, so that the clip
    factors folded into a low-precision operand keep each example's contribution within a relative 2^-16 of its
    fp32 value (one rounding of ``c_i g_i`` to bf16 alone would be 2^-9). bf16 only: fp16's exponent range flushes
    ``lo`` (and small ``hi``) to zero for the small values a clipped gradient has (fp16 autocast, CPU: one example's
    clipped gradient 3.4e-5 above C on a tiny BERT), so fp16 operands take the fp32 GEMM."""
    hi = x32.to(lowp)
    return hi, (x32 - hi.float()).to(lowp)


def _clipped_wb(
    a: torch.Tensor,
    g: torch.Tensor,
    cs: torch.Tensor,
    *,
    conv1d: bool,
    want_w: bool,
    want_b: bool,
    lowp_gemm: bool | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The clipped sums of ``k`` linear layers of equal shapes at once (fp32): ``a`` is ``k x n x ... x d``, ``g``
    ``k x n x ... x p``; returns the weight sums ``sum_i c_i g_i^T a_i`` (``k x p x d``; ``k x d x p`` for
    ``Conv1D``) and the bias sums ``sum_i c_i sum_t g_it`` (``k x p``), each ``None`` when not wanted. ``c`` is
    folded into the narrower of ``a`` and ``g``; one batched GEMM for the ``k`` layers.

    Under bf16 autocast (``g`` in bf16 on CUDA, or ``lowp_gemm=True``) the weight sum runs in the activations'
    dtype on the tensor cores with fp32 accumulation and output, as the non-private backward's weight gradient
    does (an fp32 GEMM here made the bf16 DP step 2x the non-private one on an H100): ``a`` in that dtype (the
    operand autocast's forward used, so the sum is the gradient of the fp32 master weight), the clip-scaled
    operand as a ``hi + lo`` pair (:func:`_split_lowp`), two GEMMs. fp16 operands (fp16 autocast) take the fp32
    GEMM (see :func:`_split_lowp`)."""
    k, n = g.shape[0], g.shape[1]
    d, p = a.shape[-1], g.shape[-1]
    col = cs.view(1, n, 1, 1)
    scale_a = p > d
    lowp = g.dtype if g.dtype in _LOWP else None
    if lowp_gemm is None:
        lowp_gemm = g.is_cuda
    lowp_gemm = lowp_gemm and lowp is torch.bfloat16
    if lowp is not None:  # the operand autocast's forward used (and the norms read)
        a = a.to(lowp)
    a2, g2 = a.reshape(k, n, -1, d), g.reshape(k, n, -1, p)
    ws = bs = None
    if lowp_gemm:
        s32 = (a2 if scale_a else g2).float() * col
        if want_w:
            hi, lo = (x.reshape(k, -1, x.shape[-1]) for x in _split_lowp(s32, lowp))
            u = (g2 if scale_a else a2).reshape(k, -1, p if scale_a else d)
            af, gf = ((hi, lo), (u, u)) if scale_a else ((u, u), (hi, lo))
            if conv1d:  # a^T g
                ws = _mm32(af[0].transpose(1, 2), gf[0]).add_(_mm32(af[1].transpose(1, 2), gf[1]))
            else:  # g^T a
                ws = _mm32(gf[0].transpose(1, 2), af[0]).add_(_mm32(gf[1].transpose(1, 2), af[1]))
        if want_b:
            bs = (
                torch.einsum("n,knp->kp", cs, g2.sum(2, dtype=torch.float32))
                if scale_a
                else s32.sum((1, 2))
            )
        return ws, bs
    a2, g2 = a2.float(), g2.float()
    if scale_a:
        a2 = a2 * col
    else:
        g2 = g2 * col
    if want_w:
        af, gf = a2.reshape(k, -1, d), g2.reshape(k, -1, p)
        ws = torch.bmm(af.transpose(1, 2), gf) if conv1d else torch.bmm(gf.transpose(1, 2), af)
    if want_b:
        bs = torch.einsum("n,knp->kp", cs, g2.sum(2)) if scale_a else g2.sum((1, 2))
    return ws, bs


def _linear_clipped_sums(
    layer: nn.Module,
    a: torch.Tensor,
    g: torch.Tensor,
    cs: torch.Tensor,
    pid: set[int],
    lowp_gemm: bool | None = None,
) -> dict[nn.Parameter, torch.Tensor]:
    """Book-keeping's clipped sum of one linear or HF ``Conv1D`` layer, one matmul and no per-sample gradients:
    ``sum_i c_i g_i^T a_i`` (``nn.Linear``'s ``p x d`` weight; its transpose ``a^T diag(c) g`` for ``Conv1D``'s
    ``d x p``) and the bias ``sum_i c_i sum_t g_it`` (:func:`_clipped_wb` with one layer), cast to the parameters'
    dtype."""
    w, b = layer.weight, layer.bias
    want_b = b is not None and id(b) in pid
    ws, bs = _clipped_wb(
        a.unsqueeze(0),
        g.unsqueeze(0),
        cs,
        conv1d=is_conv1d(layer),
        want_w=id(w) in pid,
        want_b=want_b,
        lowp_gemm=lowp_gemm,
    )
    out: dict[nn.Parameter, torch.Tensor] = {}
    if ws is not None:
        out[w] = ws[0].to(sum_dtype(w.dtype))
    if bs is not None:
        out[b] = bs[0].to(sum_dtype(b.dtype))
    return out


def _layernorm_chunks(
    layers: list[nn.LayerNorm], by_layer: dict, params: dict
) -> list[tuple[list[nn.LayerNorm], torch.Tensor | None, torch.Tensor | None]]:
    """Per-sample gradients of affine LayerNorms, those of equal input shape, dtypes, normalized shape, eps and
    trained parameters stacked (chunks of at most :data:`STACK_MAX_BYTES`): ``[(layers, w, b)]`` with
    ``w_ji = sum_t g_jit * xhat_jit`` and ``b_ji = sum_t g_jit`` (``k x n x`` normalized shape, fp32; ``None`` where
    that parameter is frozen or absent: ``bias=False``), ``xhat`` the normalised input (opacus' rule, without its
    per-layer round trip; opacus' own fails on ``bias=False``)."""
    buckets: dict[tuple, list] = {}
    for m in layers:
        x, g = by_layer[m][0][0], by_layer[m][1]
        pid = {id(q) for q in params[m]}
        sig = (
            tuple(x.shape),
            x.dtype,
            tuple(g.shape),
            g.dtype,
            tuple(m.normalized_shape),
            m.eps,
            id(m.weight) in pid,
            m.bias is not None and id(m.bias) in pid,
        )
        buckets.setdefault(sig, []).append(m)
    out = []
    for (*_, want_w, want_b), bucket in buckets.items():
        x, g = by_layer[bucket[0]][0][0], by_layer[bucket[0]][1]
        each = x.numel() * x.element_size() + g.numel() * g.element_size()
        per = max(1, int(STACK_MAX_BYTES // max(each, 1)))
        for i in range(0, len(bucket), per):
            mods = bucket[i : i + per]
            m = mods[0]
            xs = torch.stack([by_layer[q][0][0] for q in mods]).float()
            g32 = torch.stack([by_layer[q][1] for q in mods]).float()
            xhat = nn.functional.layer_norm(xs, m.normalized_shape, eps=m.eps)
            dims = tuple(range(2, g32.dim() - len(m.normalized_shape)))  # the token axes
            gw, gb = g32 * xhat, g32
            if dims:
                gw, gb = gw.sum(dims), gb.sum(dims)
            out.append((mods, gw if want_w else None, gb if want_b else None))
    return out


def _linear_sq_norms(
    layer: nn.Linear, a: torch.Tensor, g: torch.Tensor, grams: dict | None = None
) -> torch.Tensor:
    """Squared per-sample gradient norm of a linear layer (weight + bias), the cheaper of the ghost norm
    ``<a a^T, g g^T>`` (cost ~ T^2 (d + p)) and the instantiated per-sample gradient (~ T d p) per layer, as in
    FastDP's mixed ghost norm; the bias norm is ``||sum_t g_t||^2`` (opacus recomputes ``g g^T`` for it).
    ``grams`` caches ``a a^T`` across layers with the same input. Used when every parameter of the layer is
    trained."""
    # norms in fp32 whatever the activations' dtype (bf16 autocast: issue #29): low-precision CUDA operands
    # stay in their dtype for the matmuls (exact products, fp32 accumulation: _mm32), ``a`` cast to ``g``'s
    # dtype as autocast's forward did
    if (
        g.dim() == 2
    ):  # one token per example (BERT's pooler): a cast as autocast's forward did, as in the sums
        if g.dtype in _LOWP:
            a = a.to(g.dtype)
        g, a = g.float(), a.float()
        sq = (g * g).sum(1) * (a * a).sum(1)
        if layer.bias is not None:
            sq = sq + (g * g).sum(1)
        return sq
    n = g.shape[0]
    op = g.dtype if g.dtype in _LOWP else torch.float32  # the matmuls' operand dtype
    g = g.to(op)
    kept_a = a  # the book-kept input: the Gram cache's key (reshape may copy)
    a, g = a.reshape(n, -1, a.shape[-1]), g.reshape(n, -1, g.shape[-1])
    t = g.shape[1]
    d, p = a.shape[-1], g.shape[-1]
    # each norm an upper bound in floating point (a rounding margin for terms that can cancel: .rounding)
    if t * (d + p) <= d * p:
        # the Gram cache is keyed by the book-kept ``a`` itself (cast inside): see _gram
        sq = ghost_sq_norms(_mm32(g, g.transpose(1, 2)), _gram(a, grams, op, kept_a), d, p)
    else:
        a_op = a.to(op)
        sq = instantiated_sq_norms(_mm32(g.transpose(1, 2), a_op), g, a_op)
    if layer.bias is not None:
        sq = sq + sum_sq_norms(g.sum(1, dtype=torch.float32), g)
    return sq


#: bytes of book-kept inputs and output gradients stacked into one batched pass (a transient copy)
STACK_MAX_BYTES = 256 * 2**20


def _group_g_width(ms: list[nn.Module]) -> int:
    return sum(int(m.weight.shape[1] if is_conv1d(m) else m.weight.shape[0]) for m in ms)


def _stack_chunks(groups: list[list[nn.Module]], by_layer: dict) -> list[list[list[nn.Module]]]:
    """``groups`` (layers reading one input) bucketed by equal shapes, dtypes, bias and kind, in order, each bucket
    cut into chunks of at most :data:`STACK_MAX_BYTES` of inputs + output gradients."""
    buckets: dict[tuple, list[list]] = {}
    for ms in groups:
        a, g = by_layer[ms[0]][0][0], by_layer[ms[0]][1]
        sig = (
            tuple(a.shape),
            a.dtype,
            tuple(g.shape[:-1]),
            _group_g_width(ms),
            g.dtype,
            ms[0].bias is not None,
            is_conv1d(ms[0]),
            ms[0].weight.dtype,
        )
        buckets.setdefault(sig, []).append(ms)
    chunks: list[list[list[nn.Module]]] = []
    for bucket in buckets.values():
        a, g = by_layer[bucket[0][0]][0][0], by_layer[bucket[0][0]][1]
        each = (
            a.numel() * a.element_size()
            + g[..., :1].numel() * _group_g_width(bucket[0]) * g.element_size()
        )
        per = max(1, int(STACK_MAX_BYTES // max(each, 1)))
        chunks.extend(bucket[i : i + per] for i in range(0, len(bucket), per))
    return chunks


def _stacked(chunk: list[list[nn.Module]], by_layer: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a, g)`` of a chunk's groups stacked on a new first dimension (``k x n x ...``); each group's ``g`` is its
    members' output gradients side by side; ``a`` in ``g``'s dtype under autocast (what the forward multiplied)."""
    gs = [BookKeeping.store_of(ms, by_layer)[1] for ms in chunk]
    cast = gs[0].dtype if gs[0].dtype in _LOWP else None
    a = torch.stack([by_layer[ms[0]][0][0].to(cast or by_layer[ms[0]][0][0].dtype) for ms in chunk])
    return a, torch.stack(gs)


class BookKeeping:
    """Hooks that book-keep ``(a, g)`` per trainable layer and the BK clipped-sum computation.

    ``remove()`` detaches the hooks and restores ``requires_grad``."""

    def __init__(self, model: nn.Module, max_grad_norm: float) -> None:
        self.model = model
        self.max_grad_norm = max_grad_norm
        register_for_model(model)
        grad_s, _ = _samplers()
        self.modules = _trainable_modules(model)
        bad = [f"{n} ({type(m).__name__})" for n, m in self.modules if type(m) not in grad_s]
        if bad:
            raise InvalidArgument(
                f"grad_sample_mode='bookkeeping': layers without an opacus grad sampler: {bad}; "
                "use grad_sample_mode='hooks'"
            )
        self.params = {
            m: [p for p in m.parameters(recurse=False) if p.requires_grad] for _, m in self.modules
        }
        owners: dict[int, list[str]] = {}
        for n, m in self.modules:
            for p in self.params[m]:
                owners.setdefault(id(p), []).append(n)
        shared = [ns for ns in owners.values() if len(ns) > 1]
        # per-layer norms would count a shared weight's parts apart (||g1||^2 + ||g2||^2, not ||g1 + g2||^2) and
        # the second layer's sum would overwrite the first's (the engine unties tied weights before BK)
        if shared:
            raise InvalidArgument(
                f"grad_sample_mode='bookkeeping': trainable weights shared by layers {shared}; untie them "
                "(tied_embeddings='untie') or use grad_sample_mode='hooks'"
            )
        #: layer -> [[inputs, output gradient (None until the backward), the inputs' versions at the forward,
        #: whether an embedding's ids were built inside the model]]
        self.store: dict[nn.Module, list] = {}
        #: storages of the tensors passed to the model in this step (its batch): an embedding's ids must be one
        self.batch_storages: set[int] = set()
        self.names = {m: n for n, m in self.modules}
        self.warned: set[str] = set()  # layers already named in the not-called warning
        self.handles = []
        for p in (p for ps in self.params.values() for p in ps):
            p.requires_grad_(
                False
            )  # no weight gradients in autograd: BK computes the clipped sums itself
        self.handles.append(model.register_forward_pre_hook(self._model_inputs, with_kwargs=True))
        for _, m in self.modules:
            self.handles.append(m.register_forward_hook(self._forward_hook))

    def _model_inputs(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Records the storages of the model's tensor inputs (after the pre-hooks registered before this one, e.g.
        the engine's per-row position ids)."""
        if not torch.is_grad_enabled():
            return
        todo, depth = [(x, 0) for x in (*args, *kwargs.values())], 0
        while (
            todo
        ):  # tensors, also inside (nested) lists, tuples and dicts: model(batch) with a dict batch
            x, depth = todo.pop()
            if isinstance(x, torch.Tensor):
                self.batch_storages.add(x.untyped_storage().data_ptr())
            elif isinstance(x, (list, tuple, dict)) and depth < 4:
                todo.extend((y, depth + 1) for y in (x.values() if isinstance(x, dict) else x))

    def _forward_hook(self, module: nn.Module, inputs: tuple, output: Any) -> Any:
        if not torch.is_grad_enabled():
            return None
        if not isinstance(output, torch.Tensor):
            raise InvalidArgument(
                f"grad_sample_mode='bookkeeping': {type(module).__name__} returned "
                f"{type(output).__name__}, not a tensor"
            )
        if not output.requires_grad:  # the first trainable layer (e.g. the embedding of token ids)
            output = output.detach().requires_grad_(True)
        acts = [x.detach() for x in inputs if isinstance(x, torch.Tensor)]
        # ids built inside the model (nanoGPT's wpe(torch.arange(T)), T5's relative-position buckets) have no batch
        # axis: the output is broadcast over the batch and its output gradient is the batch's sum; when its first
        # dimension happens to equal the batch size nothing else notices, and every example's gradient in that
        # table escapes its own clip factor (measured: one example's clipped gradient at 2.0 C with B = T = 4)
        internal = (
            type(module) is nn.Embedding
            and bool(acts)
            and acts[0].untyped_storage().data_ptr() not in self.batch_storages
        )
        # the inputs' versions: the layer's weight does not require grad, so autograd does not save (nor guard) its
        # input; an in-place change after this point would go unnoticed, the norm and sum reading the changed values
        entry = [acts, None, [x._version for x in acts], internal]
        self.store.setdefault(module, []).append(
            entry
        )  # forwards without a backward leave g=None (ignored)

        def grad_hook(g: torch.Tensor) -> None:
            entry[1] = g.detach() if entry[1] is None else entry[1] + g.detach()

        output.register_hook(grad_hook)
        return output

    def clear(self) -> None:
        self.store.clear()
        self.batch_storages.clear()

    @staticmethod
    def store_of(ms: list[nn.Module], by: dict) -> tuple[list, torch.Tensor]:
        """The book-kept ``(inputs, g)`` of a group of layers reading one input (``by``: layer -> entry): ``g`` of
        every member concatenated along the features (the member order of ``ms``)."""
        acts = by[ms[0]][0]
        if len(ms) == 1:
            return acts, by[ms[0]][1]
        return acts, torch.cat([by[m][1] for m in ms], dim=-1)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        for p in (p for ps in self.params.values() for p in ps):
            p.requires_grad_(True)
        self.clear()

    # -- the clipped sum -----------------------------------------------------------------------
    @torch.no_grad()
    def clipped_sum(
        self, loss_reduction: str = "mean"
    ) -> tuple[dict[nn.Parameter, torch.Tensor], torch.Tensor]:
        """``({param: sum_i c_i grad_i}, per-sample norms)`` from the book-kept ``(a, g)``; zero sums (and no
        norms) when nothing was book-kept (an empty Poisson batch).

        Runs with autocast off: ``optimizer.step()`` called inside a ``torch.autocast`` region (a common training
        loop) ran the norms' and sums' fp32 matmuls in bf16, in different roundings: a clipped gradient up to
        1.2e-3 above C on a tiny Llama (tests/training/test_bookkeeping_review.py)."""
        kinds = {"cpu"} | {p.device.type for ps in self.params.values() for p in ps}
        with contextlib.ExitStack() as stack:
            for kind in sorted(kinds):
                if torch.amp.is_autocast_available(kind):
                    stack.enter_context(torch.autocast(kind, enabled=False))
            return self._clipped_sum(loss_reduction)

    def _clipped_sum(
        self, loss_reduction: str
    ) -> tuple[dict[nn.Parameter, torch.Tensor], torch.Tensor]:
        grad_s, norm_s = _samplers()
        entries = []
        built_inside: list[tuple[nn.Module, torch.Tensor]] = []
        for m, es in self.store.items():
            es = [e for e in es if e[1] is not None]
            if len(es) > 1:
                self.clear()
                raise InvalidArgument(
                    f"grad_sample_mode='bookkeeping': layer {type(m).__name__} was used {len(es)} "
                    "times in the backward pass (shared weights or a reused layer); use "
                    "grad_sample_mode='hooks'"
                )
            if es:
                acts, g, versions, internal = es[0]
                if internal:
                    built_inside.append((m, acts[0]))
                if [x._version for x in acts] != versions:
                    self.clear()
                    raise InvalidArgument(
                        f"grad_sample_mode='bookkeeping': the input of layer {type(m).__name__} was changed in "
                        "place after the layer read it (its per-sample gradient would be wrong); use an "
                        "out-of-place op or grad_sample_mode='hooks'"
                    )
                entries.append((m, (acts, g)))
        n = 0
        for _m, (_acts, g) in entries:
            n = g.shape[0]
            break
        # an embedding of ids built inside the model: fine for one example, or ids expanded along a batch axis (HF
        # BERT's token-type ids); anything else may be broadcast over the batch (see _forward_hook)
        for m, ids in built_inside:
            if n > 1 and not (ids.dim() >= 2 and ids.shape[0] == n and ids.stride(0) == 0):
                self.clear()
                raise InvalidArgument(
                    f"grad_sample_mode='bookkeeping': embedding {self.names[m]!r} reads ids built inside the "
                    f"model (shape {tuple(ids.shape)}), not passed to it: e.g. torch.arange(T) position ids "
                    "broadcast over the batch, whose per-sample gradients cannot be told apart (an example could "
                    "escape clipping); pass the ids to the model with a batch axis (batch x tokens, e.g. "
                    "position_ids=...), expand them to one (ids.expand(batch, -1)), or freeze the layer"
                )
        bad = [type(m).__name__ for m, (_a, g) in entries if g.shape[0] != n]
        if bad:
            self.clear()
            raise InvalidArgument(
                f"grad_sample_mode='bookkeeping': the output gradients of {bad} do not have the batch ({n}) as "
                "their first dimension (per-sample norms need batch-first layers); use grad_sample_mode='hooks'"
            )
        if n == 0:
            self.clear()
            return {
                p: torch.zeros_like(p, dtype=sum_dtype(p.dtype))
                for ps in self.params.values()
                for p in ps
            }, torch.zeros(0)
        sums: dict[nn.Parameter, torch.Tensor] = {}
        scale = (
            float(n) if loss_reduction == "mean" else 1.0
        )  # backprops of the mean loss are grad_i / n
        sq = None
        grams: dict = {}  # a a^T per input tensor, shared by the layers that read it
        kept: dict[
            nn.Module, dict
        ] = {}  # per-sample gradients of small generic layers (unscaled g)
        # the norm and grad samplers are linear in g: norms of the unscaled g times ``scale``, and the scale folded
        # into the clip factors (one pass over every output gradient less); norms and clipping in fp32 (bf16
        # autocast: issue #29 item 3)
        # linear layers whose parameters are all trained, grouped by the input they read (BERT's query / key /
        # value, Llama's q / k / v and gate / up): one group's output gradients concatenated along the features
        # are one wider layer's, so its norms (sum over the layers) and clipped sums (rows of one GEMM) take one
        # pass instead of one per layer
        groups: dict[tuple, list] = {}
        for m, e in entries:
            acts, g = e
            if (type(m) is nn.Linear or is_conv1d(m)) and len(self.params[m]) == len(
                [q for q in m.parameters(recurse=False)]
            ):
                key = (
                    _tensor_key(acts[0]),
                    g.dtype,
                    tuple(g.shape[:-1]),
                    m.bias is not None,
                    is_conv1d(m),
                )
                groups.setdefault(key, []).append(m)
        linear_groups = list(groups.values())
        by_layer = dict(entries)
        grouped = {m for ms in linear_groups for m in ms}
        # groups of equal shapes (a transformer's repeated blocks) stacked: one batched pass for up to
        # STACK_MAX_BYTES of inputs and output gradients (the step is bound by kernel launches on a GPU)
        chunks = _stack_chunks(linear_groups, by_layer)
        for chunk in chunks:  # ||a^T g|| = ||g^T a||: the same norm for Conv1D's transposed weight
            if len(chunk) == 1:
                acts, g = self.store_of(chunk[0], by_layer)
                v = _linear_sq_norms(chunk[0][0], acts[0], g, grams)
            else:
                a, g = _stacked(chunk, by_layer)
                v = _linear_sq_norms(chunk[0][0], a.flatten(0, 1), g.flatten(0, 1), None)
                v = v.view(len(chunk), n).sum(0)
            v = v.to(torch.float32)
            sq = v if sq is None else sq + v
        # affine LayerNorms by their direct rule, those of equal shapes stacked (one pass for a model's LayerNorms)
        # (weight and bias, either frozen, or bias=False: every parameter the layer trains, counted once)
        ln_layers = [m for m, _ in entries if type(m) is nn.LayerNorm and m.elementwise_affine]
        ln_chunks = _layernorm_chunks(ln_layers, by_layer, self.params)
        for _mods, gw, gb in ln_chunks:
            for x in (gw, gb):
                if x is not None:
                    v = x.flatten(2).pow(2).sum(2).sum(0)  # k x n -> n
                    sq = v if sq is None else sq + v
        ln_layers = set(ln_layers)
        for m, e in entries:
            acts, g = e
            if m in grouped:
                continue
            if m in ln_layers:
                continue
            if (
                type(m) is nn.Embedding
                and self.params[m] == [m.weight]
                and acts[0].reshape(n, -1).shape[1] <= EMBEDDING_GHOST_MAX_T
            ):
                v = _embedding_sq_norms(acts[0], g)
                sq = v if sq is None else sq + v
                continue
            for p in self.params[m]:
                p.requires_grad_(True)  # opacus' samplers skip parameters that do not require grad
            try:
                g32 = g.float()
                if type(m) in norm_s:
                    norms = norm_s[type(m)](m, acts, g32)
                else:
                    per = grad_s[type(m)](m, acts, g32)
                    norms = {p: gs.reshape(n, -1).float().norm(2, dim=1) for p, gs in per.items()}
                    if sum(gs.numel() for gs in per.values()) <= 4 * g.numel():
                        # small per-sample gradients (normalisation layers: n x d): kept for the clipped sum
                        # instead of running the grad sampler (LayerNorm's recomputes the norm) a second time
                        kept[m] = per
            finally:
                for p in self.params[m]:
                    p.requires_grad_(False)
            for p in self.params[m]:
                v = norms[p].reshape(n).to(torch.float32) ** 2
                sq = v if sq is None else sq + v
        grams.clear()
        per_sample = sq.sqrt() * scale
        # clip factors in fp32, applied to fp32 output gradients; sums cast to the parameters' dtype at the end
        c = (self.max_grad_norm / (per_sample + 1e-6)).clamp(max=1.0)
        cs = c * scale
        for chunk in chunks:
            m0 = chunk[0][0]
            conv1d = is_conv1d(m0)
            if len(chunk) == 1:
                acts, g = self.store_of(chunk[0], by_layer)
                a, g = acts[0].unsqueeze(0), g.unsqueeze(0)
            else:
                a, g = _stacked(chunk, by_layer)
            ws, bs = _clipped_wb(a, g, cs, conv1d=conv1d, want_w=True, want_b=m0.bias is not None)
            for j, ms in enumerate(chunk):
                # a group is one wider layer: its members' weight / bias rows (Conv1D: columns) split back
                widths = [m.weight.shape[1] if conv1d else m.weight.shape[0] for m in ms]
                wsum = ws[j].split(widths, dim=1 if conv1d else 0)
                bsum = bs[j].split(widths) if bs is not None else [None] * len(ms)
                for m, w, b in zip(ms, wsum, bsum, strict=True):
                    sums[m.weight] = w.to(sum_dtype(m.weight.dtype)).contiguous()
                    if b is not None:
                        sums[m.bias] = b.to(sum_dtype(m.bias.dtype)).contiguous()
        for mods, gw, gb in ln_chunks:  # sum_i c_i grad_i of the per-sample gradients (k x ...)
            for x, name in ((gw, "weight"), (gb, "bias")):
                if x is not None:
                    s = torch.tensordot(cs, x, dims=([0], [1]))
                    for j, m in enumerate(mods):
                        p = getattr(m, name)
                        sums[p] = s[j].to(sum_dtype(p.dtype))
        for m, (acts, g) in entries:
            ps = self.params[m]
            pid = {id(q) for q in ps}
            if m in grouped or m in ln_layers:
                continue
            if (
                m in kept
            ):  # sum_i c_i grad_i from the per-sample gradients of the norm pass (linear in g)
                for p in ps:
                    sums[p] = torch.tensordot(cs, kept[m][p].float(), dims=([0], [0])).to(
                        sum_dtype(p.dtype)
                    )
                continue
            # never in place: autograd hands one gradient tensor to several layers (the summed BERT embeddings)
            cg = g.float() * cs.view(-1, *([1] * (g.dim() - 1)))
            if type(m) is nn.Embedding and pid == {id(m.weight)} and not m.max_norm:
                ids = acts[0].reshape(-1)
                sums[m.weight] = torch.zeros_like(
                    m.weight, dtype=sum_dtype(m.weight.dtype)
                ).index_add_(0, ids, cg.reshape(-1, cg.shape[-1]).to(sum_dtype(m.weight.dtype)))
                # (padding_idx rows are not zeroed: opacus' per-sample embedding gradients include them too)
            else:
                for p in ps:
                    p.requires_grad_(True)
                try:
                    gs = grad_s[type(m)](m, acts, cg)
                finally:
                    for p in ps:
                        p.requires_grad_(False)
                for p in ps:
                    sums[p] = gs[p].sum(0).to(sum_dtype(p.dtype))
        idle = [self.names[m] for m, ps in self.params.items() if ps and m not in by_layer]
        for p in (p for ps in self.params.values() for p in ps):
            if p not in sums:  # a trainable layer that took no part in this forward pass
                sums[p] = torch.zeros_like(p, dtype=sum_dtype(p.dtype))
        new = sorted(set(idle) - self.warned)
        if new:  # once per layer: a skipped expert is fine, a weight read directly is a silent zero gradient
            self.warned.update(new)
            warnings.warn(
                f"grad_sample_mode='bookkeeping': trainable layers {new} were not called in this step: their "
                "weights get noise only. If another module reads such a weight directly (not through the layer's "
                "forward, e.g. DeBERTa's rel_embeddings.weight), BK cannot see that gradient: freeze the layer or "
                "use grad_sample_mode='hooks'",
                RuntimeWarning,
                stacklevel=3,
            )
        self.clear()
        return sums, per_sample


def attach(gsm: nn.Module, model: nn.Module, optimizer: Any, max_grad_norm: float) -> BookKeeping:
    """Book-keeping on ``model`` with opacus' DP optimizer (created over a ``no_op`` GradSampleModule ``gsm``):
    ``optimizer.pre_step`` computes the clipped sum (instead of reading per-sample gradients), then noise,
    scaling, accounting and the budget guard run as in opacus."""
    trained = list(
        optimizer.params
    )  # before BK turns requires_grad off (opacus lists trainable params only)
    bk = BookKeeping(model, max_grad_norm)
    cls = type(optimizer)
    optimizer.__class__ = type(
        f"BookKeeping{cls.__name__}", (cls,), {"params": property(lambda self: trained)}
    )
    if isinstance(gsm, nn.Module) and gsm is not model:
        gsm.forward = lambda *args, **kwargs: model(
            *args, **kwargs
        )  # opacus' no_op wrapper takes one positional

    def pre_step(closure: Any = None) -> bool:
        sums, _norms = bk.clipped_sum(optimizer.loss_reduction)
        for p in optimizer.params:
            p.grad_sample = None
            if p not in sums:
                raise InvalidArgument(
                    "grad_sample_mode='bookkeeping': the optimizer holds a parameter outside the "
                    "model's trainable layers"
                )
            # physical batches of one logical batch (BatchMemoryManager) accumulate; zero_grad resets
            p.summed_grad = (
                sums[p] if getattr(p, "summed_grad", None) is None else p.summed_grad + sums[p]
            )
        if optimizer._check_skip_next_step():
            optimizer._is_last_step_skipped = True
            return False
        optimizer.add_noise()
        if (
            optimizer.loss_reduction == "mean"
        ):  # scale_grad without opacus' per-sample-gradient count,
            # one multi-tensor division instead of one kernel per parameter (the same quotients on the CPU; engine._lean_scale)
            torch._foreach_div_(
                [p.grad for p in optimizer.params], float(optimizer.expected_batch_size)
            )
        if optimizer.step_hook:
            optimizer.step_hook(optimizer)
        optimizer._is_last_step_skipped = False
        return True

    orig_zero_grad = optimizer.zero_grad

    def zero_grad(set_to_none: bool = False) -> None:
        bk.clear()
        orig_zero_grad(set_to_none)

    optimizer.pre_step = pre_step
    optimizer.zero_grad = zero_grad
    return bk
