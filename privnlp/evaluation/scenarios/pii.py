"""Scenario ``pii.redaction``: a redactor is learned from the training users' documents and their known
PII fields (no human annotation), then redacts held-out users' documents whose PII it never saw.

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt``. Trials:

* :class:`PerturbedText` of redacted held-out documents (half of each held-out user's records, plus one
  canary record per user that repeats the user's name / phone / e-mail); ``meta`` carries the other half
  of their records, unredacted, as the adversary's background documents; ground truth: the gold PII
  strings of each document and its author (``pii_residual``);
* optionally a :class:`BlackBoxLM`: a tiny GPT-2 trained on the *redacted* training corpus into which a
  canary ``call me at 555-867-{digits:4}`` was inserted before redaction (``canary_exposure``).

``mechanism=None`` releases the documents unredacted (the undefended baseline). Utility:
``redaction_precision`` (fraction of redacted spans that overlap gold PII) and ``non_pii_tokens_kept``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from faker import Faker

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument
from privnlp.core.observations import BlackBoxLM, PerturbedText
from privnlp.core.protocols import Scenario, ScenarioRun, Trial
from privnlp.core.registry import SCENARIOS
from privnlp.core.rng import as_numpy
from privnlp.data import generate_corpus, make_canary
from privnlp.data.corpus import tokenize
from privnlp.evaluation.scenarios.memorization import digit_bpe_tokenizer
from privnlp.models.builders import tiny_gpt2
from privnlp.models.training import train_lm

__all__ = ["PIIRedactionScenario", "PII_PRESETS", "canary_record"]

PII_PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "n_users": 30,
        "records_per_user": 8,
        "heldout_users": 6,
        "n_trials": 3,
        "lm": {
            "steps": 200,
            "repeats": 16,
            "vocab_size": 500,
            "batch_size": 12,
            "lr": 3e-3,
            "max_length": 48,
            "model": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64},
        },
    },
    "full": {
        "n_users": 60,
        "records_per_user": 12,
        "heldout_users": 12,
        "n_trials": 4,
        "lm": {
            "steps": 600,
            "repeats": 16,
            "vocab_size": 800,
            "batch_size": 16,
            "lr": 3e-3,
            "max_length": 64,
            "model": {"n_layer": 2, "n_embd": 96, "n_head": 2, "n_positions": 96},
        },
    },
}
CANARY_PATTERN = "call me at 555-867-{digits:4}"


def canary_record(seed: int) -> tuple[str, list[tuple[int, int, str]]]:
    """A held-out record with fresh PII mentioned repeatedly (name, phone, e-mail, date), with gold spans."""

    f = Faker("en_US")
    f.seed_instance(int(seed))
    first, last = f.first_name(), f.last_name()
    phone = f"{f.random_int(201, 989)}-{f.random_int(200, 999)}-{f.random_int(0, 9999):04d}"
    email = f"{first.lower()}.{last.lower()}@{f.free_email_domain()}"
    date = f.date_between("-5y", "today").strftime("%B %d, %Y")
    pieces = [
        ("Follow-up for ", None),
        (f"{first} {last}", "PERSON"),
        (" on ", None),
        (date, "DATE"),
        (". ", None),
        (first, "PERSON"),
        (" asked us to call ", None),
        (phone, "PHONE"),
        (" or write to ", None),
        (email, "EMAIL"),
        (". Please call ", None),
        (first, "PERSON"),
        (" at ", None),
        (phone, "PHONE"),
        (" again; copy ", None),
        (email, "EMAIL"),
        (". ", None),
        (last, "PERSON"),
        (" confirmed.", None),
    ]
    text, spans, pos = "", [], 0
    for s, lab in pieces:
        if lab:
            spans.append((pos, pos + len(s), lab))
        text += s
        pos += len(s)
    return text, spans


@SCENARIOS.register("pii.redaction")
class PIIRedactionScenario(Scenario):
    """Redactor learned on training users, applied to held-out users (see the module docstring)."""

    threat_model = ThreatModel(
        adversary=Adversary.DATA_RECIPIENT,
        observes=("the redacted held-out documents", "an LM trained on the redacted corpus"),
        knows=("other documents of the same users", "the canary format"),
        goal="read residual PII, re-identify authors, extract the canary",
    )
    utility_higher_is_better = {"redaction_precision": True, "non_pii_tokens_kept": True}

    def __init__(self, preset: str = "quick", lm: bool = True) -> None:
        if preset not in PII_PRESETS:
            raise InvalidArgument(f"preset must be one of {sorted(PII_PRESETS)}; got {preset!r}")
        self.preset = preset
        self.lm = lm

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        cfg = PII_PRESETS[self.preset]
        g = as_numpy(rng)
        seed = int(g.integers(0, 2**31 - 1))
        corpus = generate_corpus(cfg["n_users"], cfg["records_per_user"], seed=seed)
        users = list(corpus.users)
        held = users[-cfg["heldout_users"] :]
        train = [r for r in corpus.records if r.user_id not in set(held)]
        redactor = (
            mechanism.fit(train, corpus.known_fields, rng=g) if mechanism is not None else None
        )
        by = corpus.by_user()
        targets: list[tuple[str, list[tuple[int, int, str]], str]] = []
        aux_texts, aux_users = [], []
        for k, u in enumerate(held):
            recs = by[u]
            half = len(recs) // 2
            aux_texts += [r.text for r in recs[:half]]
            aux_users += [u] * half
            targets += [
                (r.text, [(s.start, s.end, s.label) for s in r.spans], u) for r in recs[half:]
            ]
            targets.append((*canary_record(seed * 1000 + k), u))
        texts = [t for t, _, _ in targets]
        if redactor is not None:
            results = redactor.redact_many(texts)
            red = [r.text for r in results]
            pred_spans = [r.spans for r in results]
        else:
            red, pred_spans = list(texts), [() for _ in texts]
        mentions = [[t[a:b] for a, b, _ in sp] for t, sp, _ in targets]
        util = self._utility(targets, pred_spans)
        trials = []
        for chunk in np.array_split(np.arange(len(targets)), cfg["n_trials"]):
            obs = PerturbedText(
                texts=tuple(red[i] for i in chunk),
                mechanism=mechanism,
                meta={"aux_texts": aux_texts, "aux_users": aux_users, "unit": "document"},
            )
            trials.append(
                Trial(
                    obs,
                    {
                        "mentions": [mentions[i] for i in chunk],
                        "users": [targets[i][2] for i in chunk],
                    },
                )
            )
        info: dict[str, Any] = {}
        if self.lm:
            trials.append(self._lm_trial(train, redactor, cfg["lm"], g, info))
        return ScenarioRun(
            tuple(trials),
            util,
            {
                "preset": self.preset,
                "train_users": len(users) - len(held),
                "heldout_users": len(held),
                "targets": len(targets),
                **info,
            },
        )

    @staticmethod
    def _utility(targets: list, pred_spans: list) -> dict[str, float]:
        n_pred = hit = 0
        kept = tot = 0
        for (text, gold, _), pred in zip(targets, pred_spans):
            for s in pred:
                n_pred += 1
                hit += any(s.start < b and a < s.end for a, b, _ in gold)
            for _, a, b in tokenize(text):
                if any(a < gb and ga < b for ga, gb, _ in gold):
                    continue
                tot += 1
                kept += not any(a < s.end and s.start < b for s in pred)
        out = {"non_pii_tokens_kept": kept / tot if tot else 1.0}
        if n_pred:
            out["redaction_precision"] = hit / n_pred
        return out

    @staticmethod
    def _lm_trial(
        train: list, redactor: Any, cfg: dict, g: np.random.Generator, info: dict
    ) -> Trial:
        canary = make_canary(CANARY_PATTERN, rng=g)
        texts = [r.text for r in train] + [canary.text] * int(cfg["repeats"])
        if redactor is not None:
            texts = [r.text for r in redactor.redact_many(texts)]
        texts = [texts[i] for i in g.permutation(len(texts))]
        tok = digit_bpe_tokenizer(
            texts, cfg["vocab_size"], model_max_length=cfg["model"]["n_positions"]
        )
        eos = tok.eos_token_id
        lm_seed = int(g.integers(0, 2**31 - 1))
        model = tiny_gpt2(
            len(tok),
            **cfg["model"],
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
            seed=lm_seed,
        )
        log = train_lm(
            model,
            tok,
            texts,
            steps=cfg["steps"],
            batch_size=cfg["batch_size"],
            lr=cfg["lr"],
            max_length=cfg["max_length"],
            rng=g,
        )
        model.eval()
        info["lm_train_loss"] = float(log.mean_last(10))
        info["canary_redacted"] = bool(
            redactor is not None and canary.secret not in " ".join(texts)
        )
        return Trial(
            BlackBoxLM(
                model=model,
                tokenizer=tok,
                kind="causal",
                meta={"canary_pattern": canary.pattern, "canary_space": canary.randomness_space},
            ),
            ground_truth=canary,
        )
