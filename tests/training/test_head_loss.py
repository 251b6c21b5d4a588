"""train_private without a hand-written loss (issue #30 item 5): head_loss reads the standard HF head."""

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.training import (
    head_loss,
    per_sample_classification_loss,
    per_sample_lm_loss,
)
from privnlp.models import tiny_gpt2


def test_causal_lm_head_is_the_shifted_per_sequence_loss():
    m = tiny_gpt2(50, n_layer=1, n_embd=16, n_head=2, seed=0)
    ids = torch.randint(0, 50, (4, 7), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(7).repeat(4, 1)
    got = head_loss(m, (ids, pos, ids))
    want = per_sample_lm_loss(m(input_ids=ids, position_ids=pos).logits, ids)
    assert got.shape == (4,)
    torch.testing.assert_close(got, want)


def test_sequence_classification_head_from_a_mapping_batch():
    cfg = BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_labels=3,
    )  # fmt: skip
    torch.manual_seed(0)
    m = BertForSequenceClassification(cfg).eval()
    ids = torch.randint(0, 40, (5, 6), generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, 1, 0])
    got = head_loss(m, {"input_ids": ids, "labels": y})
    torch.testing.assert_close(got, per_sample_classification_loss(m(input_ids=ids).logits, y))


def test_unknown_head_and_bad_batch_name_the_way_out():
    m = tiny_gpt2(50, n_layer=1, n_embd=16, n_head=2, seed=0)
    with pytest.raises(InvalidArgument, match="loss_fn"):
        head_loss(m, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(InvalidArgument, match="labels"):
        head_loss(m, {"input_ids": torch.zeros(2, 3, dtype=torch.long)})
    body = m.transformer  # no head: [B, T, H] hidden states, no standard loss
    with pytest.raises(InvalidArgument, match="no standard loss"):
        head_loss(
            lambda **kw: body(**kw).last_hidden_state, (torch.zeros(2, 3, dtype=torch.long),) * 2
        )
