"""One noise draw for all parameters (devices.noise_summed_grads(batched=True), the CUDA default): the draw is the
flat N(0, std^2) sample split into the parameters' shapes, its statistics are those of independent per-coordinate
Gaussians, and the CPU default keeps opacus' per-parameter draws."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from opacus.optimizers.optimizer import _generate_noise
from scipy import stats

from privnlp.mechanisms.training.devices import noise_summed_grads


def _opt(shapes, *, seed=0, dtype=torch.float32, summed=None, secure=False):
    g = torch.Generator().manual_seed(seed)
    params = []
    for i, shape in enumerate(shapes):
        p = torch.nn.Parameter(torch.zeros(shape, dtype=dtype))
        s = (
            summed[i]
            if summed is not None
            else torch.zeros(shape, dtype=torch.float32 if dtype == torch.bfloat16 else dtype)
        )
        p.summed_grad = s.clone()
        params.append(p)
    return SimpleNamespace(params=params, generator=g, secure_mode=secure)


def test_batched_noise_is_the_flat_draw_split_into_the_parameters():
    gen = torch.Generator().manual_seed(1)
    summed = [
        torch.randn(3, 4, generator=gen),
        torch.randn(5, generator=gen),
        torch.randn(2, 2, 2, generator=gen),
    ]
    opt = _opt([s.shape for s in summed], seed=7, summed=summed)
    state = opt.generator.get_state()
    noise_summed_grads(opt, 0.3, batched=True)
    flat = torch.normal(0.0, 0.3, size=(12 + 5 + 8,), generator=torch.Generator().set_state(state))
    off = 0
    for p, s in zip(opt.params, summed, strict=True):
        n = s.numel()
        torch.testing.assert_close(
            p.grad, (flat[off : off + n] + s.reshape(-1)).view_as(p), rtol=0, atol=0
        )
        off += n
    # every gradient its own storage (views into the flat draw would be deep-copied whole by opacus' ghost optimizer)
    assert len({p.grad.untyped_storage().data_ptr() for p in opt.params}) == len(opt.params)
    with pytest.raises(ValueError, match="zero_grad"):  # each sum noised once, as opacus checks
        noise_summed_grads(opt, 0.3, batched=True)


def test_batched_noise_has_independent_gaussian_coordinates_of_the_right_scale():
    # 3 parameters, 60k coordinates each, zero sums: the grads are the noise. Tolerances: the sample std of 60k
    # draws has relative sd 0.29% (bound 1.5%); a correlation of independent 60k pairs has sd 0.0041 (bound 0.02)
    std = 0.5
    opt = _opt([(300, 200), (60000,), (200, 300)], seed=3)
    noise_summed_grads(opt, std, batched=True)
    xs = [p.grad.reshape(-1).double().numpy() for p in opt.params]
    for x in xs:
        assert abs(x.std() / std - 1) < 0.015 and abs(x.mean()) < 4 * std / np.sqrt(x.size)
        assert stats.kstest(x / std, "norm").pvalue > 1e-3
    assert (
        abs(np.corrcoef(xs[0], xs[1])[0, 1]) < 0.02 and abs(np.corrcoef(xs[0], xs[2])[0, 1]) < 0.02
    )
    assert not np.array_equal(xs[0], xs[2])  # the parameters' noises are different draws


def test_batched_noise_sums_bf16_parameters_in_fp32_then_casts():
    summed = [torch.full((4, 4), 1000.25), torch.full((3,), -2.125)]
    opt = _opt([(4, 4), (3,)], seed=2, dtype=torch.bfloat16, summed=summed)
    state = opt.generator.get_state()
    noise_summed_grads(opt, 0.01, batched=True)
    flat = torch.normal(0.0, 0.01, size=(19,), generator=torch.Generator().set_state(state))
    assert opt.params[0].grad.dtype == torch.bfloat16
    torch.testing.assert_close(
        opt.params[0].grad, (flat[:16].view(4, 4) + summed[0]).to(torch.bfloat16), rtol=0, atol=0
    )


@pytest.mark.parametrize("secure", [False, True])
def test_cpu_default_and_secure_mode_keep_opacus_per_parameter_draws(secure):
    summed = [torch.randn(3, 4, generator=torch.Generator().manual_seed(4)), torch.randn(6)]
    opt = _opt([s.shape for s in summed], seed=9, summed=summed, secure=secure)
    state = opt.generator.get_state()
    noise_summed_grads(opt, 0.7, batched=None if not secure else True)
    gen = torch.Generator().set_state(state)
    for p, s in zip(opt.params, summed, strict=True):
        expect = s + _generate_noise(std=0.7, reference=s, generator=gen, secure_mode=secure)
        torch.testing.assert_close(p.grad, expect.view_as(p), rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_default_is_one_draw_with_the_right_scale():
    opt = _opt([(400, 300), (5000,)], seed=0)
    for p in opt.params:
        p.data = p.data.cuda()
        p.summed_grad = p.summed_grad.cuda()
    opt.generator = torch.Generator(device="cuda").manual_seed(0)
    state = opt.generator.get_state()
    noise_summed_grads(opt, 0.5)
    flat = torch.normal(
        0.0,
        0.5,
        size=(125000,),
        generator=torch.Generator(device="cuda").set_state(state),
        device="cuda",
    )
    torch.testing.assert_close(opt.params[1].grad, flat[120000:], rtol=0, atol=0)
    assert abs(float(opt.params[0].grad.std()) / 0.5 - 1) < 0.02


def test_a_private_step_with_batched_noise_noises_every_parameter(monkeypatch):
    """The whole step (book-keeping, the budget guard, the normaliser) with the batched draw forced on the CPU: every
    trainable parameter's gradient is its clipped sum plus noise, scaled by the expected batch size."""
    import functools

    from torch.utils.data import DataLoader, TensorDataset

    from privnlp.mechanisms.training import engine, make_private
    from privnlp.models import tiny_gpt2

    calls = []

    def batched(opt, std):
        calls.append(std)
        return functools.partial(noise_summed_grads, batched=True)(opt, std)

    monkeypatch.setattr(engine, "noise_summed_grads", batched)
    model = tiny_gpt2(30, n_layer=1, n_embd=8, n_head=2, n_positions=8, seed=0)
    ids = torch.randint(0, 30, (4, 6), generator=torch.Generator().manual_seed(0))
    pt = make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        DataLoader(TensorDataset(ids), batch_size=4),
        noise_multiplier=50.0,
        max_grad_norm=0.5,
        accountant="rdp",
        poisson_sampling=False,
        rng=11,
    )
    pt.optimizer.zero_grad(set_to_none=True)
    logits = pt.model(input_ids=ids).logits
    per = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids, reduction="none").mean(1)
    pt.loss(per).backward()
    pt.optimizer.step()
    # each tensor noised (its largest coordinate above 1 = 0.16 sd: a tensor of 8 coordinates fails by chance with
    # probability 0.13^8 < 1e-7), and all of them together at the right scale
    assert all(float(p.grad.abs().max()) > 1.0 for p in pt.optimizer.params)
    grads = torch.cat([p.grad.reshape(-1) for p in pt.optimizer.params])
    # sigma C / B = 50 * 0.5 / 4 = 6.25 per coordinate; the clipped sums (<= C / B) are negligible beside it
    assert calls == [25.0]  # sigma C, one call for the step
    assert grads.numel() > 1000 and abs(float(grads.std()) / 6.25 - 1) < 0.1
    pt.close()
