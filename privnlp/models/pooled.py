"""A mean-pooling cosine classifier over a pretrained sentence encoder (issue #29 item 6).

Hugging Face's ``AutoModelForSequenceClassification`` puts a new head on the ``[CLS]`` token's pooler output. A
sentence encoder such as all-MiniLM-L6-v2 was trained through *mean pooling* and cosine similarity, so its
``[CLS]`` pooler is not the representation it learned. Li et al. 2022 ("Large language models can be strong
differentially private learners", ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` cites it) find that DP
fine-tuning gains most when the fine-tuning objective matches pretraining (their head is the pretrained LM head
restricted to label words). The analogue for a sentence encoder is :class:`MeanPoolClassifier`: the masked mean of
the last hidden states, scaled to unit norm, times a linear head, times a fixed ``scale`` (a cosine classifier),
with the head optionally initialised from the encoder's embeddings of one public text per class
(:meth:`MeanPoolClassifier.init_head_from_texts`: e.g. the class's description; data-independent, so it costs no
privacy).

Saved with :meth:`~MeanPoolClassifier.save_pretrained`: the encoder as Hugging Face writes it (``AutoModel`` loads
it) plus ``privnlp_head.json`` and ``privnlp_head.safetensors``; :meth:`~MeanPoolClassifier.from_pretrained` loads
the whole classifier back.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import MODEL_MAPPING, AutoConfig, AutoModel
from transformers.modeling_outputs import SequenceClassifierOutput

from privnlp.core.errors import InvalidArgument, check_positive

__all__ = ["MeanPoolClassifier", "HEAD_CONFIG", "HEAD_WEIGHTS", "saved_encoder_kwargs"]

HEAD_CONFIG = "privnlp_head.json"
HEAD_WEIGHTS = "privnlp_head.safetensors"


def saved_encoder_kwargs(folder: str | os.PathLike) -> dict[str, Any]:
    """``AutoModel.from_pretrained`` keyword arguments for the encoder of a folder written by
    :meth:`MeanPoolClassifier.save_pretrained`.

    The classifier drops the encoder's ``[CLS]`` pooler (it is never read), so the saved checkpoint has no pooler
    weights; a model class that builds one by default (BERT, RoBERTa, ...: ``add_pooling_layer``) would initialise
    it at random and report its weights MISSING on every reload. Such a class is built without one; a class
    without the argument (DistilBERT, ...) gets nothing.
    """
    config = AutoConfig.from_pretrained(folder)
    try:
        model_cls = MODEL_MAPPING[type(config)]  # the class AutoModel builds for this config
    except KeyError:  # not an AutoModel architecture: AutoModel's own error says so when it loads
        return {}
    if "add_pooling_layer" in inspect.signature(model_cls.__init__).parameters:
        return {"add_pooling_layer": False}
    return {}


class MeanPoolClassifier(nn.Module):
    """``scale * head(mean_pool(encoder(x)) / ||mean_pool(encoder(x))||)``.

    Args:
        encoder: a Hugging Face base model (``AutoModel``: its output has ``last_hidden_state``).
        num_labels: classes (>= 2).
        scale: the fixed logit scale of the cosine classifier (> 0; 20 as in sentence-transformers' losses).
        id2label: class names by index (stored in the encoder's config, as ``AutoModelForSequenceClassification``
            does).
    """

    def __init__(
        self,
        encoder: nn.Module,
        num_labels: int,
        *,
        scale: float = 20.0,
        id2label: dict[int, str] | None = None,
    ) -> None:
        super().__init__()
        if int(num_labels) < 2:
            raise InvalidArgument(f"num_labels must be >= 2; got {num_labels!r}")
        check_positive("scale", scale)
        hidden = getattr(encoder.config, "hidden_size", None)
        if not isinstance(hidden, int):
            raise InvalidArgument(
                f"encoder: {type(encoder).__name__}'s config has no integer hidden_size"
            )
        if getattr(encoder, "pooler", None) is not None:
            encoder.pooler = None  # the [CLS] pooler is not read: no untrained-by-design parameters
        self.encoder = encoder
        self._encoder_params = frozenset(inspect.signature(encoder.forward).parameters)
        self.head = nn.Linear(hidden, int(num_labels))
        self.scale = float(scale)
        self.config = encoder.config
        labels = id2label or {i: f"LABEL_{i}" for i in range(int(num_labels))}
        self.config.id2label = {int(k): str(v) for k, v in labels.items()}
        self.config.label2id = {v: k for k, v in self.config.id2label.items()}

    def pool(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **ids: Any
    ) -> torch.Tensor:
        """The unit-norm masked mean of the last hidden states, ``[batch, hidden]``; ``ids``: the
        ``position_ids`` / ``token_type_ids`` the encoder's forward accepts (others are dropped)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        extra = {k: v for k, v in ids.items() if v is not None and k in self._encoder_params}
        h = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, **extra
        ).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        p = (h * m).sum(1) / m.sum(1).clamp_min(1.0)
        return p / p.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **_: Any,
    ) -> SequenceClassifierOutput:
        # position / token type ids are parameters here so that DP-SGD's pre-hook can pass them with a batch axis
        # (per-example embedding gradients need one); the encoder gets those its forward accepts
        pooled = self.pool(
            input_ids, attention_mask, position_ids=position_ids, token_type_ids=token_type_ids
        )
        logits = self.scale * self.head(pooled)
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)

    @torch.no_grad()
    def init_head_from_texts(self, tokenizer: Any, texts: Sequence[str]) -> None:
        """Set class ``i``'s weight to the pooled embedding of ``texts[i]`` and the biases to 0.

        Use public, data-independent texts (a description of each class written before looking at the data):
        the head then starts as the encoder's zero-shot classifier, at no privacy cost.
        """
        if len(texts) != self.head.out_features:
            raise InvalidArgument(
                f"texts: one per class ({self.head.out_features}); got {len(texts)}"
            )
        if not all(isinstance(t, str) and t.strip() for t in texts):
            raise InvalidArgument("texts: every class needs a non-empty string")
        was = self.training
        self.eval()
        dev = self.head.weight.device
        enc = tokenizer(list(texts), padding=True, truncation=True, return_tensors="pt")
        pooled = self.pool(enc["input_ids"].to(dev), enc["attention_mask"].to(dev))
        self.head.weight.copy_(pooled.to(self.head.weight.dtype))
        self.head.bias.zero_()
        self.train(was)

    def get_input_embeddings(self) -> nn.Module:
        return self.encoder.get_input_embeddings()

    def get_output_embeddings(self) -> None:
        return None

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """The encoder (``save_pretrained``; ``AutoModel`` loads it) plus the head's config and weights."""
        folder = Path(folder)
        self.encoder.save_pretrained(folder)
        (folder / HEAD_CONFIG).write_text(
            json.dumps(
                {
                    "architecture": "MeanPoolClassifier",
                    "pooling": "mean",
                    "normalize": True,
                    "scale": self.scale,
                    "id2label": {str(k): v for k, v in self.config.id2label.items()},
                },
                indent=2,
            )
        )
        save_file(
            {k: v.detach().contiguous().cpu() for k, v in self.head.state_dict().items()},
            str(folder / HEAD_WEIGHTS),
        )

    @classmethod
    def from_pretrained(
        cls, folder: str | os.PathLike, *, encoder: nn.Module | None = None, **kwargs: Any
    ) -> MeanPoolClassifier:
        """Load a folder written by :meth:`save_pretrained` (``kwargs`` go to ``AutoModel.from_pretrained``;
        ``encoder``: the folder's base model, already loaded)."""
        folder = Path(folder)
        if not (folder / HEAD_CONFIG).is_file() or not (folder / HEAD_WEIGHTS).is_file():
            raise InvalidArgument(
                f"{folder}: no {HEAD_CONFIG} / {HEAD_WEIGHTS} (not saved by MeanPoolClassifier.save_pretrained)"
            )
        if encoder is None:
            encoder = AutoModel.from_pretrained(
                folder, **{**saved_encoder_kwargs(folder), **kwargs}
            )
        cfg = json.loads((folder / HEAD_CONFIG).read_text())
        id2label = {int(k): v for k, v in cfg["id2label"].items()}
        model = cls(encoder, len(id2label), scale=cfg["scale"], id2label=id2label)
        model.head.load_state_dict(load_file(str(folder / HEAD_WEIGHTS)))
        return model.eval()
