"""The Hugging Face Trainer integration records one DP-SGD event per optimizer step."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset

pytest.importorskip("accelerate")


class _DS(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(1, 40, (32, 10), generator=g)
        self.y = torch.arange(32) % 2

    def __len__(self):
        return 32

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}


@pytest.mark.parametrize("mode", ["auto", "hooks", "ghost"])
def test_dp_trainer_on_tiny_bert(tmp_path, mode):
    from transformers import TrainingArguments

    from privnlp.mechanisms.training.loop import DPTrainer
    from privnlp.models import tiny_bert_classifier

    model = tiny_bert_classifier(
        40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16
    )
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_train_epochs=1,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    t = DPTrainer(
        model=model,
        args=args,
        train_dataset=_DS(),
        dp=dict(noise_multiplier=1.0, max_grad_norm=1.0, accountant="rdp", grad_sample_mode=mode),
        dp_rng=0,
    )
    t.train()
    assert t.private.grad_sample_mode == ("hooks" if mode == "auto" else mode)
    assert t.private.steps == 4 and t.args.max_grad_norm == 0.0
    c = t.private.claim()
    assert c.kind.value == "dp" and c.extra["steps"] == 4


def test_dp_trainer_refuses_gradient_accumulation(tmp_path):
    from transformers import TrainingArguments

    from privnlp.core.errors import InvalidArgument
    from privnlp.mechanisms.training.loop import DPTrainer
    from privnlp.models import tiny_bert_classifier

    model = tiny_bert_classifier(
        40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16
    )
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    with pytest.raises(InvalidArgument, match="gradient_accumulation_steps"):
        DPTrainer(model=model, args=args, train_dataset=_DS(), dp=dict(noise_multiplier=1.0))


@pytest.mark.parametrize("mode", ["bookkeeping", "hooks"])
def test_dp_trainer_takes_an_eval_mode_model_and_logs_the_private_grad_norm(tmp_path, mode):
    """from_pretrained returns a model in eval mode: DPTrainer trains it as HF's Trainer does (issue #29 item 7),
    and the logged grad_norm is the privatized gradient's norm -- not 0 under book-keeping, and not the raw
    (non-private) gradient's norm under hooks."""
    from transformers import TrainerCallback, TrainingArguments

    from privnlp.mechanisms.training.loop import DPTrainer
    from privnlp.models import tiny_bert_classifier

    model = tiny_bert_classifier(
        40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16
    )
    model.eval()  # as from_pretrained returns it
    logs, applied = [], []

    class Grab(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "grad_norm" in logs:
                applied.append(float(t.private.last_grad_norm))
                grabbed.append(dict(logs))

    grabbed = logs
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_train_epochs=1,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        logging_steps=1,
    )
    t = DPTrainer(
        model=model,
        args=args,
        train_dataset=_DS(),
        dp=dict(noise_multiplier=1.0, max_grad_norm=1.0, accountant="rdp", grad_sample_mode=mode),
        dp_rng=0,
        callbacks=[Grab()],
    )
    t.train()
    assert t.private.steps == 4
    norms = [entry["grad_norm"] for entry in logs]
    assert len(norms) == 4 and all(n > 0 for n in norms)
    # each logged value is the norm of the gradient the DP optimizer applied at that step
    assert norms == pytest.approx(applied, rel=1e-6)
    # and of the order of the noise on the mean: sigma*C/B per coordinate over all parameters
    d = sum(p.numel() for p in model.parameters())  # all trained (BK turns requires_grad off)
    assert norms[-1] == pytest.approx((d**0.5) * 1.0 / 8, rel=0.5)
