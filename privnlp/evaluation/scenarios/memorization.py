"""Memorization scenarios: ``lm.canary`` (secret sharer on a tiny GPT-2) and ``fl.snapshots``
(per-round global models of federated training, for the eavesdropping / watermark attacks).

Papers: ``../shared/papers/unintended-memorization-under-fl.txt`` and
``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (canary exposure of a trained LM, with and without
DP-SGD), ``../shared/papers/record-level-privacy-leakage-in-fl.txt`` (Sec. V-A: 4 clients, 2 selected
per round, one SSN record per client inserted 4 times, snapshots of every global model).

``lm.canary``: the bundled corpus (``generate_corpus``) plus a canary inserted ``repeats`` times as
a standalone training example (the FL secret sharer *replaces* examples by the canary; a standalone
example also keeps the canary at the positions the attacks query it at). ``mechanism=None`` trains
with AdamW (:func:`privnlp.models.train_lm`); a mechanism with ``make_private`` (``dp_sgd``) trains
with DP-SGD on the same data. Trials: one :class:`BlackBoxLM` per canary, ground truth the
:class:`~privnlp.data.Canary`. Utility: held-out loss and perplexity.

``fl.snapshots``: see :class:`FLSnapshotsScenario`.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerFast

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument
from privnlp.core.observations import BlackBoxLM, DiskLease, ModelSnapshots
from privnlp.core.protocols import (
    Aggregator,
    ModelDefense,
    PrivateTrainer,
    Scenario,
    ScenarioRun,
    TrainingLossTerm,
    Trial,
)
from privnlp.core.registry import SCENARIOS
from privnlp.core.rng import as_numpy
from privnlp.data import generate_corpus, make_canary
from privnlp.data.canaries import DEFAULT_WORDS
from privnlp.evaluation.realistic import canary_lm, dp_train_lm, fl_clients, scenario_device
from privnlp.mechanisms.federated.client import Task, _lm_loss, lm_client_data
from privnlp.mechanisms.federated.simulator import FedSimulator
from privnlp.mechanisms.training.devices import InputsOnDevice
from privnlp.models._seed import seeded
from privnlp.models.builders import tiny_gpt2
from privnlp.models.lstm_lm import tiny_lstm_lm
from privnlp.models.tokenization import EOT, _no_parallelism
from privnlp.models.training import lm_batch, lm_batch_from_ids, train_lm

__all__ = [
    "digit_bpe_tokenizer",
    "LMCanaryScenario",
    "FLSnapshotsScenario",
    "LM_CANARY_PRESETS",
    "FL_PRESETS",
    "train_canary_lm",
    "heldout_loss",
    "fedavg_snapshots",
    "async_fedavg_snapshots",
    "FL_MODELS",
    "FLSnapshotsLSTMScenario",
]

LM_CANARY_PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "corpus": {"n_users": 12, "records_per_user": 10},
        "heldout_users": 2,
        "vocab_size": 500,
        "pattern": "my pin code is {digits:4}",
        "n_canaries": 1,
        "repeats": 16,
        "model": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64},
        "train": {"steps": 200, "batch_size": 12, "lr": 3e-3, "max_length": 48},
        "dp": {"batch_size": 32, "lr": 1e-2},
    },
    "full": {
        "corpus": {"n_users": 50, "records_per_user": 20},
        "heldout_users": 10,
        "vocab_size": 1000,
        "pattern": "my social security number is {ssn}",
        "n_canaries": 3,
        "repeats": 20,
        "model": {"n_layer": 2, "n_embd": 128, "n_head": 2, "n_positions": 128},
        "train": {"steps": 1500, "batch_size": 16, "lr": 2e-3, "max_length": 96},
        "dp": {"batch_size": 64, "lr": 1e-2},
    },
    # issue #17: the realistic LM (privnlp.models.realistic: 4 layers, 256 d, Debian English text with 2 canaries
    # inserted 16 times each); built by privnlp.evaluation.realistic.canary_lm, these are its sizes
    "realistic": {
        "pattern": "my pin code is {digits:4}",
        "n_canaries": 2,
        "repeats": 16,
        "train": {"max_length": 96},
    },
}

_BLACK_BOX = ThreatModel(
    adversary=Adversary.BLACK_BOX_QUERIER,
    observes=("log-probabilities of the released LM",),
    knows=("the canary format and randomness space", "the tokenizer"),
    goal="measure / extract a canary inserted in the training data",
)


def digit_bpe_tokenizer(texts: list[str], vocab_size: int, *, model_max_length: int = 128) -> Any:
    """:func:`privnlp.models.train_bpe_tokenizer` with digits split one per pre-token.

    Byte-level BPE merges runs of digits ("6523" -> one token, "652" -> two others), so partial
    secrets tokenize differently from full ones and a digit-by-digit beam search scores
    inconsistent sequences. Splitting digits (as LLaMA-style tokenizers do) keeps every partial
    secret a prefix of the full one in token space. Same special tokens as the models' helper.
    """

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=int(vocab_size),
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    with _no_parallelism():
        tok.train_from_iterator(sorted(texts), trainer=trainer, length=len(texts))
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


def heldout_loss(model: Any, tokenizer: Any, texts: list[str], max_length: int = 64) -> float:
    """Mean next-token loss (nats) on held-out ``texts`` (token-weighted)."""

    tot, n = 0.0, 0
    was = model.training
    model.eval()
    with torch.inference_mode():
        for s in range(0, len(texts), 64):
            b = lm_batch(tokenizer, texts[s : s + 64], max_length)
            k = int((b.labels[:, 1:] != -100).sum())
            tot += float(model(**b).loss) * k
            n += k
    model.train(was)
    return tot / max(n, 1)


def train_canary_lm(
    mechanism: Any | None = None,
    *,
    preset: str = "quick",
    repeats: int | None = None,
    pattern: str | None = None,
    n_canaries: int | None = None,
    rng: Any,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train the ``lm.canary`` model; returns ``{"model", "tokenizer", "canaries", "heldout", "info"}``.

    Trains on ``device`` (the undefended model through :class:`~privnlp.mechanisms.training.devices.InputsOnDevice`:
    :func:`privnlp.models.train_lm` builds its batches on the CPU); the returned model is on the CPU."""
    # deferred: scenario modules are imported on registry lookup

    if preset not in LM_CANARY_PRESETS:
        raise InvalidArgument(f"preset must be one of {sorted(LM_CANARY_PRESETS)}; got {preset!r}")
    cfg = LM_CANARY_PRESETS[preset]
    if (
        preset == "realistic"
    ):  # issue #17: one cached victim (seed 0); its canaries are fixed by its build
        if repeats is not None or pattern is not None or n_canaries is not None:
            raise InvalidArgument(
                "the realistic lm.canary victim has fixed canaries (2 x 16 insertions of "
                "'my pin code is {digits:4}'): repeats/pattern/n_canaries must be None"
            )
        return canary_lm(mechanism, seed=0, device=device)
    g = as_numpy(rng)
    seed = int(g.integers(0, 2**31 - 1))
    corpus = generate_corpus(**cfg["corpus"], seed=seed)
    users = list(corpus.users)
    held = set(users[-cfg["heldout_users"] :])
    train_texts = [r.text for r in corpus.records if r.user_id not in held]
    heldout = [r.text for r in corpus.records if r.user_id in held]
    tok = digit_bpe_tokenizer(
        train_texts, cfg["vocab_size"], model_max_length=cfg["model"]["n_positions"]
    )
    pat = pattern or cfg["pattern"]
    reps = int(cfg["repeats"] if repeats is None else repeats)
    canaries = [make_canary(pat, rng=g) for _ in range(int(n_canaries or cfg["n_canaries"]))]
    texts = train_texts + [c.text for c in canaries for _ in range(reps)]
    order = g.permutation(len(texts))
    texts = [texts[i] for i in order]
    eos = tok.eos_token_id
    model = tiny_gpt2(
        len(tok),
        **cfg["model"],
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        seed=seed % (2**31),
    )
    info: dict[str, Any] = {"n_train": len(texts), "repeats": reps, "pattern": pat}
    if mechanism is None:
        on = model if device == "cpu" else InputsOnDevice(model.to(device), device)
        log = train_lm(on, tok, texts, **cfg["train"], rng=g)
        model.to("cpu")
        info["train_loss"] = log.mean_last(10)
    elif isinstance(mechanism, PrivateTrainer):
        model, dp = dp_train_lm(mechanism, model, tok, texts, cfg, rng=g, device=device)
        info.update(dp)
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
        "heldout": heldout,
        "info": info,
    }


@SCENARIOS.register("lm.canary")
class LMCanaryScenario(Scenario):
    """Secret sharer on a tiny GPT-2 trained on the bundled corpus with canaries inserted ``repeats``
    times (see the module docstring). Utility: ``heldout_loss`` / ``heldout_perplexity`` (costs)."""

    threat_model = _BLACK_BOX
    utility_higher_is_better = {"heldout_loss": False, "heldout_perplexity": False}

    def __init__(
        self,
        preset: str = "quick",
        repeats: int | None = None,
        pattern: str | None = None,
        device: str | None = None,
    ) -> None:
        if preset not in LM_CANARY_PRESETS:
            raise InvalidArgument(
                f"preset must be one of {sorted(LM_CANARY_PRESETS)}; got {preset!r}"
            )
        self.preset = preset
        self.repeats = repeats
        self.pattern = pattern
        # where a DP-SGD defense trains; None = privnlp evaluate --device (realistic.use_device)
        self.device = scenario_device(device)

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        out = train_canary_lm(
            mechanism,
            preset=self.preset,
            repeats=self.repeats,
            pattern=self.pattern,
            rng=rng,
            device=self.device,
        )
        model, tok = out["model"], out["tokenizer"]
        cfg = LM_CANARY_PRESETS[self.preset]
        # realistic: no held-out text on a machine with fewer Debian paragraphs than the LM trained on
        loss = (
            heldout_loss(model, tok, out["heldout"], cfg["train"]["max_length"])
            if out["heldout"]
            else math.nan
        )
        trials = tuple(
            Trial(
                BlackBoxLM(
                    model=model,
                    tokenizer=tok,
                    kind="causal",
                    meta={"canary_pattern": c.pattern, "canary_space": c.randomness_space},
                ),
                ground_truth=c,
            )
            for c in out["canaries"]
        )
        info = {k: v for k, v in out["info"].items() if isinstance(v, (int, float, str, bool))}
        return ScenarioRun(
            trials=trials,
            utility={"heldout_loss": loss, "heldout_perplexity": math.exp(loss)},
            config={"preset": self.preset, "device": self.device, **info},
        )


# ============================================================================ fl.snapshots
FL_PRESETS: dict[str, dict[str, Any]] = {
    # quick: 20 rounds x 10 local steps (was 30 x 15): ~20 s of training on 2 shared cores. The record
    # is a 4-digit PIN (the lm.canary quick format) instead of the paper's 9-digit SSN: at this scale
    # the 4 clients' SSNs (same prefix) interfere and the final model kept at most 1-2 of them (the
    # beam's candidate recall was 0.25-0.5, undefended eavesdropping top-1 0.0 / 0.25 on seeds 0 / 1);
    # with PINs recall is 0.5-0.75 and top-1 0.5 on both seeds. Local overfitting still makes the
    # final model forget the clients not selected in the last rounds (recall < 1).
    "quick": {
        "n_clients": 4,
        "per_round": 2,
        "rounds": 20,
        "users_per_client": 1,
        "records_per_user": 4,
        "record_pattern": "my pin code is {digits:4}",
        "record_repeats": 4,
        "watermark_repeats": 1,
        "vocab_size": 400,
        "model": "gpt2",
        "gpt2": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64},
        "lstm": {"emb_dim": 64, "hidden": 128, "num_layers": 2, "n_positions": 64},
        "local": {"steps": 10, "batch_size": 8, "lr": 3e-3, "max_length": 48},
    },
    "full": {
        "n_clients": 4,
        "per_round": 2,
        "rounds": 60,
        "users_per_client": 4,
        "records_per_user": 10,
        "record_pattern": "my social security number is {ssn}",
        "record_repeats": 4,
        "watermark_repeats": 1,
        "vocab_size": 600,
        "model": "gpt2",
        "gpt2": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64},
        "lstm": {"emb_dim": 64, "hidden": 128, "num_layers": 2, "n_positions": 64},
        "local": {"steps": 10, "batch_size": 8, "lr": 3e-3, "max_length": 48},
    },
    # issue #17: the realistic LM (privnlp.models.realistic: 4 layers, 256 d, pretrained on Debian English text)
    # is the initial global model; every client holds Debian paragraphs the LM did not train on
    # (privnlp.evaluation.realistic.fl_clients) + its SSN record x4 + its watermark x1 (the paper's setting:
    # PTB + inserted SSNs); local Adam at the LM's own learning rate. Tokenizer = the LM's byte-level BPE.
    # Measured (seed 0): 40 paragraphs x 20 rounds memorised 1 of the 4 SSNs (candidate recall 0.25, the beam finds
    # every memorised one), lr 5e-4 x 30 rounds also 1; 20 paragraphs x 30 rounds memorise 2 (recall 0.5).
    "realistic": {
        "n_clients": 4,
        "per_round": 2,
        "rounds": 30,
        "paragraphs_per_client": 20,
        "heldout": 100,
        "record_pattern": "my social security number is {ssn}",
        "record_repeats": 4,
        "watermark_repeats": 1,
        "model": "gpt2",
        "local": {"steps": 10, "batch_size": 8, "lr": 1e-3, "max_length": 64},
    },
    # plumbing only (fast tests): too short to memorize anything
    "smoke": {
        "n_clients": 4,
        "per_round": 2,
        "rounds": 4,
        "users_per_client": 1,
        "records_per_user": 2,
        "record_pattern": "my social security number is {ssn}",
        "record_repeats": 2,
        "watermark_repeats": 1,
        "vocab_size": 300,
        "model": "gpt2",
        "gpt2": {"n_layer": 1, "n_embd": 16, "n_head": 1, "n_positions": 48},
        "lstm": {"emb_dim": 16, "hidden": 16, "num_layers": 1, "n_positions": 48},
        "local": {"steps": 2, "batch_size": 4, "lr": 3e-3, "max_length": 40},
    },
}

#: the model families ``fl.snapshots`` can train (``model=`` option / a mechanism's ``requires_model``)
FL_MODELS = ("gpt2", "lstm")


def _fl_factory(kind: str, cfg: Mapping[str, Any], vocab: int, eos: int, seed: int) -> Any:
    if kind == "gpt2":
        mcfg = dict(cfg["gpt2"])
        return lambda: tiny_gpt2(
            vocab, **mcfg, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, seed=seed
        )

    lcfg = dict(cfg["lstm"])
    return lambda: tiny_lstm_lm(vocab, **lcfg, seed=seed)


_FL_OBSERVER = ThreatModel(
    adversary=Adversary.EAVESDROPPER,
    observes=(
        "the global model after every aggregation round",
        "the victim's selection (eavesdropping only)",
    ),
    knows=(
        "the record format (preset's record_pattern, e.g. 'my social security number is {ssn}')",
        "the tokenizer and architecture",
        "its watermark (watermark attack only)",
    ),
    goal="extract the victim client's SSN record and link it to the client",
)


def _watermark(g: np.random.Generator) -> str:
    return " ".join(str(w) for w in g.choice(DEFAULT_WORDS, size=5, replace=False))


def _local_adam(
    model: Any,
    tokenizer: Any,
    texts: list[str],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    max_length: int,
    mechanism: Any | None,
    rng: np.random.Generator,
    device: str = "cpu",
) -> list[float]:
    """One client's local training: ``steps`` Adam steps on minibatches of its own texts.

    Same batches as :func:`privnlp.models.train_lm` (``lm_batch``; order from ``rng``; dropout drawn
    from a forked, seeded torch RNG). A mechanism with ``loss_terms(model, inputs, *, rng, forward)``
    (adversarial embedding) adds its term to the next-token loss computed from the clean logits.
    Trains on ``device`` (model and batches moved there; the model is moved back to the CPU at the end: the
    parameter objects stay the same, so a caller's ``state_dict(keep_vars=True)`` keeps pointing at them).
    """

    eos = tokenizer.eos_token
    rows = tokenizer(
        [t + eos for t in texts],
        add_special_tokens=False,
        truncation=True,
        max_length=int(max_length),
    )["input_ids"]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=float(lr))
    extra = mechanism.loss_terms if isinstance(mechanism, TrainingLossTerm) else None
    tgen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    losses: list[float] = []
    order = np.empty(0, dtype=np.int64)
    take = min(int(batch_size), len(rows))
    model.train()
    with seeded(int(rng.integers(0, 2**62))):
        for _ in range(int(steps)):
            while len(order) < take:
                order = np.concatenate([order, rng.permutation(len(rows))])
            idx, order = order[:take], order[take:]
            b = lm_batch_from_ids([rows[i] for i in idx], pad).to(device)
            opt.zero_grad(set_to_none=True)
            if extra is None:
                loss = model(**b).loss
            else:
                inputs = {
                    "input_ids": b.input_ids,
                    "attention_mask": b.attention_mask,
                    "position_ids": b.position_ids,
                }
                logits, term = extra(model, inputs, rng=tgen)
                task = torch.nn.functional.cross_entropy(
                    logits[:, :-1].reshape(-1, logits.shape[-1]),
                    b.labels[:, 1:].reshape(-1),
                    ignore_index=-100,
                )
                loss = task + term
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    model.eval()
    model.to("cpu")
    return losses


def _fresh_copy(model: Any, model_factory: Any) -> Any:
    """An independent copy of ``model`` (same weights, buffers, tying, mode); falls back to
    ``model_factory()`` + ``load_state_dict`` when the model cannot be deep-copied."""

    try:
        return copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - e.g. a model holding a non-copyable handle
        out = model_factory()
        out.load_state_dict(model.state_dict())
        return out


def async_fedavg_snapshots(
    client_texts: list[list[str]],
    model_factory: Any,
    tokenizer: Any,
    *,
    rounds: int,
    per_round: int,
    local: Mapping[str, Any],
    out_dir: str,
    mechanism: Any | None = None,
    progress: bool = False,
    rng: Any,
    device: str = "cpu",
) -> tuple[list[str], list[tuple[int, ...]]]:
    """Asynchronous FedAvg with a global snapshot per round: the record-level paper's training engine.

    Paper: ``../shared/papers/record-level-privacy-leakage-in-fl.txt`` (Sec. II-B Eq. 1 and Sec. V-A):
    every round the server draws ``per_round`` (M) of the ``len(client_texts)`` (N) clients without
    replacement; each selected client starts from the current global weights and trains locally
    with **Adam** (``local = {steps, batch_size, lr, max_length}``); the server replaces the global
    model by the average of the returned local models **weighted by the clients' data sizes**; the
    global model after every round is what the eavesdropper / watermark adversary snapshots.

    Why not :class:`privnlp.mechanisms.federated.FedSimulator`: the simulator implements (DP-)FedAvg
    as the DP literature defines it (unweighted or clipped average of *updates*, local SGD, fixed
    denominators, accounting), which is the right engine for ``fedavg`` / ``dp_fedavg``. The
    correlation attacks need the paper's setting instead — local Adam and a data-size-weighted
    average of *weights* — and at this tiny scale only that setting memorizes the SSN records
    within a few dozen rounds (local SGD did not memorize them at lr 0.5 and diverged at lr 3.0).

    Defenses (``mechanism``): ``mechanism.apply(model, rng=...)`` (noised / dropout embedding,
    LSTM dropout) wraps each *local* model before its training; the wrapped tensors are the same
    objects, so the averaged state dict keeps the architecture's parameter names and the snapshots
    load into the undefended factory (the defenses act in training mode only).
    ``mechanism.loss_terms(model, inputs, rng=...)`` (adversarial embedding / VAT) adds a term to
    the local loss. Anything else raises :class:`InvalidArgument`.

    Snapshot ``r`` (``state_dict`` after round ``r``; round 0 = the initial model) is written to
    ``out_dir``. Returns ``(paths, selection)`` with ``selection[0] = ()``. The local training runs on
    ``device``; the global model, the average and the snapshots stay on the CPU.
    """

    if mechanism is not None and not isinstance(mechanism, (ModelDefense, TrainingLossTerm)):
        raise InvalidArgument(
            "the asynchronous FedAvg engine supports mechanisms with apply(model, *, rng) or "
            f"loss_terms(model, inputs, *, rng); got {type(mechanism).__name__}"
        )
    check = dict(local)
    for k in ("steps", "batch_size", "lr", "max_length"):
        if k not in check:
            raise InvalidArgument(f"local must give {k!r} (have {sorted(check)})")
    n = len(client_texts)
    if not 1 <= int(per_round) <= n:
        raise InvalidArgument(f"per_round must be in [1, {n}] (number of clients); got {per_round}")
    g = as_numpy(rng)
    glob = model_factory()
    paths = [os.path.join(out_dir, "round_0000.pt")]
    torch.save(glob.state_dict(), paths[0])
    selection: list[tuple[int, ...]] = [()]
    sizes = np.asarray([len(t) for t in client_texts], dtype=float)
    it = range(1, int(rounds) + 1)
    if progress:
        it = tqdm(it, desc="fedavg rounds", leave=False)
    for r in it:
        chosen = tuple(sorted(int(i) for i in g.choice(n, size=int(per_round), replace=False)))
        states = []
        for i in chosen:
            # a copy of the global model = model_factory() + load_state_dict(global weights), without
            # re-running the (slow, HF) weight initialisation of a fresh model every local training
            local_model = _fresh_copy(glob, model_factory)
            live = local_model.state_dict(
                keep_vars=True
            )  # the tensors themselves, before any wrapping
            if isinstance(mechanism, ModelDefense):
                mechanism.apply(local_model, rng=int(g.integers(2**31)))
            _local_adam(
                local_model,
                tokenizer,
                client_texts[i],
                **{k: check[k] for k in ("steps", "batch_size", "lr", "max_length")},
                mechanism=mechanism,
                rng=g,
                device=device,
            )
            states.append({k: v.detach().clone() for k, v in live.items()})
        w = sizes[list(chosen)] / sizes[list(chosen)].sum()
        new = {
            k: sum(float(wi) * s[k].float() for wi, s in zip(w, states)).to(states[0][k].dtype)
            for k in states[0]
        }
        glob.load_state_dict(new)
        path = os.path.join(out_dir, f"round_{r:04d}.pt")
        torch.save(glob.state_dict(), path)
        paths.append(path)
        selection.append(chosen)
    return paths, selection


#: backwards-compatible name of :func:`async_fedavg_snapshots`
fedavg_snapshots = async_fedavg_snapshots


@SCENARIOS.register("fl.snapshots")
class FLSnapshotsScenario(Scenario):
    """Federated LM training with per-round snapshots (record paper, Sec. V-A, scaled down).

    4 clients (1 bundled-corpus user each in ``quick``), 2 selected per round (without
    replacement); every client holds one record (``full``: an SSN ``"my social security number is ddd-dd-dddd"``; ``quick``: a PIN ``"my pin code is dddd"``)
    inserted ``record_repeats`` = 4 times, and one watermark (5 random words) inserted once.
    Distinct watermarks in every client let one training run serve one watermark trial per client
    (each trial's adversary uses only its own watermark). Trials: one per client (the victim), a
    :class:`ModelSnapshots` with ``meta = {victim, watermark, record_pattern}``; ground truth = the
    victim's record text. Utility: final global model's held-out loss / perplexity (costs).

    Model (``model=``): ``"gpt2"`` (tiny GPT-2, the preset default) or ``"lstm"`` (a tiny LSTM LM,
    :func:`privnlp.models.lstm_lm.tiny_lstm_lm`, the paper's model family). ``None`` = the
    mechanism's ``requires_model`` if it has one (``lstm_dropout`` needs LSTM layers), else the
    preset's. The undefended baseline (``mechanism=None``) uses the scenario's own setting, so a
    defense that needs the LSTM is audited on ``fl.snapshots.lstm`` (this class with
    ``model="lstm"``) to compare like with like.

    Engines: a federated mechanism (``fedavg`` / ``dp_fedavg``, anything with ``aggregate``) runs in
    :class:`privnlp.mechanisms.federated.FedSimulator` with its own configuration (clients per round,
    local SGD); ``mechanism=None`` and the embedding-obfuscation mechanisms (``apply(model, rng=...)``:
    noised / dropout embedding, LSTM dropout; ``loss_terms(...)``: adversarial embedding) run the
    paper's asynchronous FedAvg, :func:`async_fedavg_snapshots` (local Adam, data-size-weighted
    average). Compare a federated mechanism with ``fedavg`` under the same configuration, not with
    ``None``. Snapshot files go to a fresh temporary directory (``PRIVNLP_SNAPSHOT_DIR`` overrides
    the parent).
    """

    threat_model = _FL_OBSERVER
    utility_higher_is_better = {"heldout_loss": False, "heldout_perplexity": False}
    default_model: str | None = None

    def __init__(
        self,
        preset: str = "quick",
        record_repeats: int | None = None,
        rounds: int | None = None,
        model: str | None = None,
        device: str | None = None,
    ) -> None:
        if preset not in FL_PRESETS:
            raise InvalidArgument(f"preset must be one of {sorted(FL_PRESETS)}; got {preset!r}")
        if model is not None and model not in FL_MODELS:
            raise InvalidArgument(f"model must be one of {FL_MODELS} or None; got {model!r}")
        self.preset = preset
        self.record_repeats = record_repeats
        self.rounds = rounds
        self.model = model
        # where the clients' local Adam steps run; None = privnlp evaluate --device (realistic.use_device)
        self.device = scenario_device(device)

    def model_for(self, mechanism: Any | None) -> str:
        """The model family this scenario trains for ``mechanism`` (see the class docstring)."""
        need = getattr(mechanism, "requires_model", None) if mechanism is not None else None
        chosen = self.model or self.default_model
        if need is not None and chosen is not None and need != chosen:
            raise InvalidArgument(
                f"mechanism {getattr(mechanism, 'name', type(mechanism).__name__)!r} requires "
                f"model={need!r}; this fl.snapshots scenario is set to model={chosen!r}"
            )
        return str(need or chosen or FL_PRESETS[self.preset]["model"])

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        cfg = FL_PRESETS[self.preset]
        kind = self.model_for(mechanism)
        g = as_numpy(rng)
        seed = int(g.integers(0, 2**31 - 1))
        n = int(cfg["n_clients"])
        if self.preset == "realistic":
            if kind != "gpt2":
                raise InvalidArgument(
                    f"the realistic fl.snapshots preset trains the realistic GPT-2 LM; model={kind!r} "
                    "is not available on it (use preset='quick' or 'full' for the LSTM)"
                )
            clients, heldout, tok, factory = fl_clients(
                n, int(cfg["paragraphs_per_client"]), int(cfg["heldout"])
            )
        else:
            corpus = generate_corpus(
                n_users=n * cfg["users_per_client"] + 1,
                records_per_user=cfg["records_per_user"],
                seed=seed,
            )
            users = list(corpus.users)
            by_user = corpus.by_user()
            heldout = [r.text for r in by_user[users[-1]]]
            clients = [
                [
                    r.text
                    for u in users[i * cfg["users_per_client"] : (i + 1) * cfg["users_per_client"]]
                    for r in by_user[u]
                ]
                for i in range(n)
            ]
            public = [t for c in clients for t in c]
            n_pos = int(cfg[kind]["n_positions"])
            tok = digit_bpe_tokenizer(public, cfg["vocab_size"], model_max_length=n_pos)
            factory = _fl_factory(kind, cfg, len(tok), tok.eos_token_id, seed)
        reps = int(cfg["record_repeats"] if self.record_repeats is None else self.record_repeats)
        records = [make_canary(cfg["record_pattern"], rng=g).text for _ in range(n)]
        marks = [_watermark(g) for _ in range(n)]
        client_texts = []
        for i in range(n):
            texts = clients[i] + [records[i]] * reps + [marks[i]] * int(cfg["watermark_repeats"])
            client_texts.append([texts[j] for j in g.permutation(len(texts))])

        parent = os.environ.get("PRIVNLP_SNAPSHOT_DIR")
        if parent:
            os.makedirs(parent, exist_ok=True)
        out_dir = tempfile.mkdtemp(prefix="privnlp-fl-", dir=parent)
        # snapshots in a fresh temp dir are deleted with the last observation that uses them
        lease = {} if parent else {"_lease": DiskLease(out_dir)}
        rounds = int(self.rounds or cfg["rounds"])
        engine = "async_fedavg_snapshots (record-level paper: M of N clients, local Adam, size-weighted average)"
        extra: dict[str, Any] = {}
        if isinstance(mechanism, Aggregator):
            # a federated mechanism (fedavg / dp_fedavg): privnlp.mechanisms.federated's simulator

            data = lm_client_data(
                tok,
                {str(i): client_texts[i] for i in range(n)},
                max_length=cfg["local"]["max_length"],
            )
            res = FedSimulator(mechanism, Task(factory, _lm_loss, tok), data).run(
                rounds, rng=int(g.integers(2**31)), snapshot_dir=out_dir, evaluate=False
            )
            paths = list(res.snapshots.paths)
            selection = [tuple(int(c) for c in sel) for sel in res.snapshots.selection]
            engine = f"privnlp.mechanisms.federated.FedSimulator ({type(mechanism).__name__})"
            extra["epsilon"] = (
                float(res.claim.epsilon) if res.claim.epsilon is not None else math.nan
            )
        else:
            paths, selection = async_fedavg_snapshots(
                client_texts,
                factory,
                tok,
                rounds=rounds,
                per_round=int(cfg["per_round"]),
                local=cfg["local"],
                out_dir=out_dir,
                mechanism=mechanism,
                rng=g,
                device=self.device,
            )
        trials = tuple(
            Trial(
                ModelSnapshots(
                    paths=tuple(paths),
                    selection=tuple(selection),
                    model_factory=factory,
                    tokenizer=tok,
                    meta={
                        "victim": i,
                        "watermark": marks[i],
                        "record_pattern": cfg["record_pattern"],
                        **lease,
                    },
                ),
                ground_truth=records[i],
            )
            for i in range(n)
        )
        final = ModelSnapshots(
            paths=tuple(paths), selection=tuple(selection), model_factory=factory, tokenizer=tok
        ).load(len(paths) - 1)
        loss = heldout_loss(final, tok, heldout, cfg["local"]["max_length"])
        return ScenarioRun(
            trials=trials,
            utility={"heldout_loss": loss, "heldout_perplexity": math.exp(loss)},
            config={
                "preset": self.preset,
                "model": kind,
                "rounds": len(paths) - 1,
                "n_clients": n,
                "per_round": int(cfg["per_round"]),
                "record_repeats": reps,
                "snapshot_dir": out_dir,
                "federated": engine,
                # FedSimulator (fedavg / dp_fedavg) trains on the CPU: it takes no device yet
                "device": "cpu" if isinstance(mechanism, Aggregator) else self.device,
                **extra,
            },
        )


@SCENARIOS.register("fl.snapshots.lstm")
class FLSnapshotsLSTMScenario(FLSnapshotsScenario):
    """``fl.snapshots`` on the tiny LSTM LM (the record-level paper's model family), for defenses
    that need LSTM layers (``lstm_dropout``) and their undefended baseline on the same model."""

    default_model = "lstm"
