"""Issue #29 items 1 and bad input: noise on the parameters' device, checkpoints across device kinds, and the
device / dtype errors raised before any step is taken (CPU tests of the device-independent logic; the CUDA
paths run in ``scripts/gpu/check_dp_cuda.py`` and in the CUDA-only test below)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privnlp.core.errors import InvalidArgument
from privnlp.core.rng import generator_on, is_secure, secure_torch
from privnlp.mechanisms.training import make_private, train_private
from privnlp.mechanisms.training.devices import check_model_device, check_model_dtypes

D, B = 300, 10
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _loader(n=40, d=D):
    return DataLoader(
        TensorDataset(torch.randn(n, d, generator=torch.Generator().manual_seed(1))), batch_size=B
    )


def _zero_loss(model, batch):
    return 0.0 * model(batch[0]).sum(-1)


def _pt(model, rng, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_private(
            model,
            torch.optim.SGD(model.parameters(), lr=0.0),
            _loader(d=model.in_features if isinstance(model, nn.Linear) else D),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            accountant="rdp",
            grad_sample_mode="hooks",
            rng=rng,
            **kw,
        )


def _noises(pt, model, steps):
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train_private(
            pt,
            _zero_loss,
            steps=steps,
            on_step=lambda p, _l: out.append(model.weight.grad.detach().flatten().clone()),
        )
    return out


# ----------------------------------------------------------------------------- bad input, before any step
def test_mixed_device_model_is_refused_naming_the_parameters():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1, device="meta"))
    with pytest.raises(InvalidArgument, match=r"2 devices .*'0.weight' on cpu.*'1.weight' on meta"):
        check_model_device(model)
    with pytest.raises(InvalidArgument, match="2 devices"):
        _pt(model, rng=0)


def test_model_on_a_device_without_a_generator_is_refused_before_any_step():
    model = nn.Linear(4, 1, device="meta")
    with pytest.raises(InvalidArgument, match="cannot create a random generator"):
        check_model_device(model)
    with pytest.raises(InvalidArgument, match="cannot create a random generator"):
        generator_on(torch.Generator(), "meta", seeded=True)


def test_fp16_parameters_are_refused_and_bf16_accepted():
    with pytest.raises(InvalidArgument, match=r"'weight' is float16.*loss scaler"):
        check_model_dtypes(nn.Linear(4, 1).half())
    with pytest.raises(InvalidArgument, match="float16"):
        _pt(nn.Linear(D, 1).half(), rng=0)
    check_model_dtypes(nn.Linear(4, 1).to(torch.bfloat16))
    frozen = nn.Linear(4, 1).half().requires_grad_(False)
    check_model_dtypes(frozen)  # frozen fp16 weights are not trained: fine


# ----------------------------------------------------------------------------- generators per device
def test_generator_on_cpu_is_the_generator_itself_and_secure_stays_secure():
    g = secure_torch()
    assert generator_on(g, "cpu", seeded=False) is g
    s = torch.Generator().manual_seed(3)
    assert generator_on(s, torch.device("cpu"), seeded=True) is s


def test_noise_generator_follows_the_parameters_device_cpu():
    model = nn.Linear(D, 1, bias=False)
    pt = _pt(model, rng=None)
    g = pt.generators["noise"]
    assert g.device == model.weight.device and is_secure(g)
    assert pt.optimizer.generator is g


# ----------------------------------------------------------------------------- checkpoints across device kinds
def test_resume_from_another_device_kind_is_reproducible_and_never_replays(tmp_path):
    model = nn.Linear(D, 1, bias=False)
    pt = _pt(model, rng=0)
    seen = _noises(pt, model, 2)
    st = pt.state_dict()
    assert st["rng"]["devices"] == {"noise": "cpu", "sampling": "cpu"}
    # what a CUDA run stores: the noise generator's state is its seed and offset (16 bytes)
    cuda_like = torch.Generator().manual_seed(5).get_state()[:16].clone()
    st["rng"]["noise"] = cuda_like
    st["rng"]["devices"]["noise"] = "cuda"

    def resumed():
        m = nn.Linear(D, 1, bias=False)
        p = _pt(m, rng=0)
        p.load_state_dict(st)
        return m, p

    m1, p1 = resumed()
    m2, p2 = resumed()
    n1, n2 = _noises(p1, m1, 1)[0], _noises(p2, m2, 1)[0]
    assert torch.equal(n1, n2)  # reproducible (seeded simulation)
    std = 1.0 / B
    for earlier in seen:  # no noise of the checkpointed steps is replayed: residual noise-sized
        assert float((n1 - earlier).std()) / std == pytest.approx(math.sqrt(2), rel=0.2)
    assert any("from a cuda checkpoint" in n for n in p1.claim().notes)
    assert p1.steps == 3 and p1.claim().noise_seeded  # 2 checkpointed + 1 resumed


@cuda
def test_make_private_on_cuda_draws_noise_on_the_device():  # pragma: no cover - GPU only
    model = nn.Linear(D, 1, bias=False).cuda()
    pt = _pt(model, rng=None)
    assert pt.generators["noise"].device.type == "cuda" and is_secure(pt.generators["noise"])
    dl = pt.data_loader
    for batch in dl:
        pt.optimizer.zero_grad()
        pt.loss(_zero_loss(pt.model, [batch[0].cuda()])).backward()
        pt.optimizer.step()
        break
    assert float(model.weight.grad.std()) == pytest.approx(1.0 / B, rel=0.3)


@cuda
def test_seeded_cuda_resume_equals_uninterrupted_and_resumes_on_cpu(
    tmp_path,
):  # pragma: no cover - GPU only
    def setup(device, ckpt=None):
        torch.manual_seed(0)
        m = nn.Linear(D, 1, bias=False).to(device)
        pt = _pt(m, rng=0)
        if ckpt is not None:
            pt.load_checkpoint(ckpt)
        return m, pt

    def noises(pt, m, steps, device):
        out = []
        for _ in range(steps):
            pt.optimizer.zero_grad(set_to_none=True)
            x = torch.zeros(2, D, device=device)
            pt.loss(_zero_loss(pt.model, [x])).backward()
            pt.optimizer.step()
            out.append(m.weight.grad.detach().flatten().clone())
        return out

    m, pt = setup("cuda")
    full = noises(pt, m, 3, "cuda")
    m1, pt1 = setup("cuda")
    noises(pt1, m1, 2, "cuda")
    ck = pt1.save_checkpoint(tmp_path / "ck.pt")
    assert torch.load(ck, weights_only=False)["rng"]["devices"]["noise"] == "cuda"
    m2, pt2 = setup("cuda", ck)
    assert torch.equal(noises(pt2, m2, 1, "cuda")[0], full[2])  # resumed == uninterrupted
    m3, pt3 = setup("cpu", ck)  # another device kind: derived stream, no replay
    step3 = noises(pt3, m3, 1, "cpu")[0]
    assert float((step3 - full[1].cpu()).std()) * B == pytest.approx(math.sqrt(2), rel=0.2)
    assert pt3.epsilon() == pt2.epsilon()  # same ledger on both device kinds


@cuda
def test_gpt2_bookkeeping_bf16_on_cuda_matches_the_cpu_epsilon():  # pragma: no cover - GPU only
    from privnlp.mechanisms.training.dp_sgd import per_sample_lm_loss
    from privnlp.models import tiny_gpt2

    eps = {}
    for device in ("cpu", "cuda"):
        m = tiny_gpt2(40, n_layer=2, n_embd=32, n_head=2, n_positions=16, tie_word_embeddings=False)
        m = m.to(device)
        ids = torch.randint(0, 40, (32, 12), generator=torch.Generator().manual_seed(0))
        pt = make_private(
            m,
            torch.optim.AdamW(m.parameters(), lr=1e-3),
            DataLoader(TensorDataset(ids), batch_size=8),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            grad_sample_mode="bookkeeping",
            rng=None,
        )
        assert pt.generators["noise"].device.type == device
        for (x,) in pt.data_loader:
            x = x.to(device)
            pt.optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=torch.bfloat16):
                logits = pt.model(input_ids=x).logits
            pt.loss(per_sample_lm_loss(logits.float(), x)).backward()
            pt.optimizer.step()
        eps[device] = pt.epsilon()
    assert eps["cuda"] == eps["cpu"]  # the same ledger
