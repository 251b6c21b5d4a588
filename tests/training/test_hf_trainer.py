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
