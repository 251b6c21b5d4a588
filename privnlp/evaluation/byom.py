"""Audit your own model and data (issue #17): ``audit_model(model, tokenizer, texts, attacks=...)``.

A local Hugging Face checkpoint (causal LM or sequence classifier) and the user's records become the
observation the gradient attacks read: one client's FedSGD update on a batch of ``batch_size`` of the
records (``privnlp.evaluation.scenarios.gradient.client_update``, the same code as the
``fedsgd.eavesdropper`` scenario). A causal LM is attacked by FILM (``film-recovering-private-text-in-
fl.txt``); a classifier by RLG (labels) and LAMP (text, given labels and lengths as in the LAMP paper),
with the labels the user gives or, when none are given, the model's own predictions. The result is the
usual :class:`~privnlp.core.report.LeakageReport`, its one column labelled "as given" (privnlp applied
no defense; there is no undefended baseline); an attack that does not apply to the model is named in
the report's notes with the reason. With ``canaries=k`` (causal LM), k canaries are inserted by a short fine-tune
of a copy of the model on the records, and black-box canary exposure / extraction run on that copy.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from privnlp.core.claims import Adversary, PrivacyClaim, ThreatModel
from privnlp.core.errors import InvalidArgument, check_range
from privnlp.core.observations import BlackBoxLM, GradientObservation
from privnlp.core.protocols import Mechanism, Scenario, ScenarioRun, Trial
from privnlp.core.registry import ATTACKS
from privnlp.core.rng import as_numpy, seed_of
from privnlp.data import make_canary
from privnlp.models.training import train_lm

from .audit import audit
from .scenarios.gradient import _lm_batch_dict, client_update

__all__ = ["audit_model", "model_kind", "load_checkpoint", "report_name"]


def report_name(path: Any, report_dir: Any) -> str:
    """The report's name: the checkpoint folder's basename, unless ``report_dir`` already holds a
    report of that name from ANOTHER folder; then the basename plus 8 hex digits of the resolved path
    (two folders called ``model`` no longer overwrite each other's report)."""
    p = Path(path).expanduser().resolve()
    base = p.name or "user_model"
    prev = Path(report_dir) / f"{base}.json"
    if prev.exists():
        try:
            owner = json.loads(prev.read_text(encoding="utf-8"))["config"].get("model_path")
        except (ValueError, KeyError, OSError):
            owner = None
        if owner != str(p):
            return f"{base}-{hashlib.sha1(str(p).encode()).hexdigest()[:8]}"
    return base


def _why_not(attack_cls: Any) -> str:
    """The first paragraph of an attack class's ``applies_to`` docstring (its applicability rule)."""
    doc = inspect.getdoc(getattr(attack_cls, "applies_to", None)) or ""
    first = doc.split("\n\n")[0].replace("\n", " ").strip()
    return first or "its applies_to() check failed on this model's update"


def model_kind(model: Any) -> str:
    """``"lm"`` (causal LM) or ``"classifier"`` (sequence classifier), from the model's class / config."""
    names = [
        type(model).__name__,
        *(getattr(getattr(model, "config", None), "architectures", None) or []),
    ]
    if any("SequenceClassification" in n for n in names):
        return "classifier"
    if any("CausalLM" in n or "LMHead" in n for n in names) or hasattr(model, "lm_head"):
        return "lm"
    raise InvalidArgument(
        f"model must be a causal LM or a sequence classifier; got {type(model).__name__}"
    )


def load_checkpoint(path: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a local ``save_pretrained`` folder (offline; eval mode)."""
    p = Path(path)
    if not p.is_dir():
        raise InvalidArgument(f"model must be an existing folder (save_pretrained); got {str(p)!r}")
    if not (p / "config.json").exists():
        raise InvalidArgument(
            f"model must be a folder written by save_pretrained (config.json); got {str(p)!r}"
        )
    cfg = AutoConfig.from_pretrained(str(p), local_files_only=True)
    archs = " ".join(getattr(cfg, "architectures", None) or [])
    cls = (
        AutoModelForSequenceClassification
        if "SequenceClassification" in archs
        else AutoModelForCausalLM
    )
    model = cls.from_pretrained(str(p), local_files_only=True)
    tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    model.eval()
    return model, tok


class _AsIs(Mechanism):
    """The user's model as given (no defense applied by privnlp)."""

    name = "user_model"
    paired_attacks = ("film", "rlg", "lamp")

    def claim(self) -> PrivacyClaim:
        return PrivacyClaim.none(
            "the user's model and data as given; privnlp measures, it does not certify"
        )

    def params(self) -> dict[str, Any]:
        return {}


class UserModelScenario(Scenario):
    """Client updates of the user's model on batches of the user's records -> GradientObservation."""

    name = "user_model.fedsgd"
    threat_model = ThreatModel(
        adversary=Adversary.EAVESDROPPER,
        observes=("one client's update (all parameters)", "the current model"),
        knows=("tokenizer", "labels and lengths (classifier, as in LAMP)"),
        goal="the client's records / labels",
    )

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        texts: Sequence[str],
        *,
        labels: Sequence[int] | None = None,
        batch_size: int = 1,
        trials: int = 2,
        max_length: int = 64,
        canaries: int = 0,
        canary_pattern: str = "my pin code is {digits:4}",
        canary_repeats: int = 16,
        finetune_steps: int = 60,
    ) -> None:
        super().__init__("quick")
        self.canaries, self.canary_pattern = canaries, canary_pattern
        self.canary_repeats, self.finetune_steps = canary_repeats, finetune_steps
        self._model, self._tok, self._texts = model, tokenizer, list(texts)
        self._labels = None if labels is None else [int(y) for y in labels]
        self.kind = model_kind(model)
        self.batch_size, self.trials, self.max_length = batch_size, trials, max_length
        self.n_texts = len(self._texts)

    def _canary_trials(self, gen: Any) -> list:
        cans = [make_canary(self.canary_pattern, rng=gen) for _ in range(self.canaries)]
        data = list(self._texts) + [c.text for c in cans for _ in range(self.canary_repeats)]
        m = copy.deepcopy(self._model)
        train_lm(
            m,
            self._tok,
            data,
            steps=self.finetune_steps,
            batch_size=8,
            lr=3e-3,
            max_length=self.max_length,
            rng=int(gen.integers(0, 2**31 - 1)),
        )
        m.eval()
        return [
            Trial(
                BlackBoxLM(
                    model=m,
                    tokenizer=self._tok,
                    kind="causal",
                    meta={"canary_pattern": c.pattern, "canary_space": c.randomness_space},
                ),
                c,
            )
            for c in cans
        ]

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        gen, tok, model = as_numpy(rng), self._tok, self._model
        b = min(self.batch_size, len(self._texts))
        trials = []
        for _ in range(self.trials):
            idx = [int(i) for i in gen.choice(len(self._texts), size=b, replace=False)]
            texts = [self._texts[i] for i in idx]
            if self.kind == "lm":
                batch = _lm_batch_dict(tok, texts, self.max_length)
                grads, _ = client_update(model, batch, None, rng=seed_of(gen))
                gt_texts = [
                    tok.decode([t for t in row[: int(mk.sum())] if t != tok.eos_token_id]).strip()
                    for row, mk in zip(batch["input_ids"].tolist(), batch["attention_mask"])
                ]
                ids = batch["input_ids"][batch["attention_mask"].bool()].tolist()
                obs = GradientObservation(
                    model=model, gradients=grads, batch_size=b, tokenizer=tok, meta={"task": "lm"}
                )
                gt = {
                    "texts": gt_texts,
                    "token_ids": sorted(set(ids)),
                    "entities": [[] for _ in texts],
                    "labels": batch["labels"][:, 1:][batch["labels"][:, 1:] >= 0].tolist(),
                }
            else:
                enc = tok(
                    texts,
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                inputs = {
                    k: v
                    for k, v in enc.items()
                    if k in ("input_ids", "attention_mask", "token_type_ids")
                }
                if self._labels is not None:
                    labels = [self._labels[i] for i in idx]
                else:
                    with torch.no_grad():
                        labels = [int(x) for x in model(**inputs).logits.argmax(-1).tolist()]
                batch = {**inputs, "labels": torch.tensor(labels)}
                grads, _ = client_update(model, batch, None, rng=seed_of(gen))
                lengths = [int(x) for x in enc["attention_mask"].sum(1).tolist()]
                obs = GradientObservation(
                    model=model,
                    gradients=grads,
                    batch_size=b,
                    tokenizer=tok,
                    labels=labels,
                    lengths=lengths,
                    meta={"task": "classifier"},
                )
                ids = enc["input_ids"][enc["attention_mask"].bool()].tolist()
                gt = {"texts": texts, "labels": labels, "token_ids": sorted(set(ids))}
            trials.append(Trial(obs, gt))
        if self.canaries and self.kind == "lm":
            trials += self._canary_trials(gen)
        return ScenarioRun(
            trials=tuple(trials),
            utility={},
            config={"kind": self.kind, "batch_size": b, "trials": self.trials},
        )


def audit_model(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    attacks: Sequence[Any] | None = None,
    *,
    labels: Sequence[int] | None = None,
    batch_size: int = 1,
    trials: int = 2,
    max_length: int = 64,
    canaries: int = 0,
    canary_pattern: str = "my pin code is {digits:4}",
    canary_repeats: int = 16,
    finetune_steps: int = 60,
    seed: int = 0,
    progress: bool = False,
    model_path: Any = None,
) -> Any:
    """Run the applicable gradient attacks on ``model`` fine-tuned / served on ``texts``; a LeakageReport.

    ``attacks`` default: ``("film",)`` for a causal LM, ``("rlg", "lamp")`` for a classifier.
    ``labels`` (classifier only): the records' labels; default: the model's predictions.
    ``canaries`` (causal LM only): insert that many canaries (``canary_pattern``, each repeated
    ``canary_repeats`` times among ``texts``) by a ``finetune_steps``-step fine-tune of a copy of the model,
    then measure black-box canary exposure and extraction (Carlini et al.'s secret sharer).
    ``model_path``: the checkpoint folder, recorded in the report (``config["model_path"]``).
    Attacks that did not apply are named in the report's notes with their applicability rule.
    """

    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if not texts:
        raise InvalidArgument("texts must contain at least one non-empty string")
    check_range("batch_size", batch_size, 1, 4096, integer=True)
    check_range("trials", trials, 1, 10**4, integer=True)
    if labels is not None and len(labels) != len(texts):
        raise InvalidArgument(
            f"labels must have one entry per text ({len(texts)}); got {len(labels)}"
        )
    scen = UserModelScenario(
        model,
        tokenizer,
        texts,
        labels=labels,
        batch_size=batch_size,
        trials=trials,
        max_length=max_length,
        canaries=canaries,
        canary_pattern=canary_pattern,
        canary_repeats=canary_repeats,
        finetune_steps=finetune_steps,
    )
    if attacks is None:
        attacks = ("film",) if scen.kind == "lm" else ("rlg", "lamp")
        if canaries and scen.kind == "lm":
            attacks = attacks + ("canary_exposure", "canary_extraction")
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        rep = audit(
            _AsIs(), scen, list(attacks), seeds=(int(seed),), baseline=False, progress=progress
        )
    finally:
        model.train(was_training)

    measured = {a.attack for a in rep.attacks}
    notes = list(rep.notes)
    for a in attacks:
        name, cls = (a, ATTACKS.get(a)) if isinstance(a, str) else (a.name, type(a))
        if name not in measured:
            notes.append(f"{name} did not apply to this {scen.kind}: {_why_not(cls)}")
    return replace(
        rep,
        notes=tuple(notes),
        config={
            **rep.config,
            "system_label": "as given",
            "model_path": str(Path(model_path).expanduser().resolve()) if model_path else None,
            "model": type(model).__name__,
            "kind": scen.kind,
            "n_texts": len(texts),
            "batch_size": batch_size,
            "trials": trials,
        },
    )
