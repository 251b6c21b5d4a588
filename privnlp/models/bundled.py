"""Cached bundled models: a tiny GPT-2 LM on the bundled private corpus and a tiny BERT sentiment classifier.

The LM is the undefended target of the canary-exposure / secret-sharer evaluation
(``../shared/papers/dp-bert-and-dp-wordpiece.txt``); the classifier is the FL/gradient-attack
target (``../shared/papers/film-recovering-private-text-in-fl.txt``). Both are trained here from
small configs (no download) and cached on disk (:mod:`privnlp.models.cache`) keyed by preset
config + seed + versions. ``quick`` builds in well under 30 s on 2 CPU cores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import BertForSequenceClassification, GPT2LMHeadModel, PreTrainedTokenizerFast

from privnlp.core.errors import InvalidArgument, check_range
from privnlp.data import generate_corpus
from privnlp.data.sentiment import generate_sentiment
from privnlp.models.builders import tiny_bert_classifier, tiny_gpt2
from privnlp.models.tokenization import train_bpe_tokenizer, train_wordpiece_tokenizer

from ._seed import hf_quiet, seeded
from .builders import fix_loss_type
from .cache import get_or_build
from .training import classifier_batch, train_classifier, train_lm

__all__ = [
    "LM_PRESETS",
    "CLASSIFIER_PRESETS",
    "bundled_lm",
    "bundled_bert_classifier",
    "TRAIN_INFO",
]

TRAIN_INFO = "privnlp-train.json"

LM_PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "corpus": {"n_users": 20, "records_per_user": 10},
        "vocab_size": 1000,
        "model": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128},
        "train": {"steps": 100, "batch_size": 16, "lr": 3e-3, "max_length": 80},
    },
    "full": {
        "corpus": {"n_users": 50, "records_per_user": 20},
        "vocab_size": 2000,
        "model": {"n_layer": 4, "n_embd": 128, "n_head": 4, "n_positions": 256},
        "train": {"steps": 1500, "batch_size": 16, "lr": 2e-3, "max_length": 128},
    },
}

CLASSIFIER_PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "data": {"n": 1000},
        "vocab_size": 1000,
        "model": {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 128,
            "max_position_embeddings": 128,
        },
        "train": {"steps": 80, "batch_size": 32, "lr": 2e-3, "max_length": 64},
    },
    "full": {
        "data": {"n": 4000},
        "vocab_size": 2000,
        "model": {
            "hidden_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "intermediate_size": 512,
            "max_position_embeddings": 128,
        },
        "train": {"steps": 800, "batch_size": 32, "lr": 1e-3, "max_length": 64},
    },
}


def _preset(table: dict[str, dict[str, Any]], preset: str) -> dict[str, Any]:
    if preset not in table:
        raise InvalidArgument(f"preset must be one of {sorted(table)}; got {preset!r}")
    return table[preset]


def _load_lm(path: Path) -> tuple[Any, Any]:
    with (
        seeded(0),
        hf_quiet(),
    ):  # from_pretrained may initialise buffers; keep the caller's RNG untouched
        model = GPT2LMHeadModel.from_pretrained(str(path), local_files_only=True)
    fix_loss_type(model)
    tok = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    model.eval()
    return model, tok


def bundled_lm(preset: str = "quick", *, seed: int = 0, progress: bool = False) -> tuple[Any, Any]:
    """``(GPT2LMHeadModel, tokenizer)``: byte-level BPE + tiny GPT-2 trained on ``generate_corpus(seed=seed)``.

    Cached on disk; a cache hit returns bit-identical weights. The model is returned in eval mode.
    Training details (losses, seconds) are in ``privnlp-train.json`` next to the weights.

    Args:
        preset: ``"quick"`` (CI, seconds) or ``"full"`` (bigger model and corpus).
        seed: corpus and initialisation seed, in [0, 2**63 - 1]; part of the cache key.
        progress: show a progress bar while training on a cache miss.

    Returns:
        ``(model, tokenizer)``; the cache lives under :func:`privnlp.models.cache_dir`
        (``PRIVNLP_CACHE_DIR`` overrides).

    Raises:
        InvalidArgument: unknown ``preset`` or ``seed`` out of range.
    """
    cfg = _preset(LM_PRESETS, preset)
    check_range("seed", seed, 0, 2**63 - 1, integer=True)

    def build(out: Path) -> None:
        texts = generate_corpus(**cfg["corpus"], seed=seed).texts()
        tok = train_bpe_tokenizer(
            texts, cfg["vocab_size"], model_max_length=cfg["model"]["n_positions"]
        )
        eos = tok.eos_token_id
        model = tiny_gpt2(
            len(tok),
            **cfg["model"],
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
            seed=seed,
        )
        log = train_lm(model, tok, texts, **cfg["train"], rng=seed, progress=progress)
        model.eval()
        with hf_quiet():
            model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        info = {
            "preset": preset,
            "seed": seed,
            "n_texts": len(texts),
            "losses": log.losses,
            "seconds": log.seconds,
        }
        (out / TRAIN_INFO).write_text(json.dumps(info))

    return get_or_build("gpt2-lm", {"preset": preset, **cfg}, seed, build, _load_lm)


def _load_classifier(path: Path) -> tuple[Any, Any]:
    with seeded(0), hf_quiet():
        model = BertForSequenceClassification.from_pretrained(str(path), local_files_only=True)
    tok = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    model.eval()
    return model, tok


def bundled_bert_classifier(
    preset: str = "quick", *, seed: int = 0, progress: bool = False
) -> tuple[Any, Any]:
    """``(BertForSequenceClassification, tokenizer)`` trained on ``generate_sentiment(seed=seed)`` (80% split).

    WordPiece tokenizer trained on the training split; held-out accuracy on the remaining 20% is
    recorded in ``privnlp-train.json``. Cached like :func:`bundled_lm`; returned in eval mode.

    Args:
        preset: ``"quick"`` (CI, seconds) or ``"full"`` (bigger model and corpus).
        seed: data and initialisation seed, in [0, 2**63 - 1]; part of the cache key.
        progress: show a progress bar while training on a cache miss.

    Returns:
        ``(model, tokenizer)``, the model in eval mode.

    Raises:
        InvalidArgument: unknown ``preset`` or ``seed`` out of range.
    """
    cfg = _preset(CLASSIFIER_PRESETS, preset)
    check_range("seed", seed, 0, 2**63 - 1, integer=True)

    def build(out: Path) -> None:
        train, test = generate_sentiment(**cfg["data"], seed=seed).split(0.2)
        tok = train_wordpiece_tokenizer(
            train.texts, cfg["vocab_size"], model_max_length=cfg["model"]["max_position_embeddings"]
        )
        model = tiny_bert_classifier(
            len(tok), num_labels=2, **cfg["model"], pad_token_id=tok.pad_token_id, seed=seed
        )
        log = train_classifier(
            model,
            tok,
            list(train.texts),
            list(train.labels),
            **cfg["train"],
            rng=seed,
            progress=progress,
        )
        model.eval()
        with torch.no_grad():
            batch = classifier_batch(
                tok, list(test.texts), list(test.labels), cfg["train"]["max_length"]
            )
            pred = model(**{k: v for k, v in batch.items() if k != "labels"}).logits.argmax(-1)
            acc = float((pred == batch.labels).float().mean())
        with hf_quiet():
            model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        info = {
            "preset": preset,
            "seed": seed,
            "n_train": len(train),
            "n_test": len(test),
            "test_accuracy": acc,
            "losses": log.losses,
            "seconds": log.seconds,
        }
        (out / TRAIN_INFO).write_text(json.dumps(info))

    return get_or_build("bert-classifier", {"preset": preset, **cfg}, seed, build, _load_classifier)
