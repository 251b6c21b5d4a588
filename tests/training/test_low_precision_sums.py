"""Low-precision DP-SGD and review fixes: the clipped sum keeps its sensitivity C until the noise is added, and ghost clipping in low
precision is refused before any step (issue #29 item 3; found by a review on 2026-11-27).

The adversary: two neighbouring datasets (one example removed). The Gaussian mechanism's guarantee needs the two
pre-noise sums to differ by at most C. A sum of B clipped gradients rounded to bfloat16 (8 significant bits) moves by
up to B * C * 2^-8, so the rounded sums of 300 and 299 examples at C = 0.7 differ by 1.0 = 1.43 C.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from transformers import RobertaConfig, RobertaForSequenceClassification

from privnlp.accounting.duplicates import row_keys
from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.training import devices, loop, make_private
from privnlp.mechanisms.training.dp_sgd import add_batch_position_ids
from privnlp.models import tiny_gpt2

C = 0.7


def _presum(n: int, mode: str, monkeypatch) -> torch.Tensor:
    """The clipped sum (before noise) of one step on ``n`` identical examples with a bf16 weight."""
    model = nn.Linear(1, 1, bias=False).to(torch.bfloat16)
    x = torch.ones(n, 1, dtype=torch.bfloat16)
    pt = make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        DataLoader(
            TensorDataset(torch.arange(n)), batch_size=n
        ),  # n distinct records; x is fed below
        noise_multiplier=1.0,
        max_grad_norm=C,
        accountant="rdp",
        grad_sample_mode=mode,
        poisson_sampling=False,
        rng=0,
    )
    seen: list[torch.Tensor] = []
    real = devices.noised_sum

    def spy(summed, **kw):
        seen.append(summed.detach().clone())
        return real(summed, **kw)

    monkeypatch.setattr(devices, "noised_sum", spy)
    pt.optimizer.zero_grad(set_to_none=True)
    pt.loss(pt.model(x).squeeze(-1).float()).backward()  # per-example gradient 1, clipped to C
    pt.optimizer.step()
    assert len(seen) == 1 and model.weight.grad.dtype == torch.bfloat16  # noised, then cast
    return seen[0]


@pytest.mark.parametrize("mode", ["hooks", "bookkeeping"])
def test_neighbouring_bf16_sums_differ_by_at_most_c_before_the_noise(mode, monkeypatch):
    # fails with the sums rounded to bf16 before the noise (the code before 2026-11-27): |210 - 209| = 1.43 C
    a, b = _presum(300, mode, monkeypatch), _presum(299, mode, monkeypatch)
    assert float((a - b).float().norm()) <= C * (1 + 1e-5)
    assert a.dtype == torch.float32
    assert float(a.sum()) == pytest.approx(300 * C, rel=1e-5)


def _tiny_lm():
    return tiny_gpt2(vocab_size=64, n_positions=16, n_embd=16, n_head=2, n_layer=1)


IDS = torch.randint(0, 64, (8, 6), generator=torch.Generator().manual_seed(0))


def _ghost(model):
    return make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(TensorDataset(IDS), batch_size=4),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        grad_sample_mode="ghost",
        rng=0,
    )


def test_ghost_refuses_bf16_parameters():
    with pytest.raises(InvalidArgument, match="ghost.*bfloat16"):
        _ghost(_tiny_lm().to(torch.bfloat16))


def test_ghost_under_autocast_is_refused_in_the_forward_before_any_step():
    model = _tiny_lm()
    pt = _ghost(model)
    before = [p.detach().clone() for p in model.parameters()]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(InvalidArgument, match="ghost.*autocast"):
            pt.model(input_ids=IDS[:4])
    assert pt.steps == 0
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        pt.model(input_ids=IDS[:4])  # evaluation under autocast stays allowed


def test_duplicate_detection_reads_bf16_datasets():
    # make_private hashed a bf16 TensorDataset with .numpy(), which raised TypeError (found writing this file)
    x = torch.tensor([[1.0, 2.0], [1.0, 2.0], [1.0, 2.015625]], dtype=torch.bfloat16)
    keys = row_keys([x])
    assert keys[0] == keys[1] and keys[0] != keys[2]


def test_roberta_reads_its_own_positions_under_dp():
    # add_batch_position_ids passed 0..T-1 to RoBERTa, whose positions start at padding_idx + 1 (a review, 2026-11-27):
    # a pretrained RoBERTa fine-tuned with DP read shifted position embeddings
    cfg = RobertaConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=20,
        pad_token_id=1,
    )
    torch.manual_seed(0)
    model = RobertaForSequenceClassification(cfg).eval()
    ids = torch.tensor([[0, 5, 6, 7, 2, 1, 1], [0, 8, 9, 2, 1, 1, 1]])
    want = model(input_ids=ids).logits
    handle = add_batch_position_ids(model)
    try:
        got = model(input_ids=ids).logits
    finally:
        handle.remove()
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize(
    ("auto_picks", "ddp", "low_precision", "passed"),
    [
        ("bookkeeping", False, False, None),  # the caller's choice unchanged
        ("ghost", False, False, None),
        ("bookkeeping", True, False, "ghost"),  # DDP cannot run book-keeping
        ("bookkeeping", True, True, "hooks"),  # ... nor ghost under the Trainer's bf16 autocast
        ("ghost", False, True, "hooks"),
        ("bookkeeping", False, True, "bookkeeping"),
        ("hooks", True, True, "hooks"),
    ],
)
def test_dp_trainer_never_picks_ghost_under_autocast(
    monkeypatch, auto_picks, ddp, low_precision, passed
):
    monkeypatch.setattr(loop, "choose_grad_sample_mode", lambda model, b: auto_picks)
    assert loop._trainer_mode(None, 8, None, ddp=ddp, low_precision=low_precision) == passed
    assert loop._trainer_mode(None, 8, "ghost", ddp=ddp, low_precision=low_precision) is None
    if ddp:
        with pytest.raises(InvalidArgument, match="bookkeeping"):
            loop._trainer_mode(None, 8, "bookkeeping", ddp=True, low_precision=low_precision)
