"""Tokenizer training with Hugging Face ``tokenizers`` (no Hub download).

* :func:`train_bpe_tokenizer` — GPT-2 style byte-level BPE, ``<|endoftext|>`` as bos/eos/unk/pad.
* :func:`train_wordpiece_tokenizer` — BERT style WordPiece with ``[PAD] [UNK] [CLS] [SEP] [MASK]``
  and the BERT ``[CLS] A [SEP] (B [SEP])`` post-processor (the DP-WordPiece setting of
  ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` trains this vocabulary on private text —
  see ``privnlp.mechanisms.vocab`` for the private variant).

Reproducibility: the ``tokenizers`` trainers use Rayon threads and Rust hash maps whose seeds
change per process (not controlled by ``PYTHONHASHSEED``). The byte-level BPE trainer is
deterministic (alphabet sorted by code point, count ties broken by pair id), but the WordPiece
trainer is not (huggingface/tokenizers#1794): it gives the ``##c`` continuation characters ids in
hash order, which then changes how count ties between merges are broken — we measured different
token *sets* (e.g. ``visit``/``##ited`` vs none) between two runs even in one process, with
parallelism off. So :func:`train_wordpiece_tokenizer` learns its vocabulary with the
deterministic BPE trainer on words whose continuation characters are re-coded as private-use
code points, maps the pieces back to ``c...`` / ``##c...`` and renumbers them canonically; the
result is loaded into a standard ``tokenizers`` WordPiece model (greedy longest-match, like BERT).
Both trainers also run with ``TOKENIZERS_PARALLELISM=false`` for the duration of the call
(restored afterwards) on inputs in a canonical (sorted) order; the tests check identical builds
in one process, across processes and for shuffled inputs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from privnlp.core.errors import InvalidArgument, check_range

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerFast

__all__ = ["train_bpe_tokenizer", "train_wordpiece_tokenizer", "EOT", "BERT_SPECIAL_TOKENS"]

EOT = "<|endoftext|>"
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@contextlib.contextmanager
def _no_parallelism() -> Iterator[None]:
    """Switch tokenizers' Rayon parallelism off for a deterministic train, then restore the env."""
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = old


def _canonical_texts(texts: Iterable[str], name: str = "texts") -> list[str]:
    if isinstance(texts, str):
        raise InvalidArgument(f"{name} must be an iterable of strings, not a single string")
    out = []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidArgument(f"{name}[{i}] must be a str; got {type(t).__name__}")
        out.append(t)
    if not any(t.strip() for t in out):
        raise InvalidArgument(f"{name} must contain at least one non-empty string")
    # word counts do not depend on order, but tie-breaking inside the trainer can: canonical order.
    return sorted(out)


def _canonical_wordpiece_vocab(vocab: dict[str, int]) -> dict[str, int]:
    """Re-number a WordPiece vocabulary canonically: specials, then word-initial pieces, then
    ``##`` pieces, each by (length, text). WordPiece tokenizes by greedy longest match, so ids carry
    no merge order and renumbering does not change any segmentation; it removes the hash-order
    dependence of the trainer's id assignment (tokenizers#1794)."""
    rest = [t for t in vocab if t not in BERT_SPECIAL_TOKENS]
    rest.sort(key=lambda t: (t.startswith("##"), len(t), t))
    return {t: i for i, t in enumerate([*BERT_SPECIAL_TOKENS, *rest])}


def train_bpe_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 1000,
    *,
    min_frequency: int = 1,
    model_max_length: int = 128,
) -> PreTrainedTokenizerFast:
    """Train a GPT-2 style byte-level BPE tokenizer on ``texts``.

    ``vocab_size`` counts the 256 byte symbols and ``<|endoftext|>`` (allowed range
    [257, 2**20]); the result may be smaller when the corpus has fewer merges to offer.
    ``<|endoftext|>`` is the bos, eos, unk and pad token; ``model_max_length`` is set.
    Decoding ``encode(text)`` gives ``text`` back exactly (byte level, no prefix space).

    Args:
        texts: the training corpus (any iterable of strings; read once).
        vocab_size: target vocabulary size in tokens, in [257, 2**20].
        min_frequency: a merge needs at least this many occurrences, in [1, 2**31].
        model_max_length: the tokenizer's maximum sequence length in tokens, in [1, 2**31].

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` (deterministic: same texts, same tokenizer).

    Raises:
        InvalidArgument: an argument outside its range, ``texts`` a single string, holding a non-string,
            or without any non-empty string.
    """
    check_range("vocab_size", vocab_size, 257, 2**20, integer=True)
    check_range("min_frequency", min_frequency, 1, 2**31, integer=True)
    check_range("model_max_length", model_max_length, 1, 2**31, integer=True)
    corpus = _canonical_texts(texts)
    # deferred: transformers (2 s): privnlp --help imports this module
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=int(vocab_size),
        min_frequency=int(min_frequency),
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    with _no_parallelism():
        tok.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOT,
        eos_token=EOT,
        unk_token=EOT,
        pad_token=EOT,
        model_max_length=int(model_max_length),
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.padding_side = "right"
    return fast


def learn_wordpiece_pieces(
    word_chunks: Iterable[str],
    vocab_size: int,
    *,
    special_tokens: Sequence[str] = (),
    initial_alphabet: Iterable[str] = (),
    min_frequency: int = 1,
    both_forms: bool = True,
) -> list[str]:
    """Learn a WordPiece vocabulary (pieces ``c...`` / ``##c...``, specials excluded) deterministically.

    ``word_chunks``: strings of whitespace-separated, already normalised words; this is everything
    the trainer sees. HF tokenizers' ``WordPieceTrainer`` is a BPE trainer whose ``##`` symbols get
    ids in Rust hash-map order, which changes how tied merges are broken from run to run
    (tokenizers#1794). Here every character gets a word-initial and a continuation symbol (a
    private-use code point), the deterministic ``BpeTrainer`` (alphabet sorted by code point, count
    ties broken by pair id) learns the merges, and pieces are mapped back to ``##`` form: the same
    vocabulary every run, in every process, for any input order of equal counts.

    ``both_forms=True`` seeds the alphabet with the word-initial *and* the ``##`` form of every
    character seen; ``False`` mirrors ``WordPieceTrainer``: ``initial_alphabet`` (word-initial forms)
    plus the forms actually seen in the words.
    """

    chunks = list(word_chunks)
    chars = sorted(
        {c for ch in chunks for w in ch.split() for c in w} | set(initial_alphabet) - {" "}
    )
    if len(chars) > 2 * 65534:
        raise InvalidArgument(
            f"the words use {len(chars)} distinct characters; at most {2 * 65534} supported"
        )
    cont = {c: chr((0xF0000 if i < 65534 else 0x100000 - 65534) + i) for i, c in enumerate(chars)}
    back = {v: k for k, v in cont.items()}
    encoded = [
        " ".join(w[0] + "".join(cont[c] for c in w[1:]) for w in ch.split()) for ch in chunks
    ]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if both_forms:
        alphabet = [*chars, *cont.values()]
    else:
        alphabet = sorted(
            set(initial_alphabet) - {" "}
            | {w[0] for ch in encoded for w in ch.split()}
            | {c for ch in encoded for w in ch.split() for c in w[1:]}
        )
    trainer = trainers.BpeTrainer(
        vocab_size=int(vocab_size),
        min_frequency=int(min_frequency),
        special_tokens=list(special_tokens),
        show_progress=False,
        initial_alphabet=alphabet,
    )
    with _no_parallelism():
        bpe.train_from_iterator(encoded, trainer=trainer, length=len(encoded))
    pieces: list[str] = []
    specials = set(special_tokens)
    for piece in sorted(bpe.get_vocab()):
        if piece in specials:
            continue
        if piece[0] in back:
            pieces.append("##" + "".join(back[c] for c in piece))
        else:
            pieces.append(piece[0] + "".join(back.get(c, c) for c in piece[1:]))
    return pieces


def train_wordpiece_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 1000,
    *,
    min_frequency: int = 1,
    lowercase: bool = True,
    model_max_length: int = 128,
) -> PreTrainedTokenizerFast:
    """Train a BERT style WordPiece tokenizer (``[PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4``).

    BERT normalizer (lowercasing by default) and pre-tokenizer, ``##`` continuation prefix,
    post-processor ``[CLS] $A [SEP]`` / ``[CLS] $A [SEP] $B [SEP]`` with token type ids.
    ``vocab_size`` allowed range [len(special)+1, 2**20]; characters never seen in training map
    to ``[UNK]``.

    Args:
        texts: the training texts.
        vocab_size: the vocabulary size including the 5 special tokens, an integer in [6, 2**20].
        min_frequency: the least count of a pair to be merged, an integer in [1, 2**31].
        lowercase: lowercase in the normalizer.
        model_max_length: the tokenizer's ``model_max_length``, an integer in [1, 2**31].

    Returns:
        A ``PreTrainedTokenizerFast``.

    Raises:
        InvalidArgument: an argument out of range, or ``texts`` without a single word.
    """
    check_range("vocab_size", vocab_size, len(BERT_SPECIAL_TOKENS) + 1, 2**20, integer=True)
    check_range("min_frequency", min_frequency, 1, 2**31, integer=True)
    check_range("model_max_length", model_max_length, 1, 2**31, integer=True)
    corpus = _canonical_texts(texts)
    from transformers import PreTrainedTokenizerFast  # deferred: transformers: light path, as above

    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=bool(lowercase)
    )
    pre = pre_tokenizers.BertPreTokenizer()
    split = [[w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(t))] for t in corpus]
    words = [w for ws in split for w in ws]
    if not words:
        raise InvalidArgument("texts must contain at least one word")
    pieces = {
        p: 0
        for p in learn_wordpiece_pieces(
            [" ".join(ws) for ws in split],
            int(vocab_size),
            special_tokens=BERT_SPECIAL_TOKENS,
            min_frequency=int(min_frequency),
        )
    }
    vocab = _canonical_wordpiece_vocab({**{t: 0 for t in BERT_SPECIAL_TOKENS}, **pieces})

    tok = Tokenizer(
        models.WordPiece(
            vocab=vocab,
            unk_token="[UNK]",
            continuing_subword_prefix="##",
            max_input_chars_per_word=100,
        )
    )
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece(prefix="##")
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=int(model_max_length),
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )
    fast.padding_side = "right"
    return fast


def _vocab_fingerprint(tokenizer: Any) -> str:
    """sha256 of the normalized serialized tokenizer (vocab token->id map, merges list, config).

    The raw ``to_str()`` lists a WordPiece vocab in hash-map order, so it is re-dumped with sorted keys.
    """

    canon = json.dumps(
        json.loads(tokenizer.backend_tokenizer.to_str()), sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canon.encode()).hexdigest()
