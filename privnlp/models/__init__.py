"""Tiny models for privnlp: tokenizer training, small model builders, train loops, cached bundled models.

Everything is built from small configs and trained here on CPU in seconds; nothing is downloaded
from the Hugging Face Hub. The GPT-2 LM stands in for the models attacked in
``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (secret sharer / canary exposure) and the BERT
and BiLSTM models for the FL gradient-inversion papers (``film-recovering-private-text-in-fl.txt``,
``record-level-privacy-leakage-in-fl.txt``).

``import privnlp.models`` does not import torch: every public name is loaded lazily on first
attribute access (module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    # tokenizers
    "train_bpe_tokenizer": "tokenization",
    "train_wordpiece_tokenizer": "tokenization",
    # builders
    "tiny_gpt2": "builders",
    "tiny_llama": "builders",
    "tiny_bert_classifier": "builders",
    "tiny_bert_mlm": "builders",
    "BiLSTMTagger": "tagger",
    "TextCNN": "cnn",
    "LSTMLanguageModel": "lstm_lm",
    "tiny_lstm_lm": "lstm_lm",
    # training
    "TrainLog": "training",
    "lm_batch": "training",
    "classifier_batch": "training",
    "train_lm": "training",
    "train_classifier": "training",
    "train_tagger": "training",
    "pad_sequences": "training",
    # cache / bundled
    "cache_dir": "cache",
    "bundled_lm": "bundled",
    "bundled_bert_classifier": "bundled",
    # local checkpoints
    "load_lm": "pretrained",
    "load_classifier": "pretrained",
    "load_mean_pool_classifier": "pretrained",
    "MeanPoolClassifier": "pooled",
}

__all__ = [
    "BiLSTMTagger",
    "LSTMLanguageModel",
    "MeanPoolClassifier",
    "TextCNN",
    "TrainLog",
    "bundled_bert_classifier",
    "bundled_lm",
    "cache_dir",
    "classifier_batch",
    "lm_batch",
    "load_classifier",
    "load_lm",
    "load_mean_pool_classifier",
    "pad_sequences",
    "tiny_bert_classifier",
    "tiny_bert_mlm",
    "tiny_gpt2",
    "tiny_llama",
    "tiny_lstm_lm",
    "train_bpe_tokenizer",
    "train_classifier",
    "train_lm",
    "train_tagger",
    "train_wordpiece_tokenizer",
]
# every name of _EXPORTS is public: tests/docs/test_layering.py checks __all__ lists each one


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'privnlp.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"privnlp.models.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
