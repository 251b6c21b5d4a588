"""Builders for tiny Hugging Face transformers from small configs (no Hub download).

* :func:`tiny_gpt2` — GPT-2 LM, the target of the secret-sharer / canary-exposure experiments
  (``../shared/papers/dp-bert-and-dp-wordpiece.txt``) and of LAMP
  (``../shared/papers/lamp-extracting-text-from-gradients.txt``).
* :func:`tiny_bert_classifier` — BERT sequence classifier (FILM / RLG / LAMP gradient settings,
  ``../shared/papers/film-recovering-private-text-in-fl.txt``).
* :func:`tiny_bert_mlm` — BERT masked LM (the DP-BERT secret sharer).
* :func:`tiny_llama` — a Llama-style causal LM (RMSNorm, rotary positions, grouped-query attention): the
  book-keeping / ghost clipping tests of the common decoders (issue #29, item 2).

Each builder initializes its weights under a seeded fork of torch's RNG
(:func:`privnlp.models._seed.seeded`): same ``seed`` -> bit-identical weights, and the caller's
global RNG state is untouched. Dropout defaults to 0 (tiny models trained for a few hundred
steps memorize better and train loops stay deterministic); pass ``dropout=0.1`` for GPT-2/BERT defaults.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from privnlp.core.errors import InvalidArgument, check_probability, check_range

from ._seed import seeded

if TYPE_CHECKING:  # pragma: no cover
    from transformers import (
        BertForMaskedLM,
        BertForSequenceClassification,
        GPT2LMHeadModel,
        LlamaForCausalLM,
    )

__all__ = ["tiny_gpt2", "tiny_llama", "tiny_bert_classifier", "tiny_bert_mlm"]


def _check_dims(hidden: int, heads: int, hidden_name: str, heads_name: str) -> None:
    check_range(hidden_name, hidden, 1, 2**16, integer=True)
    check_range(heads_name, heads, 1, 2**10, integer=True)
    if hidden % heads:
        raise InvalidArgument(f"{hidden_name}={hidden} must be divisible by {heads_name}={heads}")


def tiny_gpt2(
    vocab_size: int,
    *,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 2,
    n_positions: int = 128,
    tie_word_embeddings: bool = True,
    dropout: float = 0.0,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    seed: int = 0,
    **config_overrides: Any,
) -> GPT2LMHeadModel:
    """A GPT-2 LM head model built from ``GPT2Config`` (weights seeded by ``seed``).

    ``vocab_size`` is usually ``len(tokenizer)``; pass the tokenizer's special ids as
    ``bos_token_id``/``eos_token_id``/``pad_token_id`` (all ``<|endoftext|>`` for
    :func:`~privnlp.models.train_bpe_tokenizer`); left ``None`` they stay unset (GPT2Config's
    default 50256 would lie outside a tiny vocabulary). Extra keyword arguments go to ``GPT2Config``.

    Opacus note: ghost clipping refuses tied weights — build with ``tie_word_embeddings=False``
    (or freeze the embedding) for DP-SGD; and pass explicit per-row ``position_ids``
    (:func:`~privnlp.models.lm_batch` does).

    Args:
        vocab_size: number of token ids, in [1, 2**24] (``len(tokenizer)``).
        n_layer: transformer blocks, in [1, 256].
        n_embd: hidden width, in [1, 65536], divisible by ``n_head``.
        n_head: attention heads, in [1, 1024].
        n_positions: longest sequence in tokens, in [1, 2**20].
        tie_word_embeddings: share the input embedding with the output projection (GPT-2's default).
        dropout: residual / embedding / attention dropout probability, in [0, 1).
        bos_token_id, eos_token_id, pad_token_id: special ids in [0, vocab_size - 1], or ``None``.
        seed: seeds the weight initialisation only (the caller's global RNG is untouched).
        **config_overrides: any other ``GPT2Config`` field.

    Returns:
        A ``transformers.GPT2LMHeadModel`` in train mode.

    Raises:
        InvalidArgument: a size or id outside its range, or ``n_embd`` not divisible by ``n_head``.
    """
    check_range("vocab_size", vocab_size, 1, 2**24, integer=True)
    check_range("n_layer", n_layer, 1, 256, integer=True)
    check_range("n_positions", n_positions, 1, 2**20, integer=True)
    _check_dims(n_embd, n_head, "n_embd", "n_head")
    check_probability("dropout", dropout, open_high=True)
    # deferred: transformers: privnlp.evaluation imports this module
    from transformers import GPT2Config, GPT2LMHeadModel

    special = {
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id,
    }
    for k, v in special.items():
        if v is not None:
            check_range(k, v, 0, vocab_size - 1, integer=True)
    cfg = GPT2Config(
        vocab_size=int(vocab_size),
        n_positions=int(n_positions),
        n_embd=int(n_embd),
        n_layer=int(n_layer),
        n_head=int(n_head),
        resid_pdrop=float(dropout),
        embd_pdrop=float(dropout),
        attn_pdrop=float(dropout),
        tie_word_embeddings=bool(tie_word_embeddings),
        **special,
        **config_overrides,
    )
    with seeded(seed):
        model = GPT2LMHeadModel(cfg)
    fix_loss_type(model)
    return model


def tiny_llama(
    vocab_size: int,
    *,
    hidden_size: int = 16,
    intermediate_size: int = 32,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 32,
    tie_word_embeddings: bool = False,
    seed: int = 0,
    **config_overrides: Any,
) -> LlamaForCausalLM:
    """A Llama-style causal LM built from ``LlamaConfig`` (weights seeded by ``seed``; no dropout).

    The defaults give grouped-query attention (4 query heads share 2 key / value heads, so the fused q / k / v
    widths differ: 16, 8, 8), RMSNorm and rotary positions: the shapes that per-sample clipping must get right.

    Args:
        vocab_size: number of token ids, in [1, 2**24].
        hidden_size: hidden width, in [1, 65536], divisible by ``num_attention_heads``.
        intermediate_size: MLP width, in [1, 2**18].
        num_hidden_layers: decoder layers, in [1, 256].
        num_attention_heads: query heads, in [1, 1024].
        num_key_value_heads: key / value heads, in [1, ``num_attention_heads``], dividing it.
        max_position_embeddings: longest sequence in tokens, in [1, 2**20].
        tie_word_embeddings: share the input embedding with the output projection.
        seed: seeds the weight initialisation only (the caller's global RNG is untouched).
        **config_overrides: any other ``LlamaConfig`` field.

    Returns:
        A ``transformers.LlamaForCausalLM`` in train mode.

    Raises:
        InvalidArgument: a size outside its range, or heads that do not divide the width / each other.
    """
    check_range("vocab_size", vocab_size, 1, 2**24, integer=True)
    check_range("intermediate_size", intermediate_size, 1, 2**18, integer=True)
    check_range("num_hidden_layers", num_hidden_layers, 1, 256, integer=True)
    check_range("max_position_embeddings", max_position_embeddings, 1, 2**20, integer=True)
    _check_dims(hidden_size, num_attention_heads, "hidden_size", "num_attention_heads")
    check_range("num_key_value_heads", num_key_value_heads, 1, num_attention_heads, integer=True)
    if num_attention_heads % num_key_value_heads:
        raise InvalidArgument(
            f"num_attention_heads={num_attention_heads} must be divisible by "
            f"num_key_value_heads={num_key_value_heads}"
        )
    # deferred: transformers: privnlp.evaluation imports this module
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=int(vocab_size),
        hidden_size=int(hidden_size),
        intermediate_size=int(intermediate_size),
        num_hidden_layers=int(num_hidden_layers),
        num_attention_heads=int(num_attention_heads),
        num_key_value_heads=int(num_key_value_heads),
        max_position_embeddings=int(max_position_embeddings),
        tie_word_embeddings=bool(tie_word_embeddings),
        attention_dropout=0.0,
        **config_overrides,
    )
    with seeded(seed):
        model = LlamaForCausalLM(cfg)
    model.train()
    return model


def fix_loss_type(model: Any) -> Any:
    """transformers 5 cannot infer ``loss_type`` from the class name ``GPT2LMHeadModel`` and warns
    once per process; the loss it falls back to (``ForCausalLM``) is the right one, so set it."""
    if getattr(model, "loss_type", None) is None and type(model).__name__.endswith("LMHeadModel"):
        model.loss_type = "ForCausalLM"
    return model


def _bert_config(
    vocab_size: int,
    *,
    hidden_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    intermediate_size: int,
    max_position_embeddings: int,
    dropout: float,
    pad_token_id: int,
    **overrides: Any,
) -> Any:
    check_range("vocab_size", vocab_size, 1, 2**24, integer=True)
    check_range("num_hidden_layers", num_hidden_layers, 1, 256, integer=True)
    check_range("intermediate_size", intermediate_size, 1, 2**18, integer=True)
    check_range("max_position_embeddings", max_position_embeddings, 1, 2**20, integer=True)
    check_range("pad_token_id", pad_token_id, 0, vocab_size - 1, integer=True)
    _check_dims(hidden_size, num_attention_heads, "hidden_size", "num_attention_heads")
    check_probability("dropout", dropout, open_high=True)
    from transformers import BertConfig

    return BertConfig(
        vocab_size=int(vocab_size),
        hidden_size=int(hidden_size),
        num_hidden_layers=int(num_hidden_layers),
        num_attention_heads=int(num_attention_heads),
        intermediate_size=int(intermediate_size),
        max_position_embeddings=int(max_position_embeddings),
        hidden_dropout_prob=float(dropout),
        attention_probs_dropout_prob=float(dropout),
        pad_token_id=int(pad_token_id),
        **overrides,
    )


def tiny_bert_classifier(
    vocab_size: int,
    *,
    num_labels: int = 2,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 128,
    dropout: float = 0.0,
    pad_token_id: int = 0,
    seed: int = 0,
    **config_overrides: Any,
) -> BertForSequenceClassification:
    """A ``BertForSequenceClassification`` from a small ``BertConfig`` (weights seeded by ``seed``).

    ``pad_token_id=0`` matches :func:`~privnlp.models.train_wordpiece_tokenizer` (``[PAD]`` = 0).

    Args:
        vocab_size: number of token ids, in [1, 2**24] (``len(tokenizer)``).
        num_labels: output classes, in [1, 2**20].
        hidden_size: hidden width, in [1, 65536], divisible by ``num_attention_heads``.
        num_hidden_layers: encoder layers, in [1, 256].
        num_attention_heads: attention heads, in [1, 1024].
        intermediate_size: feed-forward width, in [1, 2**18].
        max_position_embeddings: longest sequence in tokens, in [1, 2**20].
        dropout: hidden and attention dropout probability, in [0, 1).
        pad_token_id: id of the padding token, in [0, vocab_size - 1].
        seed: seeds the weight initialisation only.
        **config_overrides: any other ``BertConfig`` field.

    Returns:
        A ``transformers.BertForSequenceClassification`` in train mode.

    Raises:
        InvalidArgument: a size or id outside its range, or ``hidden_size`` not divisible by the heads.
    """
    check_range("num_labels", num_labels, 1, 2**20, integer=True)
    from transformers import BertForSequenceClassification

    cfg = _bert_config(
        vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        dropout=dropout,
        pad_token_id=pad_token_id,
        num_labels=int(num_labels),
        **config_overrides,
    )
    with seeded(seed):
        model = BertForSequenceClassification(cfg)
    return model


def tiny_bert_mlm(
    vocab_size: int,
    *,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 128,
    dropout: float = 0.0,
    pad_token_id: int = 0,
    tie_word_embeddings: bool = True,
    seed: int = 0,
    **config_overrides: Any,
) -> BertForMaskedLM:
    """A ``BertForMaskedLM`` from a small ``BertConfig`` (weights seeded by ``seed``).

    The sizes, ``dropout``, ``pad_token_id`` and ``seed`` are those of :func:`tiny_bert_classifier`.

    Args:
        tie_word_embeddings: share the input embedding with the MLM decoder.
        **config_overrides: any other ``BertConfig`` field.

    Raises:
        InvalidArgument: a size or id outside its range.
    """
    from transformers import BertForMaskedLM

    cfg = _bert_config(
        vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        dropout=dropout,
        pad_token_id=pad_token_id,
        tie_word_embeddings=bool(tie_word_embeddings),
        **config_overrides,
    )
    with seeded(seed):
        model = BertForMaskedLM(cfg)
    return model
