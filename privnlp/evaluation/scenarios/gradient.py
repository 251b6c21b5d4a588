"""Scenario ``fedsgd.eavesdropper``: a client's update on a private batch, as an eavesdropper sees it.

Papers: ``../shared/papers/film-recovering-private-text-in-fl.txt`` (Sec. 3.3, FedSGD on an LM),
``rlg-revealing-labels-from-gradients.txt`` (N samples x K local steps), ``lamp-extracting-text-from-
gradients.txt`` (FedSGD / FedAvg on a BERT classifier, known labels and lengths).

A client holds ``b`` private records, computes the gradient of the current global model on them
(FedSGD; or ``local_steps`` SGD steps, FedAvg, sending the pseudo-gradient ``(theta_0 - theta_K) / lr``),
optionally through a defense, and sends it. Defenses (``mechanism``):

* ``None``: undefended.
* an :class:`~privnlp.core.protocols.UpdateTransformer` (``gradient_pruning``, ``sign_sgd``, ``graddrop``,
  ``gaussian_noise_update``, ``random_masking``; anything with ``.transform()``): applied to the sent dict.
* an :class:`~privnlp.core.protocols.EmbeddingFreezer` (``frozen_embeddings``): the frozen rows are never
  computed nor sent (absent from the dict).
* a :class:`~privnlp.core.protocols.PrivateTrainer` (``dp_sgd``): the mechanism's own ``make_private`` (opacus)
  takes one step on the fixed batch: per-record clipping to ``max_grad_norm``, Gaussian noise ``sigma*C`` on the
  sum, divided by ``b``; the observation's ``noise_std`` is ``sigma*C/b`` (what FILM's DP threshold uses).

Three victim models: the bundled tiny GPT-2 (``task="lm"``, fine-tuned on the client's records first
so it has memorised them, as in FILM Fig. 4) and the bundled tiny BERT sentiment classifier
(``task="classifier"``, labels and lengths known to the attacker, as in LAMP), and a multi-class
BERT classifier at initialisation (``task="labels"``: ``label_classes`` classes, ``label_batch``
records per update, labels secret — RLG's setting, Sec. 2.5 of the RLG paper: batch of 10, untrained
model). The first two have no RLG signal: the tied GPT-2 has no separate output layer and a binary
head with one sample has rank ``C - 1 = S``, so every label passes RLG's LP. ``task="both"``
(default) yields trials of all three kinds; each attack's ``applies_to`` picks its own.
Utility: the victim's loss on the batch before and after applying the (defended) update.
"""

from __future__ import annotations

import copy
import functools
import warnings
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument, check_positive, check_range
from privnlp.core.observations import GradientObservation
from privnlp.core.protocols import (
    EmbeddingFreezer,
    PrivateTrainer,
    Scenario,
    ScenarioRun,
    Trial,
    UpdateTransformer,
)
from privnlp.core.registry import SCENARIOS
from privnlp.core.rng import as_numpy, as_torch, seed_of
from privnlp.data import generate_corpus, generate_sentiment
from privnlp.evaluation import realistic
from privnlp.mechanisms.training.dp_sgd import (
    per_sample_classification_loss,
    per_sample_lm_loss,
    tied_parameter_names,
)
from privnlp.models.builders import tiny_bert_classifier
from privnlp.models.bundled import bundled_bert_classifier, bundled_lm
from privnlp.models.training import lm_batch, train_lm

__all__ = ["FedSGDEavesdropper", "client_update", "lm_victim", "classifier_victim", "label_victim"]

PRESETS = {
    "quick": {
        "lm_records": 16,
        "lm_finetune_steps": 120,
        "max_length": 40,
        "trials": 2,
        "clf_trials": 1,
        "label_trials": 6,
        "label_batch": 8,
        "label_classes": 32,
    },
    "full": {
        "lm_records": 64,
        "lm_finetune_steps": 400,
        "max_length": 64,
        "trials": 8,
        "clf_trials": 4,
        "label_trials": 8,
        "label_batch": 10,
        "label_classes": 100,
    },
    # issue #17: pretrained / real-text victims (privnlp.evaluation.realistic): the realistic LM fine-tuned on
    # 16 client records (FILM), MiniLM fine-tuned on license sentences (LAMP/TAG/DLG), MiniLM with a fresh
    # 100-way head (RLG, batch 10 < hidden size 384)
    "realistic": {
        "lm_records": 16,
        "max_length": 40,
        "trials": 2,
        "clf_trials": 2,
        "label_trials": 4,
        "label_batch": 10,
        "label_classes": 100,
    },
}


@functools.lru_cache(maxsize=4)
def lm_victim(
    preset: str = "quick", seed: int = 0, device: str = "cpu"
) -> tuple[Any, Any, tuple[Any, ...]]:
    """(model, tokenizer, private records): the bundled LM fine-tuned on the client's records (the realistic
    preset's fine-tune on ``device``; the quick one, 1-2 layers, on the CPU)."""

    if preset == "realistic":
        return realistic.lm_victim(seed, device=device)
    cfg = PRESETS[preset]
    model, tok = bundled_lm("quick", seed=seed)
    model = copy.deepcopy(model)
    corpus = generate_corpus(
        seed=seed + 1
    )  # the client's own records (not in the bundled pre-training)
    recs = tuple(
        r
        for r in corpus.records  # verbose=False: measuring the length, no "longer than max" warning
        if 8 <= len(tok(r.text, verbose=False)["input_ids"]) <= cfg["max_length"] - 1
    )
    recs = recs[: cfg["lm_records"]]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        train_lm(
            model,
            tok,
            [r.text for r in recs],
            steps=cfg["lm_finetune_steps"],
            batch_size=8,
            lr=3e-3,
            max_length=cfg["max_length"],
            rng=seed,
        )
    model.eval()
    return model, tok, recs


@functools.lru_cache(maxsize=4)
def classifier_victim(
    preset: str = "quick", seed: int = 0, device: str = "cpu"
) -> tuple[Any, Any, tuple[str, ...], tuple[int, ...]]:
    if (
        preset == "realistic"
    ):  # the MiniLM fine-tune runs on ``device``; the victim comes back on the CPU
        return realistic.classifier_victim(seed, device)[:4]
    model, tok = bundled_bert_classifier("quick", seed=seed)
    data = generate_sentiment(200, seed=seed + 7)
    keep = [
        (t, y)
        for t, y in zip(data.texts, data.labels)
        if len(tok(t, verbose=False)["input_ids"]) <= 14
    ]
    return model, tok, tuple(t for t, _ in keep), tuple(int(y) for _, y in keep)


@functools.lru_cache(maxsize=4)
def label_victim(preset: str = "quick", seed: int = 0) -> tuple[Any, Any, tuple[str, ...]]:
    """(model, tokenizer, texts): a ``label_classes``-way tiny BERT classifier at initialisation (the
    start of federated training) on the bundled WordPiece tokenizer, and a pool of client texts."""

    cfg = PRESETS[preset]
    if preset == "realistic":
        return realistic.label_victim(cfg["label_classes"], seed)
    _, tok = bundled_bert_classifier("quick", seed=seed)
    model = tiny_bert_classifier(
        len(tok),
        num_labels=cfg["label_classes"],
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=128,
        pad_token_id=tok.pad_token_id,
        seed=seed + 5,
    )
    model.config.problem_type = "single_label_classification"
    model.eval()
    return model, tok, tuple(generate_sentiment(200, seed=seed + 11).texts)


def _mech_name(mechanism: Any) -> str:
    return getattr(mechanism, "name", "") or type(mechanism).__name__


def _loss(model: Any, batch: dict) -> Any:
    return model(**batch).loss


def _dp_sgd_update(
    mechanism: PrivateTrainer, m: Any, batch: dict, *, rng: Any, device: str = "cpu"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The update a DP-SGD client sends, produced by the mechanism itself (``make_private`` on opacus:
    per-example clipping to C, Gaussian noise sigma*C on the sum, divided by the batch size b).

    The eavesdropper sees one update of one fixed batch, so the scenario runs the mechanism with
    ``poisson_sampling=False`` on a one-batch loader; a budget-calibrated mechanism (``noise_multiplier``
    None) is run at sigma = 1, the setting of this scenario's cards. Tied weights (GPT-2's wte / lm_head)
    are untied by the mechanism (``tied_embeddings="untie"``): the update holds each copy's noised
    gradient under its own name, each with per-coordinate noise std sigma*C/b. The step runs on ``device``
    (``m`` is the scenario's private copy; the noise is drawn there); the update comes back on the CPU."""

    mech = copy.copy(mechanism)
    if mech.noise_multiplier is None:
        mech.noise_multiplier, mech.target_epsilon = 1.0, None
    mech.poisson_sampling = False
    mech.epochs, mech.steps = None, 1
    keys = list(batch)
    m.to(device)
    batch = {k: v.to(device) for k, v in batch.items()}
    b = int(batch["input_ids"].shape[0])
    loader = DataLoader(TensorDataset(*(batch[k] for k in keys)), batch_size=b, shuffle=False)
    tied = tied_parameter_names(m)
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.0)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=rng))
    m.train()  # opacus needs training mode (it validates it and its hooks record only then) ...
    pt = mech.make_private(m, opt, loader, rng=seed)
    for (
        mod
    ) in pt.model.modules():  # ... but the replayed update has no dropout: every module without
        if not any(True for _ in mod.parameters(recurse=False)):  # parameters of its own (dropout,
            mod.training = False  # attention wrappers, blocks; not recursive) leaves training mode
    (row,) = list(pt.data_loader)
    inputs = dict(zip(keys, row))
    labels = inputs.pop("labels")
    logits = pt.model(**inputs).logits
    per = (
        per_sample_lm_loss(logits, labels)
        if logits.dim() == 3
        else per_sample_classification_loss(logits, labels)
    )
    pt.optimizer.zero_grad()
    with (
        warnings.catch_warnings()
    ):  # opacus' hooks on a model whose inputs need no grad (token ids): expected
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        pt.loss(per).backward()
    pt.optimizer.step()  # clip, noise, scale (lr 0: the parameters do not move)
    grads = {
        n: p.grad.detach().to("cpu", copy=True)
        for n, p in pt.original_model.named_parameters()
        if p.requires_grad and p.grad is not None
    }
    sigma, C = float(pt.optimizer.noise_multiplier), float(pt.max_grad_norm)
    extras: dict[str, Any] = {
        "transform": f"dp_sgd(sigma={sigma:g},C={C:g})",
        "noise_std": sigma * C / b,
        "meta": {"dp_sgd": "the mechanism's make_private (opacus), one step on the fixed batch"},
    }
    if tied:  # the mechanism trains untied copies; the client sends each copy's noised gradient
        extras["meta"]["untied"] = [list(g) for g in tied]
    return grads, extras


def client_update(
    model: Any,
    batch: dict,
    mechanism: Any = None,
    *,
    local_steps: int = 1,
    lr: float = 0.01,
    rng: Any,
    device: str = "cpu",
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the client sends: ``(gradients dict name -> tensor, observation extras)``.

    ``batch`` holds the model's keyword inputs including ``labels``. ``model`` is not modified. ``device``: where
    a DP-SGD mechanism's private step runs (``privnlp evaluate --device``); the other updates are one small
    autograd call on the CPU victim. The update is returned on the CPU."""

    check_range("local_steps", local_steps, 1, 10**6, integer=True)
    check_positive("lr", lr)
    gen = as_torch(rng)
    m = copy.deepcopy(model)
    m.eval()  # no dropout in the update the attacker replays
    if mechanism is not None and not isinstance(
        mechanism, (PrivateTrainer, EmbeddingFreezer, UpdateTransformer)
    ):
        raise InvalidArgument(
            f"mechanism {_mech_name(mechanism)!r} is not supported by the fedsgd.eavesdropper scenario "
            "(supported: a PrivateTrainer (make_private: dp_sgd), an EmbeddingFreezer (frozen_embeddings) "
            "or an UpdateTransformer (transform(): gradient_pruning, sign_sgd, ...); core.protocols)"
        )
    if isinstance(mechanism, PrivateTrainer):
        return _dp_sgd_update(mechanism, m, batch, rng=gen, device=device)
    extras: dict[str, Any] = {"transform": None, "noise_std": None, "meta": {}}
    if isinstance(mechanism, EmbeddingFreezer):
        frozen = mechanism.apply(m)
        extras["transform"] = "frozen_embeddings"
        extras["meta"]["frozen"] = list(frozen)
    params = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    if local_steps == 1:
        g = torch.autograd.grad(_loss(m, batch), [p for _, p in params], allow_unused=True)
        grads = {
            n: (torch.zeros_like(p) if gi is None else gi.detach()) for gi, (n, p) in zip(g, params)
        }
    else:
        theta0 = {n: p.detach().clone() for n, p in params}
        opt = torch.optim.SGD([p for _, p in params], lr=lr)
        for _ in range(local_steps):
            opt.zero_grad()
            _loss(m, batch).backward()
            opt.step()
        grads = {
            n: (theta0[n] - p.detach()) / lr for n, p in params
        }  # pseudo-gradient, gradient-oriented
        extras["meta"]["update_kind"] = "pseudo_gradient"
    if isinstance(mechanism, UpdateTransformer) and not isinstance(mechanism, EmbeddingFreezer):
        t = mechanism.transform()
        grads = t(grads, rng=gen)
        extras["transform"] = getattr(t, "label", _mech_name(mechanism))
        std = getattr(t, "std", None)
        if std:
            extras["noise_std"] = float(std)
    return grads, extras


def _lm_batch_dict(tok: Any, texts: list[str], max_length: int) -> dict:
    lb = lm_batch(tok, texts, max_length=max_length)
    return {
        "input_ids": lb.input_ids,
        "attention_mask": lb.attention_mask,
        "position_ids": lb.position_ids,
        "labels": lb.labels,
    }


@SCENARIOS.register("fedsgd.eavesdropper")
class FedSGDEavesdropper(Scenario):
    """A FedSGD/FedAvg client update on ``batch_size`` private records -> :class:`GradientObservation`.

    Args:
        preset: ``"quick"``, ``"full"`` (sizes in ``PRESETS``) or ``"realistic"`` (pretrained MiniLM and the
            realistic GPT-2 on real text, :mod:`privnlp.evaluation.realistic`).
        batch_size: records per update (b).
        task: ``"lm"``, ``"classifier"``, ``"labels"`` or ``"both"`` (all three).
        local_steps: 1 = FedSGD; K > 1 = FedAvg, the pseudo-gradient ``(theta_0 - theta_K) / lr`` is sent.
        lr: local learning rate (and the server step used for the utility numbers).
        device: where the training runs (the realistic MiniLM fine-tune and a DP-SGD mechanism's step):
            ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; ``None`` = the device of ``privnlp evaluate --device``
            (:func:`privnlp.evaluation.realistic.use_device`). Observations are handed out on the CPU.
    """

    threat_model = ThreatModel(
        adversary=Adversary.EAVESDROPPER,
        observes=("one client's update (all parameters)", "the current global model"),
        knows=("tokenizer", "labels and lengths (classifier task only, as in LAMP)"),
        goal="the client's private records / labels",
    )
    utility_higher_is_better = {
        "loss_before": False,
        "loss_after_update": False,
        "loss_decrease": True,
    }

    def __init__(
        self,
        preset: str = "quick",
        batch_size: int = 1,
        task: str = "both",
        local_steps: int = 1,
        lr: float = 0.01,
        device: str | None = None,
    ) -> None:
        if preset not in PRESETS:
            raise InvalidArgument(f"preset must be one of {sorted(PRESETS)}; got {preset!r}")
        check_range("batch_size", batch_size, 1, 4096, integer=True)
        if task not in ("lm", "classifier", "labels", "both"):
            raise InvalidArgument(
                f"task must be 'lm', 'classifier', 'labels' or 'both'; got {task!r}"
            )
        check_range("local_steps", local_steps, 1, 10**4, integer=True)
        check_positive("lr", lr)
        super().__init__(preset)
        self.batch_size = batch_size
        self.task = task
        self.local_steps = local_steps
        self.lr = lr
        self.device = realistic.scenario_device(device)

    def _utility(self, model: Any, batch: dict, grads: dict) -> tuple[float, float]:
        m = copy.deepcopy(model)
        m.eval()
        with torch.no_grad():
            before = float(_loss(m, batch))
            for n, p in m.named_parameters():
                if n in grads:
                    p -= self.lr * grads[n].to(p.dtype)
            after = float(_loss(m, batch))
        return before, after

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        gen = as_numpy(rng)
        cfg = PRESETS[self.preset]
        trials: list[Trial] = []
        util: dict[str, list[float]] = {"loss_before": [], "loss_after_update": []}
        b = int(self.batch_size)
        if self.task in ("lm", "both"):
            model, tok, recs = lm_victim(self.preset, 0, self.device)
            for _ in range(cfg["trials"]):
                idx = gen.choice(len(recs), size=min(b, len(recs)), replace=False)
                chosen = [recs[int(i)] for i in idx]
                batch = _lm_batch_dict(tok, [r.text for r in chosen], cfg["max_length"])
                grads, ex = client_update(
                    model,
                    batch,
                    mechanism,
                    local_steps=self.local_steps,
                    lr=self.lr,
                    rng=seed_of(gen),
                    device=self.device,
                )
                ids = batch["input_ids"][batch["attention_mask"].bool()].tolist()
                texts = [
                    tok.decode([t for t in row[: int(mk.sum())] if t != tok.eos_token_id]).strip()
                    for row, mk in zip(batch["input_ids"].tolist(), batch["attention_mask"])
                ]
                ents = [[r.text[s.start : s.end] for s in r.spans] for r in chosen]
                obs = GradientObservation(
                    model=model,
                    gradients=grads,
                    batch_size=len(chosen),
                    tokenizer=tok,
                    lengths=None,
                    num_local_steps=self.local_steps,
                    learning_rate=self.lr if self.local_steps > 1 else None,
                    transform=ex["transform"],
                    noise_std=ex["noise_std"],
                    meta={"task": "lm", **ex["meta"]},
                )
                gt = {
                    "texts": texts,
                    "token_ids": sorted(set(ids)),
                    "entities": ents,
                    "labels": batch["labels"][:, 1:][batch["labels"][:, 1:] >= 0].tolist(),
                }
                trials.append(Trial(obs, gt))
                before, after = self._utility(model, batch, grads)
                util["loss_before"].append(before)
                util["loss_after_update"].append(after)
        if self.task in ("classifier", "both"):
            model, tok, texts_all, labels_all = classifier_victim(self.preset, 0, self.device)
            for _ in range(cfg["clf_trials"]):
                idx = gen.choice(len(texts_all), size=min(b, len(texts_all)), replace=False)
                texts = [texts_all[int(i)] for i in idx]
                labels = [labels_all[int(i)] for i in idx]
                enc = tok(texts, padding=True, return_tensors="pt")
                batch = {
                    k: v
                    for k, v in enc.items()
                    if k in ("input_ids", "attention_mask", "token_type_ids")
                }
                batch["labels"] = torch.tensor(labels)
                grads, ex = client_update(
                    model,
                    batch,
                    mechanism,
                    local_steps=self.local_steps,
                    lr=self.lr,
                    rng=seed_of(gen),
                    device=self.device,
                )
                lengths = [int(x) for x in enc["attention_mask"].sum(1).tolist()]
                obs = GradientObservation(
                    model=model,
                    gradients=grads,
                    batch_size=len(texts),
                    tokenizer=tok,
                    labels=list(labels),
                    lengths=lengths,
                    num_local_steps=self.local_steps,
                    learning_rate=self.lr if self.local_steps > 1 else None,
                    transform=ex["transform"],
                    noise_std=ex["noise_std"],
                    meta={"task": "classifier", **ex["meta"]},
                )
                ids = enc["input_ids"][enc["attention_mask"].bool()].tolist()
                trials.append(
                    Trial(obs, {"texts": texts, "labels": labels, "token_ids": sorted(set(ids))})
                )
                before, after = self._utility(model, batch, grads)
                util["loss_before"].append(before)
                util["loss_after_update"].append(after)
        if self.task in ("labels", "both"):
            model, tok, pool = label_victim(self.preset, 0)
            nb = min(int(cfg["label_batch"]), len(pool))
            for _ in range(cfg["label_trials"]):
                idx = gen.choice(len(pool), size=nb, replace=False)
                texts = [pool[int(i)] for i in idx]
                labels = [int(y) for y in gen.integers(0, cfg["label_classes"], size=nb)]
                enc = tok(
                    texts,
                    padding=True,
                    truncation=True,
                    max_length=cfg["max_length"],
                    return_tensors="pt",
                )
                batch = {
                    k: v
                    for k, v in enc.items()
                    if k in ("input_ids", "attention_mask", "token_type_ids")
                }
                batch["labels"] = torch.tensor(labels)
                grads, ex = client_update(
                    model,
                    batch,
                    mechanism,
                    local_steps=self.local_steps,
                    lr=self.lr,
                    rng=seed_of(gen),
                    device=self.device,
                )
                # the labels are the secret here: the observation carries neither labels nor lengths
                obs = GradientObservation(
                    model=model,
                    gradients=grads,
                    batch_size=nb,
                    tokenizer=tok,
                    num_local_steps=self.local_steps,
                    learning_rate=self.lr if self.local_steps > 1 else None,
                    transform=ex["transform"],
                    noise_std=ex["noise_std"],
                    meta={"task": "labels", **ex["meta"]},
                )
                trials.append(Trial(obs, {"texts": texts, "labels": labels}))
                before, after = self._utility(model, batch, grads)
                util["loss_before"].append(before)
                util["loss_after_update"].append(after)
        utility = {k: float(np.mean(v)) for k, v in util.items() if v}
        if utility:
            utility["loss_decrease"] = utility["loss_before"] - utility["loss_after_update"]
        config = {
            "preset": self.preset,
            "device": self.device,
            "batch_size": b,
            "task": self.task,
            "local_steps": self.local_steps,
            "lr": self.lr,
            "mechanism": None if mechanism is None else _mech_name(mechanism),
        }
        return ScenarioRun(trials=tuple(trials), utility=utility, config=config)
