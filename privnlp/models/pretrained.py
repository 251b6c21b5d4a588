"""Loading user checkpoints with ``from_pretrained`` (local folders; the Hub only when online).

privnlp itself never downloads weights: its own models are built and trained here
(:func:`~privnlp.models.bundled_lm`). Users with a local checkpoint (a folder written by
``save_pretrained``) load it with :func:`load_lm` / :func:`load_classifier`. A Hub name is
resolved from the local HF cache only when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set,
read at call time — not only at import time as huggingface_hub does — and a missing checkpoint
raises :class:`CheckpointNotFound` naming the path and how to provide the weights.
(Models loaded here are the targets of the attacks in ``../shared/papers/``, e.g.
``dp-bert-and-dp-wordpiece.txt`` for the secret sharer.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import transformers

from privnlp.core.errors import InvalidArgument

from ._seed import hf_quiet, seeded
from .builders import fix_loss_type

__all__ = [
    "load_lm",
    "load_classifier",
    "load_mean_pool_classifier",
    "CheckpointNotFound",
    "hub_offline",
]

_TRUE = {"1", "true", "yes", "on"}


class CheckpointNotFound(InvalidArgument):
    """No usable checkpoint at the given path / name (and the Hub may not be used)."""


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` is set to a true value right now."""
    return any(
        os.environ.get(v, "").strip().lower() in _TRUE
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _load(
    auto_cls_name: str,
    name_or_path: str | os.PathLike,
    what: str,
    with_tokenizer: bool,
    local_files_only: bool | None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path).strip():
        raise InvalidArgument(
            f"name_or_path must be a non-empty path or model name; got {name_or_path!r}"
        )

    src = str(name_or_path)
    is_dir = Path(src).expanduser().is_dir()
    offline = hub_offline() if local_files_only is None else bool(local_files_only)
    local_only = True if is_dir else offline
    auto_cls = getattr(transformers, auto_cls_name)
    try:
        with (
            seeded(0),
            hf_quiet(),
        ):  # missing heads are initialised: keep the caller's RNG untouched
            model = auto_cls.from_pretrained(
                str(Path(src).expanduser()) if is_dir else src,
                local_files_only=local_only,
                **kwargs,
            )
        tok = None
        if with_tokenizer:
            tok = transformers.AutoTokenizer.from_pretrained(
                str(Path(src).expanduser()) if is_dir else src, local_files_only=local_only
            )
    except (OSError, ValueError) as e:
        if is_dir:
            how = (
                f"the folder exists but does not hold a complete {what} checkpoint (config.json + "
                "model.safetensors"
                + (" + tokenizer files" if with_tokenizer else "")
                + "); write it with model.save_pretrained(path) and tokenizer.save_pretrained(path)"
            )
        elif local_only:
            how = (
                "HF_HUB_OFFLINE is set (or local_files_only=True), so nothing is downloaded and the name is "
                "not in the local Hugging Face cache; on a machine with network run "
                f"`hf download {src} --local-dir DIR`, copy DIR here and pass DIR, "
                "or use privnlp's own trained-here models (privnlp.models.bundled_lm / bundled_bert_classifier)"
            )
        else:
            how = (
                "it is not a local folder and could not be fetched from the Hugging Face Hub; pass the path of a "
                "folder written by save_pretrained, or set HF_HUB_OFFLINE=1 to use the local cache only"
            )
        raise CheckpointNotFound(
            f"name_or_path={src!r}: cannot load a {what}: {how} ({type(e).__name__}: {e})"
        ) from e
    model.eval()
    fix_loss_type(model)
    if tok is not None and tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    return model, tok


def load_lm(
    name_or_path: str | os.PathLike,
    *,
    with_tokenizer: bool = True,
    local_files_only: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """``(AutoModelForCausalLM, AutoTokenizer | None)`` from a local folder (or a Hub name when allowed).

    ``local_files_only`` defaults to whether ``HF_HUB_OFFLINE`` is set; a local folder never hits
    the network. The model is returned in eval mode; a tokenizer without pad token gets eos as pad.

    Args:
        name_or_path: a folder written by ``save_pretrained``, or a Hugging Face Hub model name.
        with_tokenizer: also load the tokenizer (otherwise the second element is ``None``).
        local_files_only: never download; ``None`` = whether ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` is set.
        **kwargs: passed to ``from_pretrained``.

    Returns:
        ``(model, tokenizer)``, the model in eval mode.

    Raises:
        InvalidArgument: ``name_or_path`` is empty or not a string / path.
        CheckpointNotFound: the folder is not a complete checkpoint, or the name cannot be loaded
            (offline and not cached, or not on the Hub); the message says how to provide the weights.
    """
    return _load(
        "AutoModelForCausalLM",
        name_or_path,
        "causal LM",
        with_tokenizer,
        local_files_only,
        **kwargs,
    )


def load_classifier(
    name_or_path: str | os.PathLike,
    *,
    with_tokenizer: bool = True,
    local_files_only: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """``(AutoModelForSequenceClassification, AutoTokenizer | None)``; same rules as :func:`load_lm`.

    Args:
        name_or_path: a folder written by ``save_pretrained``, or a Hugging Face Hub model name.
        with_tokenizer: also load the tokenizer (otherwise the second element is ``None``).
        local_files_only: never download; ``None`` = whether ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` is set.
        **kwargs: passed to ``from_pretrained`` (e.g. ``num_labels``).

    Returns:
        ``(model, tokenizer)``, the model in eval mode.

    Raises:
        InvalidArgument: ``name_or_path`` is empty or not a string / path.
        CheckpointNotFound: the checkpoint cannot be loaded (see :func:`load_lm`).
    """
    return _load(
        "AutoModelForSequenceClassification",
        name_or_path,
        "sequence classifier",
        with_tokenizer,
        local_files_only,
        **kwargs,
    )


def load_mean_pool_classifier(
    name_or_path: str | os.PathLike,
    *,
    num_labels: int,
    id2label: dict[int, str] | None = None,
    scale: float = 20.0,
    with_tokenizer: bool = True,
    local_files_only: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """``(MeanPoolClassifier, AutoTokenizer | None)``: a checkpoint's base model (``AutoModel``) under a new
    mean-pooling cosine head (:class:`~privnlp.models.pooled.MeanPoolClassifier`); same rules as :func:`load_lm`.

    A folder written by ``MeanPoolClassifier.save_pretrained`` loads with its trained head instead: ``num_labels``
    and (when given) ``id2label`` must then match the saved ones, and ``scale`` is the saved one.

    Args:
        name_or_path: a folder written by ``save_pretrained`` (a base model, or a saved ``MeanPoolClassifier``), or
            a Hugging Face Hub model name.
        num_labels: the number of classes (>= 2).
        id2label: class names by index (``None``: ``LABEL_i``, or the saved head's).
        scale: the cosine classifier's fixed logit scale (> 0) of a new head.
        with_tokenizer: also load the tokenizer (otherwise the second element is ``None``).
        local_files_only: never download; ``None`` = whether ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` is set.
        **kwargs: passed to ``AutoModel.from_pretrained``.

    Returns:
        ``(model, tokenizer)``, the model in eval mode.

    Raises:
        InvalidArgument: a saved head whose classes differ from ``num_labels`` / ``id2label`` (fine-tuning it on
            other classes would keep the old names on new meanings: start from the base encoder instead).
    """
    from .pooled import HEAD_CONFIG, MeanPoolClassifier, saved_encoder_kwargs

    folder = Path(str(name_or_path)).expanduser()
    saved = (folder / HEAD_CONFIG).is_file()
    if saved:  # saved without the [CLS] pooler: do not build (and report MISSING) a random one
        kwargs = {**saved_encoder_kwargs(folder), **kwargs}
    encoder, tok = _load(
        "AutoModel", name_or_path, "base model", with_tokenizer, local_files_only, **kwargs
    )
    if saved:
        model = MeanPoolClassifier.from_pretrained(folder, encoder=encoder)
        if model.head.out_features != int(num_labels):
            raise InvalidArgument(
                f"{name_or_path}: its saved head has {model.head.out_features} classes; got num_labels={num_labels}"
            )
        asked = None if id2label is None else {int(k): str(v) for k, v in id2label.items()}
        if asked is not None and asked != model.config.id2label:
            raise InvalidArgument(
                f"{name_or_path}: its saved head's classes are {model.config.id2label}; got id2label={asked} "
                "(start from the base encoder to train a head for other classes)"
            )
        return model, tok
    return MeanPoolClassifier(encoder, num_labels, scale=scale, id2label=id2label).eval(), tok
