"""Issue #29 items 2 and 3: book-keeping / ghost / hooks clipping for GPT-2 (HF Conv1D) and a Llama-style decoder
(nn.Linear, RMSNorm, rotary, grouped-query attention), tested against per-sample gradients computed by a loop;
`auto` picks book-keeping for them; bf16 autocast keeps every per-sample gradient inside the clipping bound."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from privnlp.mechanisms.training import bookkeeping as bkm
from privnlp.mechanisms.training import make_private
from privnlp.mechanisms.training.dp_sgd import choose_grad_sample_mode, per_sample_lm_loss
from privnlp.mechanisms.training.samplers import is_conv1d, is_rmsnorm
from privnlp.models import tiny_gpt2, tiny_llama

V, T, B = 40, 10, 6


def _gpt2(tied: bool = False):
    return tiny_gpt2(V, n_layer=2, n_embd=16, n_head=2, n_positions=16, tie_word_embeddings=tied)


def _llama(tied: bool = False):
    return tiny_llama(V, tie_word_embeddings=tied)  # GQA: 4 query heads share 2 key / value heads


BUILDERS = {"gpt2": _gpt2, "llama": _llama}


def _batch():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, V, (B, T), generator=g)


def _loop_reference(build, clip: float) -> dict[str, torch.Tensor]:
    """sum_i min(1, C/||g_i||) g_i with each g_i from its own backward pass (the definition)."""
    model = build()
    model.train()
    ids = _batch()
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = {n: torch.zeros_like(p, dtype=torch.float64) for n, p in params.items()}
    for i in range(B):
        model.zero_grad(set_to_none=True)
        x = ids[i : i + 1]
        per_sample_lm_loss(model(input_ids=x).logits, x).sum().backward()
        g = {
            n: (p.grad if p.grad is not None else torch.zeros_like(p)).double()
            for n, p in params.items()
        }
        norm = torch.sqrt(sum((v**2).sum() for v in g.values()))
        c = min(1.0, clip / (float(norm) + 1e-6))
        for n in total:
            total[n] += c * g[n]
    return total


def _dp_step(build, mode: str, clip: float, autocast: bool = False):
    model = build()
    model.train()
    ids = _batch()
    dl = DataLoader(TensorDataset(ids), batch_size=B)
    pt = make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        dl,
        noise_multiplier=0.0,
        max_grad_norm=clip,
        accountant="rdp",
        grad_sample_mode=mode,
        poisson_sampling=False,
        rng=0,
    )
    pt.optimizer.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = pt.model(input_ids=ids).logits
        pt.loss(per_sample_lm_loss(logits.float(), ids)).backward()
    pt.optimizer.step()
    # sigma = 0, B_expected = B: p.grad * B is the clipped sum
    out = {
        n: p.grad.detach().double() * B for n, p in model.named_parameters() if p.grad is not None
    }
    pt.close()
    return out, model


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("mode", ["bookkeeping", "ghost", "hooks"])
@pytest.mark.parametrize("clip", [0.05, 1e4])  # clipping active / inactive
def test_clipped_sum_equals_the_per_sample_loop(arch, mode, clip):
    ref = _loop_reference(BUILDERS[arch], clip)
    got, model = _dp_step(BUILDERS[arch], mode, clip)
    assert set(got) == set(ref), set(ref) ^ set(got)
    kinds = {type(m).__name__ for m in model.modules()}
    assert ("Conv1D" in kinds) if arch == "gpt2" else ("LlamaRMSNorm" in kinds)
    for n in ref:
        torch.testing.assert_close(got[n], ref[n], rtol=2e-4, atol=2e-6, msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_tied_embeddings_are_untied_as_today(arch):
    got, model = _dp_step(lambda: BUILDERS[arch](tied=True), "bookkeeping", 0.05)
    assert model.config.tie_word_embeddings is False
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert emb is not head


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_auto_picks_bookkeeping_for_decoders(arch):
    model = BUILDERS[arch]()
    assert any(is_conv1d(m) or is_rmsnorm(m) for m in model.modules())
    # a batch whose per-sample gradients exceed AUTO_BOOKKEEPING_BYTES: the one-backward exact mode
    assert choose_grad_sample_mode(model, batch_size=100_000) == "bookkeeping"
    assert choose_grad_sample_mode(model, batch_size=1) == "hooks"  # tiny: hooks is faster
    assert choose_grad_sample_mode(BUILDERS[arch](tied=True), batch_size=100_000) == "hooks"


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("mode", ["bookkeeping", "bookkeeping-lowp-gemm", "hooks"])
def test_bf16_autocast_keeps_every_per_sample_gradient_inside_the_bound(
    arch, mode, monkeypatch, noiseless_private
):
    """One example per step, sigma = 0: the applied gradient is that example's clipped gradient; under bf16
    autocast (norms and clip factors in fp32) its norm never exceeds C (tolerance: fp32 rounding, 1e-4).
    ``bookkeeping-lowp-gemm``: the clipped sums in bf16 GEMMs (hi + lo split), the path CUDA takes."""
    lowp, seen = mode == "bookkeeping-lowp-gemm", []
    if lowp:
        real = bkm._clipped_wb

        def tensor_core_path(a, g, *args, **kw):
            seen.append(g.dtype)  # the bf16 output gradients reach the hi + lo GEMMs
            return real(a, g, *args, **kw, lowp_gemm=True)

        monkeypatch.setattr(bkm, "_clipped_wb", tensor_core_path)
        mode = "bookkeeping"
    clip = 0.01  # far below every per-sample gradient norm here: clipping is always active
    model = BUILDERS[arch]()
    model.train()
    pt = noiseless_private(model, _batch(), clip=clip, mode=mode)
    norms = []
    for (x,) in pt.data_loader:
        pt.optimizer.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = pt.model(input_ids=x).logits
            assert logits.dtype == torch.bfloat16
            pt.loss(per_sample_lm_loss(logits.float(), x)).backward()
        pt.optimizer.step()
        g = [p.grad.double() for p in pt.optimizer.params if p.grad is not None]
        norms.append(float(torch.sqrt(sum((v**2).sum() for v in g))))
    assert len(norms) == B
    assert max(norms) <= clip * (1 + 1e-4), norms
    assert min(norms) >= clip * 0.99  # clipped to C, not below (the gradient is not lost)
    assert not lowp or torch.bfloat16 in seen
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_bf16_parameters_get_noise_in_their_dtype():
    model = _gpt2().to(torch.bfloat16)
    ids = _batch()
    pt = make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        DataLoader(TensorDataset(ids), batch_size=B),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        accountant="rdp",
        grad_sample_mode="bookkeeping",
        poisson_sampling=False,
        rng=0,
    )
    pt.optimizer.zero_grad(set_to_none=True)
    pt.loss(per_sample_lm_loss(pt.model(input_ids=ids).logits.float(), ids)).backward()
    pt.optimizer.step()
    grads = [p.grad for p in pt.optimizer.params]
    assert all(g.dtype == torch.bfloat16 for g in grads)
    flat = torch.cat([g.float().flatten() for g in grads])
    assert float(flat.std()) == pytest.approx(1.0 / B, rel=0.1)  # noise std sigma*C/B
