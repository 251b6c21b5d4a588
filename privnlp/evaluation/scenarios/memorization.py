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

import math
import os
import tempfile
from typing import Any, Mapping

import numpy as np

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument
from privnlp.core.observations import BlackBoxLM, ModelSnapshots
from privnlp.core.protocols import Scenario, ScenarioRun, Trial
from privnlp.core.registry import SCENARIOS
from privnlp.core.rng import as_numpy

__all__ = ["digit_bpe_tokenizer", "LMCanaryScenario", "FLSnapshotsScenario", "LM_CANARY_PRESETS", "FL_PRESETS", "train_canary_lm",
           "heldout_loss", "fedavg_snapshots"]

LM_CANARY_PRESETS: dict[str, dict[str, Any]] = {
    "quick": {"corpus": {"n_users": 12, "records_per_user": 10}, "heldout_users": 2, "vocab_size": 500,
              "pattern": "my pin code is {digits:4}", "n_canaries": 1, "repeats": 16,
              "model": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64},
              "train": {"steps": 200, "batch_size": 12, "lr": 3e-3, "max_length": 48},
              "dp": {"batch_size": 32, "lr": 1e-2}},
    "full": {"corpus": {"n_users": 50, "records_per_user": 20}, "heldout_users": 10, "vocab_size": 1000,
             "pattern": "my social security number is {ssn}", "n_canaries": 3, "repeats": 20,
             "model": {"n_layer": 2, "n_embd": 128, "n_head": 2, "n_positions": 128},
             "train": {"steps": 1500, "batch_size": 16, "lr": 2e-3, "max_length": 96},
             "dp": {"batch_size": 64, "lr": 1e-2}},
}

_BLACK_BOX = ThreatModel(
    adversary=Adversary.BLACK_BOX_QUERIER, observes=("log-probabilities of the released LM",),
    knows=("the canary format and randomness space", "the tokenizer"),
    goal="measure / extract a canary inserted in the training data")


def digit_bpe_tokenizer(texts: list[str], vocab_size: int, *, model_max_length: int = 128) -> Any:
    """:func:`privnlp.models.train_bpe_tokenizer` with digits split one per pre-token.

    Byte-level BPE merges runs of digits ("6523" -> one token, "652" -> two others), so partial
    secrets tokenize differently from full ones and a digit-by-digit beam search scores
    inconsistent sequences. Splitting digits (as LLaMA-style tokenizers do) keeps every partial
    secret a prefix of the full one in token space. Same special tokens as the models' helper.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from privnlp.models.tokenization import EOT, _no_parallelism

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=int(vocab_size), special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    with _no_parallelism():
        tok.train_from_iterator(sorted(texts), trainer=trainer, length=len(texts))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT, unk_token=EOT, pad_token=EOT,
                                   model_max_length=int(model_max_length),
                                   model_input_names=["input_ids", "attention_mask"])
    fast.padding_side = "right"
    return fast


def heldout_loss(model: Any, tokenizer: Any, texts: list[str], max_length: int = 64) -> float:
    """Mean next-token loss (nats) on held-out ``texts`` (token-weighted)."""
    import torch

    from privnlp.models.training import lm_batch

    tot, n = 0.0, 0
    was = model.training
    model.eval()
    with torch.inference_mode():
        for s in range(0, len(texts), 64):
            b = lm_batch(tokenizer, texts[s:s + 64], max_length)
            k = int((b.labels[:, 1:] != -100).sum())
            tot += float(model(**b).loss) * k
            n += k
    model.train(was)
    return tot / max(n, 1)


def _dp_train(mechanism: Any, model: Any, tokenizer: Any, texts: list[str], cfg: Mapping[str, Any], *, rng: Any
              ) -> tuple[Any, dict[str, Any]]:
    """DP-SGD through the mechanism's ``make_private`` (opacus) on the same examples."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from privnlp.mechanisms.training.dp_sgd import per_sample_lm_loss
    from privnlp.mechanisms.training.loop import train_private
    from privnlp.models.training import lm_batch

    b = lm_batch(tokenizer, texts, cfg["train"]["max_length"])
    ds = TensorDataset(b.input_ids, b.attention_mask, b.labels)
    loader = DataLoader(ds, batch_size=int(cfg["dp"]["batch_size"]), shuffle=True,
                        generator=torch.Generator().manual_seed(int(as_numpy(rng).integers(2**31))))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=float(cfg["dp"]["lr"]))
    steps = getattr(mechanism, "steps", None)
    epochs = getattr(mechanism, "epochs", None)
    if steps is None and epochs is None:
        steps = int(cfg["train"]["steps"])
    # make_private may need the planned length to calibrate sigma from target_epsilon
    if getattr(mechanism, "epochs", None) is None and getattr(mechanism, "steps", None) is None:
        import copy

        mechanism = copy.copy(mechanism)
        mechanism.steps = steps
    pt = mechanism.make_private(model, opt, loader, rng=int(as_numpy(rng).integers(2**31)))

    def loss_fn(m: Any, batch: Any) -> Any:
        ids, mask, labels = batch
        t = ids.shape[1]
        pos = torch.arange(t).unsqueeze(0).repeat(ids.shape[0], 1)
        return per_sample_lm_loss(m(input_ids=ids, attention_mask=mask, position_ids=pos).logits, labels)

    res = train_private(pt, loss_fn, epochs=epochs if steps is None else None, steps=steps, stop_at_budget=True)
    trained = getattr(pt, "original_model", model)
    trained.eval()
    info = {"epsilon": float(res.epsilon), "dp_steps": int(res.steps), "stopped_by_budget": bool(res.stopped_by_budget)}
    return trained, info


def train_canary_lm(mechanism: Any | None = None, *, preset: str = "quick", repeats: int | None = None,
                    pattern: str | None = None, n_canaries: int | None = None, rng: Any) -> dict[str, Any]:
    """Train the ``lm.canary`` model; returns ``{"model", "tokenizer", "canaries", "heldout", "info"}``."""
    # deferred: scenario modules are imported on registry lookup
    from privnlp.data import generate_corpus, make_canary
    from privnlp.models import tiny_gpt2, train_lm

    if preset not in LM_CANARY_PRESETS:
        raise InvalidArgument(f"preset must be one of {sorted(LM_CANARY_PRESETS)}; got {preset!r}")
    cfg = LM_CANARY_PRESETS[preset]
    g = as_numpy(rng)
    seed = int(g.integers(0, 2**31 - 1))
    corpus = generate_corpus(**cfg["corpus"], seed=seed)
    users = list(corpus.users)
    held = set(users[-cfg["heldout_users"]:])
    train_texts = [r.text for r in corpus.records if r.user_id not in held]
    heldout = [r.text for r in corpus.records if r.user_id in held]
    tok = digit_bpe_tokenizer(train_texts, cfg["vocab_size"], model_max_length=cfg["model"]["n_positions"])
    pat = pattern or cfg["pattern"]
    reps = int(cfg["repeats"] if repeats is None else repeats)
    canaries = [make_canary(pat, rng=g) for _ in range(int(n_canaries or cfg["n_canaries"]))]
    texts = train_texts + [c.text for c in canaries for _ in range(reps)]
    order = g.permutation(len(texts))
    texts = [texts[i] for i in order]
    eos = tok.eos_token_id
    model = tiny_gpt2(len(tok), **cfg["model"], bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                      seed=seed % (2**31))
    info: dict[str, Any] = {"n_train": len(texts), "repeats": reps, "pattern": pat}
    if mechanism is None:
        log = train_lm(model, tok, texts, **cfg["train"], rng=g)
        info["train_loss"] = log.mean_last(10)
    elif hasattr(mechanism, "make_private"):
        model, dp = _dp_train(mechanism, model, tok, texts, cfg, rng=g)
        info.update(dp)
    else:
        raise InvalidArgument(f"lm.canary supports mechanism=None or a DP-SGD-like mechanism with make_private(); "
                              f"got {type(mechanism).__name__}")
    model.eval()
    return {"model": model, "tokenizer": tok, "canaries": canaries, "heldout": heldout, "info": info}


@SCENARIOS.register("lm.canary")
class LMCanaryScenario(Scenario):
    """Secret sharer on a tiny GPT-2 trained on the bundled corpus with canaries inserted ``repeats``
    times (see the module docstring). Utility: ``heldout_loss`` / ``heldout_perplexity`` (costs)."""

    threat_model = _BLACK_BOX
    utility_higher_is_better = {"heldout_loss": False, "heldout_perplexity": False}

    def __init__(self, preset: str = "quick", repeats: int | None = None, pattern: str | None = None) -> None:
        if preset not in LM_CANARY_PRESETS:
            raise InvalidArgument(f"preset must be one of {sorted(LM_CANARY_PRESETS)}; got {preset!r}")
        self.preset = preset
        self.repeats = repeats
        self.pattern = pattern

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        out = train_canary_lm(mechanism, preset=self.preset, repeats=self.repeats, pattern=self.pattern, rng=rng)
        model, tok = out["model"], out["tokenizer"]
        cfg = LM_CANARY_PRESETS[self.preset]
        loss = heldout_loss(model, tok, out["heldout"], cfg["train"]["max_length"])
        trials = tuple(Trial(BlackBoxLM(model=model, tokenizer=tok, kind="causal",
                                        meta={"canary_pattern": c.pattern, "canary_space": c.randomness_space}),
                             ground_truth=c) for c in out["canaries"])
        info = {k: v for k, v in out["info"].items() if isinstance(v, (int, float, str, bool))}
        return ScenarioRun(trials=trials, utility={"heldout_loss": loss, "heldout_perplexity": math.exp(loss)},
                           config={"preset": self.preset, **info})
