"""The batch-axis guard (issue 29): ids built inside the model without a batch axis (nanoGPT's ``wpe(arange(T))``)
are refused in opacus' hooks / functorch / ghost modes before any step; what it accepts still trains."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from opacus import GradSampleModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.training import make_private, train_private
from privnlp.mechanisms.training.batch_axis import attach_batch_axis_guard
from privnlp.mechanisms.training.dp_sgd import add_batch_position_ids
from privnlp.models import tiny_bert_classifier, tiny_gpt2

V, T = 30, 4


class _NanoGPT(nn.Module):
    """nanoGPT's embeddings: ``wpe`` of position ids built in the forward (``arange(T)``, no batch axis) unless the
    caller passes ``pos``; ``how`` builds them with a batch axis instead (``expand`` / ``derived`` per row)."""

    def __init__(self, how: str = "arange"):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.how = how
        self.wte, self.wpe, self.head = nn.Embedding(V, 8), nn.Embedding(16, 8), nn.Linear(8, V)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))

    def forward(self, ids, pos=None):
        if pos is None:
            pos = torch.arange(ids.shape[1])
            if self.how == "expand":
                pos = pos.expand(ids.shape[0], -1)
            elif (
                self.how == "expand_contiguous"
            ):  # opacus' ghost embedding norms .view() the ids: stride 0 fails
                pos = pos.expand(ids.shape[0], -1).contiguous()
            elif self.how == "derived":  # per-row positions of the non-pad tokens
                pos = ids.ne(0).long().cumsum(1)
        return self.head(torch.tanh(self.wte(ids) + self.wpe(pos)))


def _ids(b: int, t: int = T, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, V, (b, t), generator=torch.Generator().manual_seed(seed))


def _guarded(how: str = "arange", mode: str = "hooks") -> tuple[_NanoGPT, list]:
    model = _NanoGPT(how)
    return model, attach_batch_axis_guard(model, mode)


@pytest.mark.parametrize("mode", ["hooks", "functorch", "ghost"])
@pytest.mark.parametrize("b", [T, 3])  # B == T: every opacus shape check passes; B != T
def test_ids_built_inside_without_a_batch_axis_are_refused(b, mode):
    model, _ = _guarded(mode=mode)
    with pytest.raises(
        InvalidArgument, match=rf"'wpe'.*shape \({T},\).*B={b}.*position_ids.*expand.*freeze"
    ):
        model(_ids(b))


def test_what_the_guard_accepts():
    model, handles = _guarded()
    model(_ids(1))  # B == 1: the broadcast is the example's own
    model(_ids(T), torch.arange(T).repeat(T, 1))  # passed in
    model(_ids(T), torch.arange(T + 2).repeat(T, 1)[:, :T])  # a slice of an input (passed in)
    emb = nn.Embedding(V, 4)
    attach_batch_axis_guard(emb, "hooks")
    emb(_ids(3)[:, 0])  # one id per example, (B,): passed in, so dim 0 is the batch
    with torch.no_grad():  # evaluation: no gradients, nothing to clip
        model(_ids(T))
    model.eval()  # opacus captures no activations in eval mode
    model(_ids(T))
    model.train()
    for how in ("expand", "expand_contiguous", "derived"):
        m, _ = _guarded(how)
        m(_ids(T))
        m(_ids(3))
    for h in handles:
        h.remove()
    model(_ids(T))  # removed: the guard is gone
    frozen = _NanoGPT()
    frozen.wpe.weight.requires_grad_(False)
    attach_batch_axis_guard(frozen, "hooks")
    frozen(_ids(T))  # a frozen table gets no per-sample gradient
    with pytest.raises(InvalidArgument, match="mode must be one of"):
        attach_batch_axis_guard(frozen, "bookkeeping")


@pytest.mark.parametrize("pos", [torch.arange(T).unsqueeze(0), torch.arange(T)])
def test_ids_passed_in_without_a_batch_axis_are_refused(pos):
    """(1, T) or (T,) position ids passed by the caller with B = 3: opacus would give ``wpe`` a per-sample gradient
    of batch 1 / T, the same broadcast."""
    model, _ = _guarded()
    with pytest.raises(InvalidArgument, match=r"'wpe'.*passed to the model.*B=3"):
        model(_ids(3), pos)


def test_nested_inputs_count_as_the_batch():
    class Dicts(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = _NanoGPT()

        def forward(self, batch, scale=None):
            return self.inner(batch["x"][0]["ids"], batch["x"][0]["pos"])

    model = Dicts()
    attach_batch_axis_guard(model, "hooks")
    with pytest.raises(InvalidArgument, match=r"B=3"):  # a leading scalar input does not define B
        model(scale=torch.tensor(2.0), batch={"x": [{"ids": _ids(3), "pos": torch.arange(T)}]})
    model({"x": [{"ids": _ids(T), "pos": torch.arange(T).repeat(T, 1)}]})
    with pytest.raises(InvalidArgument, match=r"'inner\.wpe'.*shape \(1, 4\)"):
        model({"x": [{"ids": _ids(T), "pos": torch.arange(T).unsqueeze(0)}]})


def test_without_the_guard_opacus_hooks_mode_clips_one_example_at_twice_c():
    """THE BUG the guard refuses (unguarded, opacus' GradSampleModule directly): B == T, example 0 weighted 1000x,
    the others' losses weighted 0 -- the loop shows their true gradients are zero, so the clipped sum is example 0's
    contribution alone. opacus assigns row t of ``wpe``'s gradient to example t, clips each part by its own factor:
    the sum's norm is ~2 C, not <= C."""
    c = 0.1
    w = torch.tensor([1000.0] + [0.0] * (T - 1))
    ids = _ids(T, seed=1)

    def loss(m, x, wx):
        logits = m(x)
        return nn.functional.cross_entropy(logits.transpose(1, 2), x, reduction="none").mean(1) * wx

    model = _NanoGPT()
    for i in range(T):  # the true per-sample gradients (a loop): examples 1..T-1 contribute nothing
        model.zero_grad()
        loss(model, ids[i : i + 1], w[i : i + 1]).sum().backward()
        true_norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
        assert (true_norm > 10 * c) if i == 0 else (true_norm == 0)
    gsm = GradSampleModule(_NanoGPT(), batch_first=True, loss_reduction="sum")
    loss(gsm, ids, w).sum().backward()
    ps = [p for p in gsm.parameters() if p.requires_grad]
    norms = torch.stack([p.grad_sample.flatten(1).norm(dim=1) for p in ps]).norm(dim=0)
    factors = (c / (norms + 1e-6)).clamp(max=1.0)
    clipped = torch.cat([torch.einsum("b,b...->...", factors, p.grad_sample).flatten() for p in ps])
    assert clipped.norm() > 1.5 * c  # measured 2.0 C: the bound C is broken
    gsm._close()


def _nano_setup(how: str = "arange"):
    model = _NanoGPT(how)
    ids = _ids(40, seed=2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(TensorDataset(ids), 8)


def _nano_loss(m, batch):
    (x,) = batch
    return nn.functional.cross_entropy(m(x).transpose(1, 2), x, reduction="none").mean(1)


def _nano_private(mode: str, how: str = "arange"):
    """The nanoGPT-like model through make_private (which attaches the guard: engine._wrap_opacus)."""
    model, opt, dl = _nano_setup(how)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pt = make_private(
            model, opt, dl, noise_multiplier=1.0, max_grad_norm=0.1, rng=0, grad_sample_mode=mode,
            expected_batch_size=8, public_dataset_size=40,
        )  # fmt: skip
    return model, pt


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_through_make_private_the_refusal_comes_before_any_step(mode):
    model, pt = _nano_private(mode)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(InvalidArgument, match="'wpe'"):
        train_private(pt, _nano_loss, steps=2)
    assert pt.ledger.steps == 0 and pt.epsilon() == 0  # no noise released, no epsilon spent
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    # the fix the error names: the same model with expanded ids trains
    _model, pt = _nano_private(mode, "expand_contiguous")
    train_private(pt, _nano_loss, steps=2)
    assert pt.ledger.steps == 2


@pytest.mark.parametrize("how", ["expand_contiguous", "arange"])
def test_functorch_mode_with_the_guard_attached_before_opacus_wraps(how):
    """opacus' functorch mode deep-copies each layer, hooks included, and re-runs it per example inside vmap: the
    guard is shared (not copied with the model) and silent there; the forward check still refuses ``arange``."""
    model, opt, dl = _nano_setup(how)
    attach_batch_axis_guard(
        model, "functorch"
    )  # before make_private: its hooks go into opacus' copies
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pt = make_private(
            model, opt, dl, noise_multiplier=1.0, max_grad_norm=0.1, rng=0, grad_sample_mode="functorch",
            expected_batch_size=8, public_dataset_size=40,
        )  # fmt: skip
    if how == "arange":
        with pytest.raises(InvalidArgument, match="'wpe'"):
            train_private(pt, _nano_loss, steps=2)
        assert pt.ledger.steps == 0
    else:
        train_private(pt, _nano_loss, steps=2)
        assert pt.ledger.steps == 2


def test_a_deep_copied_layer_shares_the_guard():
    """(What opacus' functorch mode does to every layer) the copy's hook is the same guard, not a copy of it and of
    every embedding it names."""
    model = _NanoGPT()
    attach_batch_axis_guard(model, "hooks")
    (hook,) = model.wpe._forward_hooks.values()
    (copied,) = copy.deepcopy(model.wpe)._forward_hooks.values()
    assert copied.__self__ is hook.__self__


def test_the_guard_sees_the_inputs_an_earlier_pre_hook_added():
    """torch hands each with-kwargs pre-hook the ``(args, kwargs)`` the previous one returned: registered after a
    pre-hook that adds ``(B,)`` ids (one per example) the guard records them as inputs; registered before it, it
    does not (the ids come from outside what it saw, and ``(B,)`` is not per-row): refused."""

    class Tagged(nn.Module):
        def __init__(self):
            super().__init__()
            self.tag = nn.Embedding(5, 4)

        def forward(self, x, tag=None):
            return x * self.tag(tag).sum()

    def add_tag(module, args, kwargs):
        return args, {**kwargs, "tag": torch.arange(args[0].shape[0]) % 5}

    after = Tagged()
    after.register_forward_pre_hook(add_tag, with_kwargs=True)
    attach_batch_axis_guard(after, "hooks")
    after(torch.ones(3, 2))
    before = Tagged()
    attach_batch_axis_guard(before, "hooks")
    before.register_forward_pre_hook(add_tag, with_kwargs=True)
    with pytest.raises(
        InvalidArgument, match=r"'tag'.*built inside the model with shape \(3,\).*B=3"
    ):
        before(torch.ones(3, 2))


def test_gpt2_needs_the_engines_per_row_position_ids():
    """GPT-2 builds ``(1, T)`` position ids inside when given only ``input_ids``: refused; with
    ``add_batch_position_ids`` registered first (as the engine does) its per-row ``(B, T)`` ids are accepted."""
    ids = _ids(3, 6)
    model = tiny_gpt2(V, n_layer=1, n_embd=16, n_head=2, n_positions=16, tie_word_embeddings=False)
    handles = attach_batch_axis_guard(model, "hooks")
    with pytest.raises(
        InvalidArgument, match=r"'transformer\.wpe'.*built inside.*shape \(1, 6\).*B=3"
    ):
        model(input_ids=ids)
    for h in handles:
        h.remove()
    add_batch_position_ids(model)
    attach_batch_axis_guard(model, "hooks")
    model(input_ids=ids)


def _hf_data(labels: str):
    ids = _ids(24, 6, seed=3)
    y = torch.arange(24) % 2 if labels == "class" else ids
    return DataLoader(TensorDataset(ids, y), 6)


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_hf_models_train_through_make_private_with_the_guard(arch, mode):
    if arch == "bert":
        model = tiny_bert_classifier(
            V, hidden_size=16, num_hidden_layers=1, intermediate_size=32, max_position_embeddings=16
        )
        dl = _hf_data("class")
    else:
        model = tiny_gpt2(V, n_layer=1, n_embd=16, n_head=2, n_positions=16)
        dl = _hf_data("lm")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pt = make_private(
            model, opt, dl, noise_multiplier=1.0, max_grad_norm=1.0, rng=0, grad_sample_mode=mode,
            expected_batch_size=6, public_dataset_size=24,
        )  # fmt: skip
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    train_private(pt, steps=2)
    assert pt.ledger.steps == 2
    after = [p for p in model.parameters() if p.requires_grad]
    assert any(not torch.equal(a, p) for a, p in zip(before, after))
