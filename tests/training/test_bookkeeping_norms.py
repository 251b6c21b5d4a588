"""Book-keeping's per-sample norms and clipped sums against per-sample gradients instantiated by a loop: the ghost
norm of linear layers (with the shared Gram matrix of layers that read one input), the embedding's ghost norm
(no torch.unique), the clipped sums with the clip factors folded into the narrower of a / g, and the in-place noise
that draws what opacus draws."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from opacus.grad_sample import GradSampleModule, GradSampleModuleFastGradientClipping
from opacus.grad_sample.utils import register_grad_sampler
from opacus.optimizers.optimizer import _generate_noise
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from transformers.pytorch_utils import Conv1D

from privnlp.mechanisms.training import bookkeeping as bkm
from privnlp.mechanisms.training import make_private, samplers
from privnlp.mechanisms.training.bookkeeping import (
    _embedding_sq_norms,
    _gram,
    _linear_clipped_sums,
    _linear_sq_norms,
)
from privnlp.mechanisms.training.devices import noised_sum
from privnlp.mechanisms.training.dp_sgd import per_sample_classification_loss
from privnlp.models import tiny_bert_classifier
from privnlp.models.builders import tiny_gpt2

N, T = 5, 7


def _per_sample_linear(layer, a, g):
    """Per-example gradients of a linear layer, from autograd one example at a time (the definition)."""
    out = []
    for i in range(a.shape[0]):
        layer.zero_grad(set_to_none=True)
        (layer(a[i]) * g[i]).sum().backward()
        out.append({n: p.grad.detach().clone() for n, p in layer.named_parameters()})
    return out


@pytest.mark.parametrize(
    "d,p", [(24, 24), (3, 4)]
)  # ghost (T(d+p) <= dp) and instantiated branches
def test_linear_norms_both_branches_equal_the_loop(d, p):
    g0 = torch.Generator().manual_seed(0)
    layer = nn.Linear(d, p)
    a, g = torch.randn(N, T, d, generator=g0), torch.randn(N, T, p, generator=g0)
    ref = torch.stack(
        [
            sum((v.double() ** 2).sum() for v in gi.values())
            for gi in _per_sample_linear(copy.deepcopy(layer).double(), a.double(), g.double())
        ]
    )

    def upper_bound(
        x,
    ):  # the norms are upper bounds in floating point (.rounding), within 5e-5 of the true one
        r = x.double() / ref
        assert (r >= 1).all() and (r <= 1 + 5e-5).all(), r

    upper_bound(_linear_sq_norms(layer, a, g))
    # the Gram cache: a second layer reading the same input gets the same norms from the cached a a^T
    grams: dict = {}
    first = _linear_sq_norms(layer, a, g, grams)
    second = _linear_sq_norms(layer, a, g, grams)
    upper_bound(first)
    upper_bound(second)
    assert len(grams) == (1 if T * (d + p) <= d * p else 0)


def test_gram_cache_is_keyed_by_storage_and_version():
    x = torch.randn(2, 3, 4)
    cache: dict = {}
    g1 = _gram(x, cache)
    assert _gram(x.detach(), cache) is g1  # the same memory: served from the cache
    y = x.clone()
    assert _gram(y, cache) is not g1  # another tensor, equal values: computed again
    x.mul_(2)  # modified in place: its version moves, the stale Gram is not served
    torch.testing.assert_close(_gram(x, cache), 4 * g1)


def test_gram_cache_never_serves_a_stale_gram_for_an_autocast_input():
    """Under autocast a layer reads an fp32 input (LayerNorm's output) while its output gradient is bf16: the
    norm casts the input to bf16. Keyed by that temporary copy, the Gram cache served the first layer's Gram to
    the second (the freed copy's address is reused): norms off by ~0.2%, clipping above C (seen in a bf16 test).
    The key is the book-kept input itself."""
    g0 = torch.Generator().manual_seed(4)
    layer = nn.Linear(24, 24)
    grams: dict = {}
    kept = []  # inputs of equal shape, different values, all alive (book-kept) as in a real step
    for _ in range(
        32
    ):  # a freed copy's address comes back within a few allocations (malloc reuses it)
        a = torch.randn(N, T, 24, generator=g0)
        g = torch.randn(N, T, 24, generator=g0).bfloat16()
        kept.append(a)
        got = _linear_sq_norms(layer, a, g, grams)
        want = _linear_sq_norms(layer, a, g, None)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("d,p", [(6, 40), (40, 6)])  # c folded into a (p > d) and into g
@pytest.mark.parametrize("conv1d", [False, True])
def test_linear_clipped_sums_equal_the_loop(d, p, conv1d):
    g0 = torch.Generator().manual_seed(1)
    layer = nn.Linear(d, p)
    a, g = torch.randn(N, T, d, generator=g0), torch.randn(N, T, p, generator=g0)
    c = torch.rand(N, generator=g0)
    per = _per_sample_linear(layer, a, g)
    ref_w = sum(ci * gi["weight"] for ci, gi in zip(c, per))
    ref_b = sum(ci * gi["bias"] for ci, gi in zip(c, per))
    if conv1d:  # an HF Conv1D holds the transposed weight (d x p)
        conv = Conv1D(p, d)
        out = _linear_clipped_sums(conv, a, g, c, {id(conv.weight), id(conv.bias)})
        torch.testing.assert_close(out[conv.weight], ref_w.t(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[conv.bias], ref_b, rtol=1e-5, atol=1e-5)
    else:
        out = _linear_clipped_sums(layer, a, g, c, {id(layer.weight), id(layer.bias)})
        torch.testing.assert_close(out[layer.weight], ref_w, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[layer.bias], ref_b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d,p", [(6, 40), (40, 6)])
@pytest.mark.parametrize("conv1d", [False, True])
def test_bf16_clipped_sums_in_low_precision_gemms_match_the_loop_and_bound_each_example(
    d, p, conv1d
):
    """The CUDA autocast path (``lowp_gemm``: bf16 operands, the clip-scaled one as hi + lo, fp32 accumulation)
    run on CPU: equal to the fp32 loop on the bf16 values within 2^-14, and each example's contribution,
    clipped to C from the norms book-keeping computes, stays within C (1 + 1e-4)."""
    g0 = torch.Generator().manual_seed(3)
    layer = nn.Linear(d, p)
    a = torch.randn(N, T, d, generator=g0).bfloat16()
    g = (torch.randn(N, T, p, generator=g0) * torch.rand(N, 1, 1, generator=g0) * 10).bfloat16()
    mod = Conv1D(p, d) if conv1d else layer
    pid = {id(mod.weight), id(mod.bias)}
    per = _per_sample_linear(layer, a.float(), g.float())
    c = torch.rand(N, generator=g0)
    out = _linear_clipped_sums(mod, a, g, c, pid, lowp_gemm=True)
    ref_w = sum(ci * gi["weight"] for ci, gi in zip(c, per))
    ref_b = sum(ci * gi["bias"] for ci, gi in zip(c, per))
    # elementwise error bound: 2^-15 of sum_i c_i sum_t |g_it| |a_it| (hi + lo keeps 16 bits of each term)
    mag = torch.einsum("n,ntp,ntd->pd", c, g.float().abs(), a.float().abs())
    err = (out[mod.weight] - (ref_w.t() if conv1d else ref_w)).abs()
    assert (err <= 2**-15 * (mag.t() if conv1d else mag) + 1e-6).all(), float(err.max())
    torch.testing.assert_close(out[mod.bias], ref_b, rtol=1e-5, atol=1e-5)
    clip = 0.5
    norms = _linear_sq_norms(layer, a, g).sqrt()
    cs = (clip / (norms + 1e-6)).clamp(max=1.0)
    assert (cs < 1).all()  # clipping active for every example
    for i in range(N):
        one = torch.zeros(N)
        one[i] = cs[i]
        s = _linear_clipped_sums(mod, a, g, one, pid, lowp_gemm=True)
        norm = torch.sqrt(sum((v.double() ** 2).sum() for v in s.values()))
        assert clip * (1 - 1e-4) <= norm <= clip * (1 + 1e-4), (i, float(norm))


def test_embedding_ghost_norm_equals_the_loop_and_opacus():
    g0 = torch.Generator().manual_seed(2)
    emb = nn.Embedding(9, 5, padding_idx=0)
    ids = torch.randint(0, 9, (N, T), generator=g0)
    ids[0, :3] = ids[0, 3]  # repeated tokens in one example: their gradients add up before the norm
    ids[1] = 4  # one token only (a token-type embedding)
    g = torch.randn(N, T, 5, generator=g0)
    ref = []
    for i in range(N):  # the per-sample gradient, padding row included (opacus' convention)
        w = torch.zeros(9, 5).index_add_(0, ids[i], g[i])
        ref.append((w**2).sum())
    ref = torch.stack(ref)
    torch.testing.assert_close(_embedding_sq_norms(ids, g), ref, rtol=1e-5, atol=1e-6)
    emb.weight.requires_grad_(True)
    theirs = GradSampleModuleFastGradientClipping.NORM_SAMPLERS[nn.Embedding](emb, [ids], g)
    torch.testing.assert_close(
        _embedding_sq_norms(ids, g), theirs[emb.weight] ** 2, rtol=1e-5, atol=1e-6
    )


def _wide_bert(layers: int):
    """A tiny BERT wide enough for the ghost norm (T(d+p) <= dp with d = 64, T = 12), ``layers`` blocks."""
    model = tiny_bert_classifier(
        60,
        hidden_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        max_position_embeddings=16,
        seed=0,
    )
    model.train()
    return model


def _bert_batch():
    g0 = torch.Generator().manual_seed(0)
    return torch.randint(1, 60, (6, 12), generator=g0), torch.arange(6) % 2


def _wide_bert_step(private, mode: str, layers: int = 1):
    """One clipped step of :func:`_wide_bert` (``private``: the ``noiseless_private`` fixture): query / key / value
    share their input (one group, one Gram), the three embeddings take the embedding ghost norm."""
    model = _wide_bert(layers)
    ids, y = _bert_batch()
    ids[:, -2:] = 0
    pt = private(model, ids, y, batch_size=6, clip=0.05, mode=mode)
    torch.manual_seed(1)
    pt.optimizer.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        pt.loss(per_sample_classification_loss(pt.model(input_ids=ids).logits, y)).backward()
    pt.optimizer.step()
    out = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    pt.close()
    return out


def test_bookkeeping_ghost_paths_equal_hooks_on_a_wide_bert(noiseless_private):
    ref, bk = (_wide_bert_step(noiseless_private, m) for m in ("hooks", "bookkeeping"))
    assert set(ref) == set(bk) and len(ref) > 10
    for n in ref:
        torch.testing.assert_close(bk[n], ref[n], rtol=1e-4, atol=1e-6, msg=lambda m: f"{n}: {m}")


def test_stacked_layers_equal_hooks_and_the_layer_by_layer_pass(monkeypatch, noiseless_private):
    """Three BERT blocks: their q/k/v groups, attention outputs and feed-forward layers are stacked into batched
    passes (one per shape); the result equals hooks mode and the unstacked pass (STACK_MAX_BYTES = 0)."""
    ref, bk = (_wide_bert_step(noiseless_private, m, 3) for m in ("hooks", "bookkeeping"))
    monkeypatch.setattr(bkm, "STACK_MAX_BYTES", 0)
    one_by_one = _wide_bert_step(noiseless_private, "bookkeeping", 3)
    assert set(ref) == set(bk) == set(one_by_one) and len(ref) > 40
    for n in ref:
        torch.testing.assert_close(bk[n], ref[n], rtol=1e-4, atol=1e-6, msg=lambda m: f"{n}: {m}")
        torch.testing.assert_close(bk[n], one_by_one[n], rtol=1e-5, atol=1e-7)


def test_stack_chunks_bucket_equal_shapes_under_the_byte_cap(monkeypatch):
    model = _wide_bert(3)
    n, t, d = 4, 5, 64
    by_layer, groups = {}, []
    for layer in model.bert.encoder.layer:
        att = layer.attention.self
        a = torch.randn(n, t, d)
        qkv = [att.query, att.key, att.value]
        for m in qkv:
            by_layer[m] = ([a], torch.randn(n, t, d))
        groups.append(qkv)
        ffn = layer.intermediate.dense
        assert ffn.out_features == 2 * d  # (the byte arithmetic below)
        by_layer[ffn] = ([torch.randn(n, t, d)], torch.randn(n, t, ffn.out_features))
        groups.append([ffn])
    chunks = bkm._stack_chunks(groups, by_layer)
    # the q/k/v groups together, the feed-forward layers together
    assert [len(c) for c in chunks] == [3, 3]
    assert all(len({bkm._group_g_width(ms) for ms in c}) == 1 for c in chunks)
    # a cap of two q/k/v groups (input + three output gradients: 4 ntd each); an FFN group is 3 ntd
    each = n * t * d * 4 + n * t * 3 * d * 4
    monkeypatch.setattr(bkm, "STACK_MAX_BYTES", 2 * each)
    assert [len(c) for c in bkm._stack_chunks(groups, by_layer)] == [2, 1, 2, 1]


@pytest.mark.parametrize("lowp_gemm", [False, True])
def test_bf16_bert_bookkeeping_keeps_every_example_inside_the_bound(
    monkeypatch, lowp_gemm, noiseless_private
):
    """BERT under bf16 autocast, one example per step, sigma = 0: the applied gradient is that example's clipped
    gradient, and its norm stays within C (1 + 1e-4). BERT has what the decoders' test lacks: fp32 LayerNorm
    outputs read by bf16 matmuls (q/k/v grouped and stacked) and a one-token pooler; the pooler's norm once read
    the fp32 input while its sum read the bf16 copy: 1.7e-4 above C."""
    seen = []
    if lowp_gemm:
        real = bkm._clipped_wb

        def tensor_core_path(a, g, *args, **kw):
            seen.append(g.dtype)  # the bf16 output gradients reach the hi + lo GEMMs
            return real(a, g, *args, **kw, lowp_gemm=True)

        monkeypatch.setattr(bkm, "_clipped_wb", tensor_core_path)
    model = _wide_bert(3)
    ids, y = _bert_batch()
    clip = 0.01  # below every example's gradient norm: clipping always active
    pt = noiseless_private(model, ids, y, clip=clip, mode="bookkeeping")
    norms = []
    for x, yy in pt.data_loader:
        pt.optimizer.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = pt.model(input_ids=x).logits
            pt.loss(per_sample_classification_loss(logits.float(), yy)).backward()
        pt.optimizer.step()
        g = [p.grad.double() for p in pt.optimizer.params if p.grad is not None]
        norms.append(float(torch.sqrt(sum((v**2).sum() for v in g))))
    pt.close()
    assert len(norms) == 6
    assert max(norms) <= clip * (1 + 1e-4), norms
    assert min(norms) >= clip * 0.99
    assert not lowp_gemm or torch.bfloat16 in seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_noised_sum_draws_what_opacus_draws(dtype):
    summed = torch.randn(3, 4, generator=torch.Generator().manual_seed(3)).to(dtype)
    ours = noised_sum(summed, std=0.7, generator=torch.Generator().manual_seed(5))
    theirs = summed + _generate_noise(
        std=0.7, reference=summed, generator=torch.Generator().manual_seed(5)
    )
    assert ours.dtype == dtype and torch.equal(ours, theirs)  # bit for bit
    assert torch.equal(noised_sum(summed, std=0.0, generator=None), summed)
    # secure mode keeps opacus' own 2n-draw function
    sec = noised_sum(summed, std=0.7, generator=torch.Generator().manual_seed(5), secure_mode=True)
    ref = summed + _generate_noise(
        std=0.7, reference=summed, generator=torch.Generator().manual_seed(5), secure_mode=True
    )
    assert torch.equal(sec, ref)


def test_seeded_dp_step_is_unchanged_by_the_lean_noise():
    """A seeded step's noised gradient equals clipped sum + opacus' draw from the same seeded generator."""
    model = tiny_gpt2(30, n_layer=1, n_embd=8, n_head=2, n_positions=8, seed=0)
    ids = torch.randint(0, 30, (4, 6), generator=torch.Generator().manual_seed(0))
    dl = DataLoader(TensorDataset(ids), batch_size=4)
    pt = make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        dl,
        noise_multiplier=1.3,
        max_grad_norm=0.5,
        accountant="rdp",
        poisson_sampling=False,
        rng=11,
    )
    gen_state = pt.optimizer.generator.get_state()
    seen = {}
    orig = pt.optimizer.add_noise

    def spy():
        seen.update({id(p): p.summed_grad.clone() for p in pt.optimizer.params})
        orig()

    pt.optimizer.add_noise = spy
    pt.optimizer.zero_grad(set_to_none=True)
    logits = pt.model(input_ids=ids).logits
    per = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids, reduction="none").mean(1)
    with warnings.catch_warnings():  # opacus' hooks on a first layer fed token ids (benign)
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        pt.loss(per).backward()
    pt.optimizer.step()
    gen = torch.Generator().set_state(gen_state)
    for p in pt.optimizer.params:  # opacus' order of draws: one normal per parameter, in order
        expect = (
            seen[id(p)] + _generate_noise(std=1.3 * 0.5, reference=seen[id(p)], generator=gen)
        ) / pt.optimizer.expected_batch_size
        torch.testing.assert_close(p.grad, expect.view_as(p), rtol=0, atol=0)
    pt.close()


def _fresh_rmsnorm_class():
    class TestOnlyRMSNorm(nn.Module):  # a new class per call: nothing registered for it yet
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))
            self.variance_epsilon = 1e-6

        def forward(self, x):
            return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    return TestOnlyRMSNorm


def test_registration_adds_missing_rules_and_never_replaces_a_users_rule():
    registry = GradSampleModule.GRAD_SAMPLERS
    ours_cls, theirs_cls = _fresh_rmsnorm_class(), _fresh_rmsnorm_class()

    def users_rule(layer, activations, backprops):  # pragma: no cover - never called here
        return {}

    register_grad_sampler(theirs_cls)(users_rule)
    try:
        model = nn.Sequential(ours_cls(4), theirs_cls(4))
        assert samplers.register_for_model(model) == [
            "TestOnlyRMSNorm"
        ]  # only the class without a rule
        assert registry[ours_cls] is samplers.rmsnorm_grad_sample
        assert registry[theirs_cls] is users_rule  # the user's rule is kept
        assert samplers.register_for_model(model) == []  # idempotent
    finally:
        for c in (ours_cls, theirs_cls):
            registry.pop(c, None)
            samplers._REGISTERED.discard(c)
