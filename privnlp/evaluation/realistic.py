"""The ``realistic`` preset (issue #17): pretrained / real-text victims for the gradient and memorization scenarios.

Where the ``quick`` and ``full`` presets attack 1-2 layer, 32-64 d toys trained on the synthetic Faker
corpus, ``realistic`` attacks the victims of :mod:`privnlp.models.realistic`:

* **sentence classifier** (``fedsgd.eavesdropper`` classifier task: LAMP / TAG / DLG, and DP-SGD's update):
  all-MiniLM-L6-v2 (pretrained 6-layer, 384-d BERT) with a fresh 2-way head, fine-tuned for a few steps on a
  real-text task: *is this sentence from a GNU license (GPL/LGPL/GFDL) or from another license (Apache,
  Artistic, BSD, CC0, MPL)?* Sentences come from ``/usr/share/common-licenses`` (the same files on every
  Debian machine); the attacked sentences are held out of the fine-tuning set (LAMP's setting: a fine-tuned
  BERT, the client's own sentences, label and length known).
* **label victim** (``fedsgd.eavesdropper`` labels task: RLG): MiniLM with a fresh ``label_classes``-way head
  at the start of federated training, batches of license sentences with secret random labels (RLG Sec. 2.5).
* **causal LM** (``fedsgd.eavesdropper`` LM task: FILM; ``lm.canary``: canary exposure / extraction;
  ``fl.snapshots``: the eavesdropping / watermark correlation attacks, the LM as the initial global model):
  :func:`privnlp.models.realistic.realistic_lm`, a 4-layer 256-d GPT-2 trained on Debian English text with
  the bundled private records and canaries inserted. For FILM the client first fine-tunes it on its records
  (FILM Fig. 4: the attack recovers what the model memorised; see :func:`lm_victim`).

Scenarios and mechanisms without a realistic victim run with the ``quick`` sizes (:data:`BASE`).
"""

from __future__ import annotations

# privnlp.evaluation imports this module, and it must not pull torch: torch, sklearn (scipy) and the
# torch-importing privnlp modules (mechanisms.training, models.training) are imported inside the functions that
# build or train a victim
import contextlib
import contextvars
import copy
import functools
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privnlp.accounting.duplicates import DuplicateExamplesWarning
from privnlp.core.errors import InvalidArgument
from privnlp.core.numerics import pinned_threads
from privnlp.core.protocols import PrivateTrainer
from privnlp.core.registry import LEAKY_TWINS, MECHANISMS
from privnlp.core.rng import as_numpy
from privnlp.data import generate_corpus, make_canary
from privnlp.models.builders import tiny_gpt2
from privnlp.models.realistic import (
    REALISTIC_LM,
    debian_english_texts,
    minilm_classifier,
    realistic_lm,
    realistic_lm_cached,
)

__all__ = [
    "BASE",
    "REALISTIC_SCENARIOS",
    "REALISTIC_ATTACKS",
    "base_preset",
    "scenario_preset",
    "attack_for",
    "license_sentences",
    "classifier_victim",
    "dp_classifier",
    "label_victim",
    "lm_victim",
    "fl_clients",
    "dp_train_lm",
    "CLASSIFIER",
    "DP_CLASSIFIER",
    "LM",
    "STEP_SECONDS",
    "PlanStep",
    "RealisticPlan",
    "realistic_plan",
    "use_device",
    "current_device",
    "scenario_device",
]

#: the device the scenarios train on (issue #29 item 8), set by ``privnlp evaluate --device`` through
#: :func:`use_device`; a scenario reads it once, when it is constructed, and stores it as its ``device``
_DEVICE: contextvars.ContextVar[str] = contextvars.ContextVar("privnlp_train_device", default="cpu")


@contextlib.contextmanager
def use_device(device: str) -> Iterator[str]:
    """Scenarios constructed inside the body train on ``device`` (a string already checked by
    :func:`privnlp.mechanisms.training.devices.resolve_device`: ``"cpu"``, ``"cuda"``, ``"cuda:N"``).

    ``audit`` builds its scenarios from registry names, so ``privnlp evaluate --device`` hands the device down
    this way; a scenario built directly takes ``device=`` instead. Restored on exit (a context variable: threads
    and tasks started elsewhere keep their own)."""
    token = _DEVICE.set(_check_device(device))
    try:
        yield device
    finally:
        _DEVICE.reset(token)


def current_device() -> str:
    """The device set by the innermost :func:`use_device` (``"cpu"`` outside any)."""
    return _DEVICE.get()


def _check_device(device: Any) -> str:
    if not isinstance(device, str) or re.fullmatch(r"cpu|cuda(:\d+)?", device) is None:
        raise InvalidArgument(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}")
    return device


def scenario_device(device: str | None) -> str:
    """A scenario's ``device`` argument: ``None`` = :func:`current_device` (``privnlp evaluate --device``)."""
    return current_device() if device is None else _check_device(device)


def _to(batch: Sequence[Any], device: str) -> list[Any]:
    """The tensors of a loader batch on ``device`` (a no-op copy-free move on the CPU)."""
    return [t.to(device) for t in batch]


#: the preset used where ``realistic`` has no victim of its own (mechanism examples, other scenarios, audits)
BASE = {"quick": "quick", "full": "full", "realistic": "quick"}
#: scenarios that build realistic victims for ``preset="realistic"``
REALISTIC_SCENARIOS = frozenset({"fedsgd.eavesdropper", "lm.canary", "fl.snapshots"})
#: attack budgets on the realistic victims (a CPU-sized budget; attacks not listed use their quick example)
REALISTIC_ATTACKS: dict[str, dict[str, Any]] = {
    # LAMP.example("quick")'s budget (200 Adam steps) with the reference code's hyperparameters (eth-sri/lamp
    # lamp_cos.sh, tag.sh, dlg.sh) and a prior on real English: a Kneser-Ney bigram on ~100k Debian paragraphs
    # without license text (a tiny GPT-2 trained on CPU on BERT's 30k vocabulary overfits: NLL 15 on unseen text)
    "lamp": {
        "n_init": 20,
        "n_perm": 20,
        "iterations": 8,
        "n_c": 25,
        "n_d": 16,
        "lr": 0.01,
        "lr_decay": 0.89,
        "alpha_lm": 0.2,
        "alpha_reg": 1.0,
        "prior": "kn-bigram",
        "aux_corpus": "debian",
    },
    "tag": {"iterations": 8, "n_c": 25, "alpha_tag": 0.01, "lr": 0.1, "lr_decay": 1.0},
    "dlg": {"iterations": 8, "n_c": 25, "lr": 0.1, "lr_decay": 1.0},
    "film": {"beam_size": 16, "reorder_steps": 20},
}

#: 60 AdamW steps of 16 (6 epochs of the 160 sentences, 34 s on one core): held-out accuracy 0.82 on a balanced
#: sample (16 steps of 8 gave 0.77 there and 0.53 on the attacked sentences, close to chance)
CLASSIFIER: dict[str, Any] = {
    "min_tokens": 8,
    "max_tokens": 14,
    "n_train": 160,
    "n_attack": 32,
    "finetune": {"steps": 60, "batch_size": 16, "lr": 1e-4, "max_length": 32},
}
LM: dict[str, Any] = {"records": 16, "finetune_steps": 60, "finetune_lr": 1e-3, "max_length": 40}

_GNU = ("GPL", "LGPL", "GFDL")


def base_preset(preset: str) -> str:
    """The preset a mechanism example / non-realistic scenario / audit runs with."""
    return BASE.get(preset, preset)


def scenario_preset(name: str | None, preset: str) -> str:
    """``preset`` for scenarios with a realistic victim, else :func:`base_preset`."""
    return preset if preset != "realistic" or name in REALISTIC_SCENARIOS else base_preset(preset)


def attack_for(name: str, cls: Any, preset: str) -> Any:
    """The attack instance of ``preset``: the realistic budget where one is set, else ``cls.example``."""
    if preset == "realistic" and name in REALISTIC_ATTACKS:
        return cls(**REALISTIC_ATTACKS[name])
    return cls.example(base_preset(preset))


def license_sentences(root: str = "/usr/share/common-licenses") -> list[tuple[str, int]]:
    """``(sentence, label)`` from the license texts: label 1 = a GNU license (GPL, LGPL, GFDL), 0 = another
    (Apache, Artistic, BSD, CC0, MPL). Sorted file order, duplicates dropped (deterministic)."""

    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    d = Path(root)
    files = (
        sorted(p for p in d.iterdir() if p.is_file() and not p.is_symlink()) if d.is_dir() else []
    )
    for f in files:
        y = int(f.name.startswith(_GNU))
        text = " ".join(f.read_text(errors="ignore").split())
        for s in re.split(r"(?<=[.;:!?])\s+", text):
            s = s.strip()
            if (
                20 <= len(s) <= 160
                and sum(c.isalpha() for c in s) > 0.7 * len(s)
                and s[0].isupper()
                and not s.isupper()
                and s not in seen
            ):
                seen.add(s)
                out.append((s, y))
    if not out:
        raise InvalidArgument(
            f"no license sentences under {root!r} (a Debian system has /usr/share/common-licenses)"
        )
    return out


def _split(tok: Any, seed: int) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(train, attack): the attacked sentences are short (``CLASSIFIER`` token range incl. [CLS]/[SEP]),
    ``n_attack // 2`` per class where available; the fine-tuning set is every other sentence, classes
    balanced by subsampling the larger one (at most ``n_train``)."""

    cfg = CLASSIFIER
    pool = license_sentences()
    g = np.random.default_rng(seed)
    short = [
        i
        for i, (s, _) in enumerate(pool)
        if cfg["min_tokens"] <= len(tok(s, verbose=False)["input_ids"]) <= cfg["max_tokens"]
    ]
    attack_idx: list[int] = []
    for c in (0, 1):
        cand = [i for i in short if pool[i][1] == c]
        attack_idx += [cand[int(j)] for j in g.permutation(len(cand))[: cfg["n_attack"] // 2]]
    rest = [i for i in range(len(pool)) if i not in set(attack_idx)]
    by = {c: [i for i in rest if pool[i][1] == c] for c in (0, 1)}
    n = min(len(by[0]), len(by[1]), cfg["n_train"] // 2)
    train_idx = [by[c][int(j)] for c in (0, 1) for j in g.permutation(len(by[c]))[:n]]
    train = [pool[train_idx[int(j)]] for j in g.permutation(len(train_idx))]
    attack = [pool[attack_idx[int(j)]] for j in g.permutation(len(attack_idx))]
    return train, attack


@functools.lru_cache(maxsize=2)
def classifier_victim(
    seed: int = 0, device: str = "cpu"
) -> tuple[Any, Any, tuple[str, ...], tuple[int, ...], dict[str, float]]:
    """``(model, tokenizer, attack texts, their labels, info)``: MiniLM fine-tuned on license sentences.

    The fine-tune runs on ``device``; the returned model is on the CPU (the attacks run there).
    ``info``: training loss first/last; the fine-tuned model's accuracy on every sentence not trained on
    (``heldout_accuracy``; the classes are unbalanced, so also ``heldout_balanced_accuracy``, the mean
    per-class recall) and on the attacked sentences (``attack_accuracy``)."""
    import torch

    model, tok = minilm_classifier(num_labels=2, seed=seed)
    model.to(device)
    train, attack = _split(tok, seed)
    ft = CLASSIFIER["finetune"]
    g = np.random.default_rng(seed)
    losses = []
    with pinned_threads(), torch.random.fork_rng():
        torch.manual_seed(seed)
        opt = torch.optim.AdamW(model.parameters(), lr=ft["lr"])
        model.train()
        for _ in range(ft["steps"]):
            idx = g.choice(len(train), size=ft["batch_size"], replace=False)
            enc = tok(
                [train[int(i)][0] for i in idx],
                padding=True,
                truncation=True,
                max_length=ft["max_length"],
                return_tensors="pt",
            )
            y = torch.tensor([train[int(i)][1] for i in idx], device=device)
            loss = model(**enc.to(device), labels=y).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        scores = _heldout_scores(model, tok, train, attack)
    model.to("cpu")
    info = {
        "train_loss_first": losses[0],
        "train_loss_last": float(np.mean(losses[-4:])),
        **scores,
        "n_train": len(train),
        "n_attack": len(attack),
        "device": device,
    }
    return model, tok, tuple(s for s, _ in attack), tuple(int(y) for _, y in attack), info


#: DP-SGD fine-tuning of the MiniLM license classifier (:func:`dp_classifier`): opacus through
#: :class:`~privnlp.mechanisms.training.mechanisms.DPSGD` (Poisson sampling, hard budget), word embeddings frozen
#: (the DP-BERT paper's setting: fewer noised coordinates), a larger batch and learning rate than the
#: non-private fine-tune (noise averages out over the batch)
#: ``trainable="head"``: only the pooler and the classification head are trained (DP linear probing of the
#: pretrained encoder, 148k parameters instead of 11M: less noise in total, the usual remedy at small data sizes)
DP_CLASSIFIER: dict[str, Any] = {
    "target_epsilon": 8.0,
    "delta": 1e-5,
    "max_grad_norm": 1.0,
    "steps": 60,
    "batch_size": 64,
    "lr": 1e-3,
    "freeze_embeddings": True,
    "max_length": 32,
    "trainable": "all",
}


def _heldout_scores(
    model: Any, tok: Any, train: list[tuple[str, int]], attack: list[tuple[str, int]]
) -> dict[str, float]:
    """Accuracy / balanced accuracy on every license sentence not trained on, and on the attacked ones."""
    from sklearn.metrics import accuracy_score, balanced_accuracy_score

    seen = {s for s, _ in train}
    held = [p for p in license_sentences() if p[0] not in seen]
    model.eval()
    y, p = np.array([y for _, y in held]), np.array(_predict(model, tok, [s for s, _ in held]))
    att = {s for s, _ in attack}
    in_att = np.array([s in att for s, _ in held])
    return {
        "heldout_accuracy": float(accuracy_score(y, p)),
        "heldout_balanced_accuracy": float(balanced_accuracy_score(y, p)),  # mean per-class recall
        "attack_accuracy": float(accuracy_score(y[in_att], p[in_att])),
        "n_heldout": len(held),
    }


def dp_classifier(seed: int = 0, device: str = "cpu", **overrides: Any) -> dict[str, Any]:
    """MiniLM fine-tuned with DP-SGD on the same license sentences as :func:`classifier_victim`.

    Trains on ``device`` (the noise is drawn there, from a generator of that device); the returned model is on
    the CPU. ``overrides`` replace :data:`DP_CLASSIFIER` entries. Returns ``{"model", "tokenizer", "claim", "info"}``;
    ``info`` has the held-out scores of :func:`classifier_victim` plus the spent epsilon, sigma and steps.
    The noise comes from opacus' generator (not seeded: DP noise nobody can recompute)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from privnlp.mechanisms.training.dp_sgd import per_sample_classification_loss
    from privnlp.mechanisms.training.loop import train_private
    from privnlp.mechanisms.training.mechanisms import DPSGD

    unknown = set(overrides) - set(DP_CLASSIFIER)
    if unknown:
        raise InvalidArgument(
            f"dp_classifier: unknown settings {sorted(unknown)} (allowed: {sorted(DP_CLASSIFIER)})"
        )
    cfg = {**DP_CLASSIFIER, **overrides}
    if cfg["trainable"] not in ("all", "head"):
        raise InvalidArgument(
            f"dp_classifier: trainable must be 'all' or 'head'; got {cfg['trainable']!r}"
        )
    model, tok = minilm_classifier(num_labels=2, seed=seed)
    model.to(device)
    if cfg["trainable"] == "head":
        for name, p in model.named_parameters():
            p.requires_grad_(name.startswith(("classifier.", "bert.pooler.")))
    train, attack = _split(tok, seed)
    enc = tok(
        [s for s, _ in train],
        padding="max_length",
        truncation=True,
        max_length=int(cfg["max_length"]),
        return_tensors="pt",
    )
    ds = TensorDataset(enc["input_ids"], enc["attention_mask"], torch.tensor([y for _, y in train]))
    loader = DataLoader(
        ds,
        batch_size=int(cfg["batch_size"]),
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    mech = DPSGD(
        target_epsilon=float(cfg["target_epsilon"]),
        delta=float(cfg["delta"]),
        max_grad_norm=float(cfg["max_grad_norm"]),
        steps=int(cfg["steps"]),
        freeze_embeddings=bool(cfg["freeze_embeddings"]) and cfg["trainable"] == "all",
        dedup=True,
    )  # sentences that agree on their first max_length tokens are one example

    def loss_fn(m: Any, batch: Any) -> Any:
        ids, mask, y = _to(batch, device)
        return per_sample_classification_loss(m(input_ids=ids, attention_mask=mask).logits, y)

    with pinned_threads():
        model.train()  # opacus wraps a model in training mode (dropout stays on: the usual DP fine-tune)
        opt = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=float(cfg["lr"])
        )
        pt = mech.make_private(model, opt, loader)
        # the optimizer's parameters (opacus' bookkeeping mode turns requires_grad off on the model's own)
        n_trained = int(sum(p.numel() for p in pt.optimizer.params))
        res = train_private(pt, loss_fn, steps=int(cfg["steps"]), stop_at_budget=True)
        trained = getattr(pt, "original_model", model)
        info = {
            **_heldout_scores(trained, tok, train, attack),
            "device": device,
            "epsilon": float(res.epsilon),
            "noise_multiplier": float(pt.optimizer.noise_multiplier),
            "dp_steps": int(res.steps),
            "stopped_by_budget": bool(res.stopped_by_budget),
            "n_train": len(train),
            "config": cfg,
            "trained_parameters": n_trained,
        }
    return {"model": trained.to("cpu"), "tokenizer": tok, "claim": pt.claim(), "info": info}


def _predict(model: Any, tok: Any, texts: list[str], batch_size: int = 64) -> list[int]:
    """Argmax class of a sequence classifier for each text (eval mode, no gradients)."""
    import torch

    out: list[int] = []
    dev = next(model.parameters()).device
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            enc = tok(
                texts[i : i + batch_size],
                padding=True,
                truncation=True,
                max_length=64,
                return_tensors="pt",
            )
            out += model(**enc.to(dev)).logits.argmax(-1).tolist()
    return out


@functools.lru_cache(maxsize=2)
def label_victim(num_labels: int, seed: int = 0) -> tuple[Any, Any, tuple[str, ...]]:
    """``(model, tokenizer, texts)``: MiniLM with a fresh ``num_labels``-way head (the start of federated
    training) and a pool of license sentences (the labels are drawn at random by the scenario)."""

    model, tok = minilm_classifier(num_labels=num_labels, seed=seed + 5)
    return model, tok, tuple(s for s, _ in license_sentences())


def lm_victim(
    seed: int = 0, finetune_steps: int | None = None, device: str = "cpu"
) -> tuple[Any, Any, tuple[Any, ...]]:
    """``(model, tokenizer, records)``: the realistic LM after the client fine-tuned it on its records.

    The records are the bundled private records that :func:`~privnlp.models.realistic.realistic_lm` inserted
    in its training text (regenerated with the same seed, so their PII spans are known for NERR); the client
    then trains ``finetune_steps`` (default ``LM["finetune_steps"]``) AdamW steps on ``LM["records"]`` of them
    (FILM Fig. 4: recovery needs a model that memorised the client's text; 0 = the realistic LM as built, whose
    300 steps saw each record about 3 times and did not memorise it). The fine-tune runs on ``device``; the model
    comes back on the CPU."""
    steps = LM["finetune_steps"] if finetune_steps is None else int(finetune_steps)
    return _lm_victim(seed, steps, device)


@functools.lru_cache(maxsize=2)
def _lm_victim(seed: int, steps: int, device: str = "cpu") -> tuple[Any, Any, tuple[Any, ...]]:
    import torch

    from privnlp.mechanisms.training.devices import InputsOnDevice
    from privnlp.models import train_lm

    base, tok, info = realistic_lm(seed=seed)
    p = REALISTIC_LM["private"]
    corpus = generate_corpus(
        n_users=p["n_users"], records_per_user=p["records_per_user"], seed=seed + 1
    )
    if [r.text for r in corpus.records] != list(
        info["private_records"]
    ):  # pragma: no cover - a changed generator
        raise InvalidArgument(
            "the realistic LM's private records no longer match generate_corpus; rebuild the cache"
        )
    L = LM["max_length"]
    recs = tuple(
        r for r in corpus.records if 8 <= len(tok(r.text, verbose=False)["input_ids"]) <= L - 1
    )[: LM["records"]]
    model = copy.deepcopy(base)
    if steps:
        with pinned_threads(), torch.random.fork_rng():
            torch.manual_seed(seed)
            train_lm(
                model if device == "cpu" else InputsOnDevice(model.to(device), device),
                tok,
                [r.text for r in recs],
                steps=steps,
                batch_size=8,
                lr=LM["finetune_lr"],
                max_length=L,
                rng=seed,
            )
    model.to("cpu").eval()
    return model, tok, recs


def _canaries(info: dict, seed: int) -> list[Any]:
    """The realistic LM's canaries as :class:`~privnlp.data.Canary` objects (redrawn as its build drew them)."""

    g = np.random.default_rng(seed)
    cs = [
        make_canary(REALISTIC_LM["canaries"]["pattern"], rng=g)
        for _ in range(REALISTIC_LM["canaries"]["n"])
    ]
    if [c.text for c in cs] != [
        c["text"] for c in info["canaries"]
    ]:  # pragma: no cover - a changed generator
        raise InvalidArgument(
            "the realistic LM's canaries no longer match make_canary; rebuild the cache"
        )
    return cs


def _training_texts(info: dict, seed: int) -> list[str]:
    """The realistic LM's training texts in its training order (public paragraphs + records + canaries)."""

    cfg = REALISTIC_LM
    public = debian_english_texts(**cfg["corpus"])
    g = np.random.default_rng(seed)
    canaries = [make_canary(cfg["canaries"]["pattern"], rng=g) for _ in range(cfg["canaries"]["n"])]
    texts = (
        public
        + [r for r in info["private_records"] for _ in range(cfg["private"]["repeats"])]
        + [c.text for c in canaries for _ in range(cfg["canaries"]["repeats"])]
    )
    return [texts[i] for i in g.permutation(len(texts))]


def heldout_texts(n: int = 200) -> list[str]:
    """Debian paragraphs after the ones the realistic LM trained on (empty when the machine has no more)."""

    c = REALISTIC_LM["corpus"]
    allp = debian_english_texts(**{**c, "max_paragraphs": c["max_paragraphs"] + n})
    return allp[c["max_paragraphs"] :]


def fl_clients(
    n_clients: int, per_client: int, n_heldout: int, seed: int = 0
) -> tuple[list[list[str]], list[str], Any, Any]:
    """``fl.snapshots`` on the realistic preset: ``(client paragraphs, held-out paragraphs, tokenizer, factory)``.

    The initial global model is the realistic LM (``factory()`` returns a fresh copy of it); the clients' public
    text is ``per_client`` Debian paragraphs each that the LM did not train on (:func:`heldout_texts`, in order),
    the utility is measured on the ``n_heldout`` paragraphs after them. The scenario adds the records and
    watermarks. Raises :class:`InvalidArgument` when the machine has too few Debian paragraphs."""

    base, tok, _ = realistic_lm(seed=seed)
    need = n_clients * per_client + n_heldout
    paras = heldout_texts(need)
    if len(paras) < need:
        raise InvalidArgument(
            f"the realistic fl.snapshots preset needs {need} Debian paragraphs beyond the realistic "
            f"LM's training text; this machine has {len(paras)} (install documentation packages "
            "such as python3-doc)"
        )
    clients = [paras[i * per_client : (i + 1) * per_client] for i in range(n_clients)]
    base = copy.deepcopy(base).eval()

    def factory() -> Any:
        return copy.deepcopy(base)

    return clients, paras[n_clients * per_client :], tok, factory


#: DP-SGD training of the realistic LM architecture for ``lm.canary`` with a mechanism (same texts and steps)
CANARY_DP = {"batch_size": 64, "lr": 1e-3}


def dp_train_lm(
    mechanism: Any,
    model: Any,
    tokenizer: Any,
    texts: list[str],
    cfg: Mapping[str, Any],
    *,
    rng: Any,
    device: str = "cpu",
) -> tuple[Any, dict[str, Any]]:
    """Train ``model`` (a causal LM) on ``texts`` with DP-SGD through the mechanism's ``make_private``
    (opacus); ``cfg`` gives ``train`` (``max_length``, ``steps``) and ``dp`` (``batch_size``, ``lr``). Shared by
    ``lm.canary`` (:mod:`privnlp.evaluation.scenarios.memorization`) and the realistic canary LM.

    The model and every batch are moved to ``device`` (the noise is drawn there: issue #29 item 1); the sampling
    and the ledger are the same on every device, so the epsilon is too.

    Returns:
        ``(trained model in eval mode on the CPU, {"epsilon", "dp_steps", "stopped_by_budget", "device"})``.
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from privnlp.mechanisms.training.dp_sgd import per_sample_lm_loss
    from privnlp.mechanisms.training.loop import train_private
    from privnlp.models.training import lm_batch

    model.to(device)
    b = lm_batch(tokenizer, texts, cfg["train"]["max_length"])
    ds = TensorDataset(b.input_ids, b.attention_mask, b.labels)
    loader = DataLoader(
        ds,
        batch_size=int(cfg["dp"]["batch_size"]),
        shuffle=True,
        generator=torch.Generator().manual_seed(int(as_numpy(rng).integers(2**31))),
    )
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=float(cfg["dp"]["lr"])
    )
    steps = getattr(mechanism, "steps", None)
    epochs = getattr(mechanism, "epochs", None)
    if steps is None and epochs is None:
        steps = int(cfg["train"]["steps"])
    # make_private may need the planned length to calibrate sigma from target_epsilon
    if getattr(mechanism, "epochs", None) is None and getattr(mechanism, "steps", None) is None:
        mechanism = copy.copy(mechanism)
        mechanism.steps = steps

    with (
        warnings.catch_warnings()
    ):  # issue #21: the canary is duplicated on purpose (that is what is measured);
        # the claim still records the duplicates and the group epsilon (extra: duplicated_examples, group_epsilon)
        warnings.simplefilter("ignore", DuplicateExamplesWarning)
        pt = mechanism.make_private(model, opt, loader, rng=int(as_numpy(rng).integers(2**31)))

    def loss_fn(m: Any, batch: Any) -> Any:
        ids, mask, labels = _to(batch, device)
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device).unsqueeze(0).repeat(ids.shape[0], 1)
        return per_sample_lm_loss(
            m(input_ids=ids, attention_mask=mask, position_ids=pos).logits, labels
        )

    res = train_private(
        pt, loss_fn, epochs=epochs if steps is None else None, steps=steps, stop_at_budget=True
    )
    trained = getattr(pt, "original_model", model).to("cpu")
    trained.eval()
    info = {
        "epsilon": float(res.epsilon),
        "dp_steps": int(res.steps),
        "stopped_by_budget": bool(res.stopped_by_budget),
        "device": device,
    }
    return trained, info


def canary_lm(
    mechanism: Any | None = None, *, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    """``lm.canary`` on the realistic preset: ``{"model", "tokenizer", "canaries", "heldout", "info"}``.

    Undefended: the cached :func:`~privnlp.models.realistic.realistic_lm` (its 2 canaries were inserted 16
    times each). A mechanism with ``make_private`` (DP-SGD) trains the same architecture from scratch on the
    same texts for the same number of steps with its tokenizer (slow on a CPU: minutes to tens of minutes), on
    ``device``."""

    model, tok, info = realistic_lm(seed=seed)
    canaries = _canaries(info, seed)
    out_info: dict[str, Any] = {
        "n_train": int(info["n_train_texts"]),
        "repeats": REALISTIC_LM["canaries"]["repeats"],
        "pattern": REALISTIC_LM["canaries"]["pattern"],
        "victim": "realistic_lm",
    }
    if mechanism is None:
        out_info["train_loss"] = float(sum(info["losses"][-10:]) / len(info["losses"][-10:]))
    elif isinstance(mechanism, PrivateTrainer):
        cfg = REALISTIC_LM
        eos = tok.eos_token_id
        fresh = tiny_gpt2(
            len(tok),
            **cfg["model"],
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
            seed=seed,
        )
        with pinned_threads():
            model, dp = dp_train_lm(
                mechanism,
                fresh,
                tok,
                _training_texts(info, seed),
                {"train": cfg["train"], "dp": CANARY_DP},
                rng=seed,
                device=device,
            )
        out_info.update(dp)
    else:
        raise InvalidArgument(
            f"lm.canary supports mechanism=None or a DP-SGD-like mechanism with make_private(); "
            f"got {type(mechanism).__name__}"
        )
    model.eval()
    return {
        "model": model,
        "tokenizer": tok,
        "canaries": canaries,
        "heldout": heldout_texts(),
        "info": out_info,
    }


# ------------------------------------------------------------------ expected time (issue #29 item 8)
#: seconds of one audit step (one system x scenario x seed) on the realistic preset, one busy core of the 2-core
#: CPU machine, from the timings recorded in docs/readme/15-evaluation.md (the realistic card table) and issue
#: #29 (dp_sgd: 2 of 6 steps in 15 min): rough priors, within about a factor of 2 of a run on that machine
STEP_SECONDS: dict[str, float] = {
    "fedsgd.eavesdropper": 30.0,  # victims + attacks without LAMP (frozen_embeddings: 64-105 s for 3 steps)
    "fedsgd.eavesdropper+lamp": 270.0,  # LAMP at the realistic budget (18 min for 4 LAMP/TAG/DLG runs)
    "fedsgd.eavesdropper+film": 60.0,  # FILM on the realistic LM after the client's fine-tune (5.5 min card)
    "lm.canary": 30.0,  # exposure / extraction on the cached LM
    "lm.canary+dp": 800.0,  # a DP-SGD defense retrains the 4-layer LM (300 steps) with per-example gradients
    "fl.snapshots": 160.0,  # eavesdropping / watermark on federated snapshots (8 min card)
    "other": 60.0,  # scenarios without a realistic victim run at quick sizes (1.5 s to 150 s a step measured)
}
#: one-time costs: building the realistic LM when it is not cached (11-15 min), MiniLM's fine-tune (34 s / process)
LM_BUILD_SECONDS = 800.0
MINILM_FINETUNE_SECONDS = 34.0


@dataclass(frozen=True)
class PlanStep:
    """One audit step of the realistic preset and its expected seconds."""

    mechanism: str
    scenario: str
    system: str
    seed: int
    expected_seconds: float


@dataclass(frozen=True)
class RealisticPlan:
    """What ``privnlp evaluate --preset realistic`` will run and how long it is expected to take.

    Attributes:
        steps: every audit step (the progress bar's unit), in run order.
        one_time_seconds: costs paid once (the LM build when it is not cached, MiniLM's fine-tune).
        lm_cached: whether the realistic LM is already in the model cache.
        device: where the scenarios train (``privnlp evaluate --device``); the estimate is for one CPU core.
    """

    steps: tuple[PlanStep, ...]
    one_time_seconds: float
    lm_cached: bool
    device: str = "cpu"

    @property
    def expected_seconds(self) -> float:
        return self.one_time_seconds + sum(s.expected_seconds for s in self.steps)

    def describe(self) -> str:
        """One line to print before the run starts."""
        mins = self.expected_seconds / 60
        where = (
            "the scenarios train on cpu"
            if self.device == "cpu"
            else f"the scenarios train on {self.device} (the estimate is the one-CPU-core one: no GPU timing "
            "is recorded yet)"
        )
        return (
            f"realistic preset: {len(self.steps)} audit steps, expected about {mins:.0f} min on one CPU core "
            f"(rough, within ~2x; {'the realistic LM is cached' if self.lm_cached else 'includes building the realistic LM, ~13 min, cached afterwards'}"
            f"); {where}; an interrupted run resumes: finished steps are read from the cache"
        )


def _step_cost(scenario: str, attacks: set[str], system: str, private_trainer: bool) -> float:
    if scenario == "fedsgd.eavesdropper":
        return (
            STEP_SECONDS["fedsgd.eavesdropper"]
            + (STEP_SECONDS["fedsgd.eavesdropper+lamp"] if "lamp" in attacks else 0.0)
            + (STEP_SECONDS["fedsgd.eavesdropper+film"] if "film" in attacks else 0.0)
        )
    if scenario == "lm.canary":
        dp = system != "undefended" and private_trainer
        return STEP_SECONDS["lm.canary+dp" if dp else "lm.canary"]
    if scenario in STEP_SECONDS:
        return STEP_SECONDS[scenario]
    return STEP_SECONDS["other"]


def realistic_plan(
    names: Sequence[str] | None = None,
    *,
    seeds: Sequence[int] = (0,),
    lm_cached: bool | None = None,
    device: str = "cpu",
) -> RealisticPlan:
    """The steps ``evaluate_all(preset="realistic")`` runs for ``names`` (default: every registered defense) and
    their expected time (:data:`STEP_SECONDS`), computed before anything is built.

    Args:
        names: registered defense names.
        seeds: the preset's seeds.
        lm_cached: whether the realistic LM is cached (``None``: looked up, reading the Debian corpus: ~10 s).
        device: where the scenarios will train (named in :meth:`RealisticPlan.describe`).

    Raises:
        InvalidArgument: an unknown defense name or no seed.
    """
    if not seeds:
        raise InvalidArgument("seeds must contain at least one seed")
    known = MECHANISMS.names()
    names = list(names) if names else list(known)
    bad = [n for n in names if n not in known]
    if bad:
        raise InvalidArgument(f"unknown defense(s) {bad}; known: {sorted(known)}")
    twins = set(LEAKY_TWINS.load_all())
    steps: list[PlanStep] = []
    for n in names:
        cls = MECHANISMS.get(n)
        spec = getattr(cls, "scenario", None)
        scens = [s for s in (spec if isinstance(spec, (list, tuple)) else [spec]) if s]
        attacks = set(getattr(cls, "paired_attacks", ()) or ())
        systems = ["defended", "undefended"] + (["leaky_twin"] if n in twins else [])
        trainer = hasattr(cls, "make_private")
        for sc in scens:
            for system in systems:
                for s in seeds:
                    steps.append(
                        PlanStep(n, sc, system, int(s), _step_cost(sc, attacks, system, trainer))
                    )
    uses_lm = any(
        s.scenario in ("lm.canary", "fl.snapshots")
        or (s.scenario == "fedsgd.eavesdropper" and "film" in REALISTIC_ATTACKS)
        for s in steps
    )
    if lm_cached is None:
        lm_cached = realistic_lm_cached() if uses_lm else True
    once = (0.0 if lm_cached or not uses_lm else LM_BUILD_SECONDS) + (
        MINILM_FINETUNE_SECONDS if any(s.scenario == "fedsgd.eavesdropper" for s in steps) else 0.0
    )
    return RealisticPlan(tuple(steps), once, bool(lm_cached), device)
