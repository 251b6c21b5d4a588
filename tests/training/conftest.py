"""Shared tiny fixtures for the private-training tests (all CPU, seconds)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from privnlp.mechanisms.training import make_private

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield


def _noiseless_private(model, *tensors, batch_size: int = 1, clip: float, mode: str):
    """make_private with sigma = 0, lr = 0 and a fixed (non-Poisson) loader over ``tensors``: the gradient the optimizer
    applies after ``step()`` is the clipped sum itself (one example per step by default: its clipped gradient)."""
    return make_private(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        DataLoader(TensorDataset(*tensors), batch_size=batch_size),
        noise_multiplier=0.0,
        max_grad_norm=clip,
        accountant="rdp",
        grad_sample_mode=mode,
        poisson_sampling=False,
        rng=0,
    )


@pytest.fixture
def noiseless_private():
    """:func:`_noiseless_private`: the clipping tests' private model (sigma = 0, lr = 0, fixed batches)."""
    return _noiseless_private


SENTIMENT = [
    ("the film was a joy, warm and funny", "pos"),
    ("a wonderful, moving story with great actors", "pos"),
    ("i loved every minute of this delightful film", "pos"),
    ("brilliant and charming from start to end", "pos"),
    ("a dull, boring mess with no story at all", "neg"),
    ("terrible acting and an awful, lazy script", "neg"),
    ("i hated it: slow, ugly and far too long", "neg"),
    ("a painful waste of two hours", "neg"),
]


_WHO = (
    "my sister",
    "the critic",
    "our class",
    "a friend",
    "my dad",
    "the jury",
    "we",
    "they",
    "you",
)


def _labelled_rows(n: int = 80) -> list[dict]:
    """``n`` distinct labelled texts (no duplicates: each is a template plus who said it)."""
    rows = []
    for i in range(n):
        t, y = SENTIMENT[i % len(SENTIMENT)]
        rows.append(
            {"text": f"{_WHO[(i // len(SENTIMENT)) % len(_WHO)]} said {i}: {t}", "label": y}
        )
    return rows


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """Two tiny local checkpoints written with save_pretrained (model + tokenizer), built here:
    ``bert`` (a BertModel body, as all-MiniLM-L6-v2 ships: a classifier head is added on load) and
    ``gpt2`` (a GPT2LMHeadModel with a byte-level BPE tokenizer), and ``data`` (a JSONL file of 80
    labelled texts)."""
    from transformers import BertConfig, BertModel

    from privnlp.models import tiny_gpt2, train_bpe_tokenizer
    from privnlp.models.tokenization import train_wordpiece_tokenizer

    root = tmp_path_factory.mktemp("ckpt")
    texts = [r["text"] for r in _labelled_rows()]
    wp = train_wordpiece_tokenizer(texts, vocab_size=120)
    cfg = BertConfig(
        vocab_size=len(wp),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=0,
        hidden_dropout_prob=0.0,  # no dropout: the results do not depend on torch's global RNG / test order
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(root / "bert")
    wp.save_pretrained(root / "bert")
    bpe = train_bpe_tokenizer(texts, vocab_size=300)
    eos = bpe.eos_token_id
    lm = tiny_gpt2(
        len(bpe), n_positions=64, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, seed=0
    )
    lm.save_pretrained(root / "gpt2")
    bpe.save_pretrained(root / "gpt2")
    data = root / "sentiment.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _labelled_rows()))
    return {"bert": root / "bert", "gpt2": root / "gpt2", "data": data}
