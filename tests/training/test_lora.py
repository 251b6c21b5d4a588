"""Issue #29 item 4: DP-LoRA with peft -- only the adapters private, base weights byte-identical after training
(checked), the accounting of DP-SGD, merge-and-save, DPTrainer with a peft model, and the errors."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.training import make_private, train_private
from privnlp.mechanisms.training.dp_sgd import per_sample_lm_loss
from privnlp.mechanisms.training.lora import (
    is_adapter_parameter,
    merge_and_save,
    verify_base_unchanged,
)
from privnlp.models import tiny_gpt2, tiny_llama

peft = pytest.importorskip("peft")

V, T, N = 40, 8, 24


def _gpt2_lora(**cfg):
    base = tiny_gpt2(V, n_layer=2, n_embd=16, n_head=2, n_positions=16, tie_word_embeddings=False)
    config = dict(
        r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True, lora_dropout=0.0
    )
    config.update(cfg)
    return peft.get_peft_model(base, peft.LoraConfig(task_type="CAUSAL_LM", **config))


def _llama_lora():
    base = tiny_llama(V, num_hidden_layers=1)
    cfg = peft.LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=["q_proj", "v_proj"])
    return peft.get_peft_model(base, cfg)


def _ids():
    return torch.randint(0, V, (N, T), generator=torch.Generator().manual_seed(0))


def _loss(model, batch):
    (x,) = batch
    return per_sample_lm_loss(model(input_ids=x).logits, x)


def _train(model, mode, steps=3, **kw):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    dl = DataLoader(TensorDataset(_ids()), batch_size=8)
    pt = make_private(
        model, opt, dl, noise_multiplier=0.5, max_grad_norm=1.0, accountant="rdp",
        grad_sample_mode=mode, rng=0, **kw,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train_private(pt, _loss, steps=steps)
    return pt


@pytest.mark.parametrize("build", [_gpt2_lora, _llama_lora], ids=["gpt2", "llama"])
@pytest.mark.parametrize("mode", ["bookkeeping", "hooks", "ghost"])
def test_only_the_adapters_train_and_the_base_stays_byte_identical(build, mode):
    model = build()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    pt = _train(model, mode)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(is_adapter_parameter(n) for n in changed)
    assert any("lora_B" in n for n in changed)  # B starts at 0: it moved
    for n, p in model.named_parameters():
        if not is_adapter_parameter(n):
            assert p.dtype == before[n].dtype and torch.equal(p, before[n]), n  # byte-identical
    verify_base_unchanged(pt)
    assert any("DP-LoRA" in note for note in pt.claim().notes)


def test_dp_lora_accounting_is_dp_sgd_accounting():
    lora = _train(_gpt2_lora(), "hooks")
    full_model = tiny_gpt2(
        V, n_layer=2, n_embd=16, n_head=2, n_positions=16, tie_word_embeddings=False
    )
    full = _train(full_model, "hooks")
    assert lora.ledger.runs == full.ledger.runs
    assert lora.epsilon() == pytest.approx(full.epsilon(), rel=1e-12)


def test_a_moved_base_weight_is_caught():
    model = _gpt2_lora()
    pt = _train(model, "hooks", steps=1)
    with torch.no_grad():
        model.base_model.model.transformer.wpe.weight[0, 0] += 1e-3  # the adversary's edit
    with pytest.raises(InvalidArgument, match="base weight changed"):
        verify_base_unchanged(pt)


def test_merge_and_save(tmp_path):
    from transformers import AutoModelForCausalLM

    model = _gpt2_lora()
    pt = _train(model, "bookkeeping")
    x = _ids()[:2]
    out = merge_and_save(pt, tmp_path / "merged")
    assert (out / "claim.json").is_file() and (out / "config.json").is_file()
    with torch.no_grad():
        want = model(input_ids=x).logits  # merged in place
    merged = AutoModelForCausalLM.from_pretrained(out)
    merged.eval()
    with torch.no_grad():
        got = merged(input_ids=x).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert not any("lora" in n for n, _ in merged.named_parameters())


def test_peft_model_with_trainable_base_weights_is_refused_before_any_step():
    model = _gpt2_lora()
    model.base_model.model.transformer.wpe.weight.requires_grad_(True)
    with pytest.raises(InvalidArgument, match=r"base weight '.*wpe.weight' requires grad"):
        _train(model, "hooks")


def test_lora_on_a_module_without_a_per_sample_rule_is_refused():
    model = _gpt2_lora(target_modules=["wte"], fan_in_fan_out=False)
    with pytest.raises(
        InvalidArgument, match=r"LoRA module '.*wte.lora_embedding_A'.*no per-sample"
    ):
        _train(model, "hooks")


class _LM(Dataset):
    def __init__(self):
        self.x = _ids()

    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


def test_dp_trainer_with_a_peft_model(tmp_path):
    pytest.importorskip("accelerate")
    from transformers import TrainingArguments

    from privnlp.mechanisms.training.loop import DPTrainer

    model = _gpt2_lora()
    model.eval()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=1, learning_rate=1e-2,
        report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    t = DPTrainer(
        model=model,
        args=args,
        train_dataset=_LM(),
        dp=dict(noise_multiplier=1.0, max_grad_norm=1.0, accountant="rdp"),
        dp_rng=0,
    )
    t.train()
    assert t.private.steps == 3
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(is_adapter_parameter(n) for n in changed)
    verify_base_unchanged(t.private)
