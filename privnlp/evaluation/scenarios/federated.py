"""Federated scenario ``fl.dp_fedavg``: the federated secret sharer on a tiny LM trained with FedAvg.

Papers: ``../shared/papers/unintended-memorization-under-fl.txt`` (federated secret sharer: a canary
replaces examples of some users; FedAvg vs DP-FedAvg; exposure of the final model) and
``../shared/papers/record-level-privacy-leakage-in-fl.txt`` (global snapshots of every round observed by
an eavesdropper, a watermark the adversary plants in the victim's data).

Setup (per seed): the bundled corpus's natural users (non-IID), the last ``heldout_users`` kept for
utility; a digit-split BPE tokenizer (:func:`~privnlp.evaluation.scenarios.memorization.digit_bpe_tokenizer`);
a canary ``"my pin code is dddd"`` (the ``lm.canary`` format); ``n_sharers`` users are secret sharers:
each of their records is replaced by the canary with probability ``p_e`` (at least ``min_copies``
per sharer) and each sharer also appends ``extra_copies`` standalone canary examples. Training:
:class:`~privnlp.mechanisms.federated.FedSimulator` with the mechanism under audit, or, for
``mechanism=None`` (the undefended system), plain weighted FedAvg with the preset's client
hyperparameters (no clipping, no noise).

Trials (the memorization attacks' formats, scored unchanged):

* one :class:`BlackBoxLM` of the final global model, ``meta = {"canary_pattern", "canary_space"}``,
  ground truth = the :class:`~privnlp.data.Canary` (``canary_exposure``, ``canary_extraction``);
* with ``snapshots=True`` (the ``full`` preset), one :class:`ModelSnapshots` per sharer (snapshots
  streamed to disk by the simulator, ``selection`` = client ids per round, ``meta = {"victim",
  "watermark", "record_pattern"}``, ground truth = the canary text) for ``eavesdropping`` /
  ``watermark``; each sharer also holds its own 5-word watermark once.

Utility: held-out next-token loss and perplexity of the final model (costs).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from privnlp.attacks.memorization import federated_secret_sharer
from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument
from privnlp.core.observations import BlackBoxLM, DiskLease, ModelSnapshots
from privnlp.core.protocols import Aggregator, Scenario, ScenarioRun, Trial
from privnlp.core.registry import SCENARIOS
from privnlp.core.rng import as_numpy
from privnlp.data import generate_corpus, make_canary
from privnlp.data.canaries import DEFAULT_WORDS
from privnlp.evaluation.scenarios.memorization import digit_bpe_tokenizer, heldout_loss
from privnlp.mechanisms.federated import FedAvg, FedSimulator, lm_client_data, lm_task
from privnlp.models.builders import tiny_gpt2

__all__ = [
    "FL_DP_FEDAVG_PRESETS",
    "FLDPFedAvgScenario",
    "FLRareCanaryScenario",
    "federated_secret_sharer_data",
]

FL_DP_FEDAVG_PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "corpus": {"n_users": 10, "records_per_user": 8},
        "heldout_users": 2,
        "vocab_size": 300,
        "pattern": "my pin code is {digits:4}",
        "n_sharers": 2,
        "p_e": 0.3,
        "min_copies": 2,
        "extra_copies": 6,
        "rounds": 12,
        "max_length": 24,
        "model": {"n_layer": 1, "n_embd": 48, "n_head": 2, "n_positions": 32},
        "fedavg": {
            "clients_per_round": 4,
            "local_epochs": 2,
            "local_batch_size": 8,
            "local_lr": 0.5,
        },
        "snapshots": False,
    },
    "full": {
        "corpus": {"n_users": 40, "records_per_user": 12},
        "heldout_users": 5,
        "vocab_size": 600,
        "pattern": "my pin code is {digits:4}",
        "n_sharers": 4,
        "p_e": 0.3,
        "min_copies": 2,
        "extra_copies": 6,
        "rounds": 60,
        "max_length": 40,
        "model": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64},
        "fedavg": {
            "clients_per_round": 10,
            "local_epochs": 2,
            "local_batch_size": 8,
            "local_lr": 0.5,
        },
        "snapshots": True,
    },
}

_OBSERVER = ThreatModel(
    adversary=Adversary.BLACK_BOX_QUERIER,
    observes=(
        "log-probabilities of the final global model",
        "global snapshots + selection log (full preset)",
    ),
    knows=("the canary format and randomness space", "the tokenizer and architecture"),
    goal="measure / extract a canary that secret-sharer users contributed to federated training",
)


def _watermark(g: Any) -> str:
    return " ".join(str(w) for w in g.choice(DEFAULT_WORDS, size=5, replace=False))


def federated_secret_sharer_data(cfg: Mapping[str, Any], *, rng: Any) -> dict[str, Any]:
    """Corpus -> per-user training texts with the canary inserted for ``n_sharers`` users.

    Returns ``{"clients": {user: [texts]}, "heldout": [texts], "canary", "sharers", "insertions",
    "watermarks": {sharer: text}, "public": [texts for the tokenizer]}``.
    """
    g = as_numpy(rng)
    seed = int(g.integers(0, 2**31 - 1))
    corpus = generate_corpus(**cfg["corpus"], seed=seed)
    users = list(corpus.users)
    held = set(users[-int(cfg["heldout_users"]) :])
    train_users = [u for u in users if u not in held]
    canary = make_canary(cfg["pattern"], rng=g)
    sharers = [
        train_users[i]
        for i in sorted(g.choice(len(train_users), size=int(cfg["n_sharers"]), replace=False))
    ]
    by_user = corpus.by_user()
    clients: dict[str, list[str]] = {}
    insertions = 0
    marks: dict[str, str] = {}
    for u in train_users:
        recs = list(by_user[u])
        if u in sharers:
            # the paper's sharer: every example replaced with probability p_e (Poisson); a floor keeps the
            # undefended system's memorization visible in a tiny run
            new, _, n = federated_secret_sharer(recs, canary, p_u=1.0, p_e=float(cfg["p_e"]), rng=g)
            texts = [r.text for r in new]
            extra = max(0, int(cfg["min_copies"]) - n) + int(cfg["extra_copies"])
            texts += [canary.text] * extra
            insertions += n + extra
            marks[u] = _watermark(g)
            texts.append(marks[u])
            texts = [texts[j] for j in g.permutation(len(texts))]
        else:
            texts = [r.text for r in recs]
        clients[u] = texts
    public = [r.text for r in corpus.records if r.user_id not in held]
    return {
        "clients": clients,
        "heldout": [r.text for r in corpus.records if r.user_id in held],
        "canary": canary,
        "sharers": tuple(sharers),
        "insertions": insertions,
        "watermarks": marks,
        "public": public,
        "seed": seed,
    }


@SCENARIOS.register("fl.dp_fedavg")
class FLDPFedAvgScenario(Scenario):
    """Federated secret sharer on a tiny GPT-2 trained with FedAvg / DP-FedAvg (see the module docstring).

    ``mechanism``: ``None`` (plain weighted FedAvg, the undefended system) or any federated mechanism
    the :class:`~privnlp.mechanisms.federated.FedSimulator` accepts (``fedavg``, ``dp_fedavg``, the leaky
    twin). ``rounds`` / ``snapshots`` override the preset. Snapshot files go to a fresh temporary
    directory (``PRIVNLP_SNAPSHOT_DIR`` overrides the parent).
    """

    threat_model = _OBSERVER
    utility_higher_is_better = {"heldout_loss": False, "heldout_perplexity": False}
    PRESETS: dict[str, dict[str, Any]] = FL_DP_FEDAVG_PRESETS

    def __init__(
        self, preset: str = "quick", rounds: int | None = None, snapshots: bool | None = None
    ) -> None:
        if preset not in self.PRESETS:
            raise InvalidArgument(f"preset must be one of {sorted(self.PRESETS)}; got {preset!r}")
        if rounds is not None and (not isinstance(rounds, int) or rounds < 1):
            raise InvalidArgument(f"rounds must be an integer >= 1; got {rounds!r}")
        self.preset = preset
        self.rounds = rounds
        self.snapshots = snapshots

    @classmethod
    def model_parameters(cls, preset: str = "quick") -> int:
        """Trainable coordinates of the preset's tiny GPT-2 with the preset's vocabulary size (the
        tokenizer's size is at most that, so this bounds the model from above): the vector length
        SecAgg+ quantises in the dp_fedavg card's secure mode."""
        cfg = cls.PRESETS[preset]
        model = tiny_gpt2(int(cfg["vocab_size"]), **cfg["model"], tie_word_embeddings=False)
        return int(sum(p.numel() for p in model.parameters() if p.requires_grad))

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        cfg = self.PRESETS[self.preset]
        g = as_numpy(rng)
        d = federated_secret_sharer_data(cfg, rng=g)
        tok = digit_bpe_tokenizer(
            d["public"], int(cfg["vocab_size"]), model_max_length=cfg["model"]["n_positions"]
        )
        task = lm_task(tok, **cfg["model"], seed=d["seed"] % (2**31))
        data = lm_client_data(tok, d["clients"], max_length=int(cfg["max_length"]))
        mech = FedAvg(**cfg["fedavg"]) if mechanism is None else mechanism
        if not isinstance(mech, Aggregator):
            raise InvalidArgument(
                "fl.dp_fedavg needs mechanism=None or a federated mechanism (fedavg, dp_fedavg); "
                f"got {type(mechanism).__name__}"
            )
        rounds = int(self.rounds or cfg["rounds"])
        want_snaps = bool(cfg["snapshots"] if self.snapshots is None else self.snapshots)
        snap_dir = None
        if want_snaps:
            parent = os.environ.get("PRIVNLP_SNAPSHOT_DIR")
            if parent:
                os.makedirs(parent, exist_ok=True)
            snap_dir = tempfile.mkdtemp(prefix="privnlp-fldp-", dir=parent)
        lease = (
            {"_lease": DiskLease(snap_dir)}
            if snap_dir and not os.environ.get("PRIVNLP_SNAPSHOT_DIR")
            else {}
        )
        res = FedSimulator(mech, task, data).run(
            rounds, rng=int(g.integers(0, 2**31 - 1)), snapshot_dir=snap_dir, evaluate=False
        )
        model = res.model
        model.eval()
        c = d["canary"]
        trials = [
            Trial(
                BlackBoxLM(
                    model=model,
                    tokenizer=tok,
                    kind="causal",
                    meta={"canary_pattern": c.pattern, "canary_space": c.randomness_space},
                ),
                ground_truth=c,
            )
        ]
        if want_snaps and res.snapshots is not None:
            snaps = res.snapshots
            for u in d["sharers"]:
                trials.append(
                    Trial(
                        ModelSnapshots(
                            paths=tuple(snaps.paths),
                            selection=tuple(snaps.selection),
                            model_factory=task.model_factory,
                            tokenizer=tok,
                            meta={
                                "victim": u,
                                "watermark": d["watermarks"][u],
                                "record_pattern": c.pattern,
                                **lease,
                            },
                        ),
                        ground_truth=c.text,
                    )
                )
        loss = heldout_loss(model, tok, d["heldout"], int(cfg["max_length"]))
        claim = res.claim
        config: dict[str, Any] = {
            "preset": self.preset,
            "rounds": rounds,
            "n_clients": len(data),
            "n_sharers": len(d["sharers"]),
            "canary_insertions": d["insertions"],
            "mechanism": type(mech).__name__,
            "snapshots": want_snaps,
        }
        if claim.epsilon is not None and math.isfinite(claim.epsilon):
            config["claimed_epsilon"] = float(claim.epsilon)
            config["claimed_unit"] = claim.unit.value if claim.unit is not None else ""
        return ScenarioRun(
            trials=tuple(trials),
            utility={"heldout_loss": loss, "heldout_perplexity": math.exp(loss)},
            config=config,
        )


@SCENARIOS.register("fl.rare_canary")
class FLRareCanaryScenario(FLDPFedAvgScenario):
    """``fl.dp_fedavg`` with a rare, high-entropy canary: 8 random digits (|R| = 10^8, exposure at
    most 26.6 bits, extrapolated) inserted only by the sharers' Poisson replacement (no extra
    copies, 2-6 insertions in all). Plain FedAvg memorizes the 4-digit canary of ``fl.dp_fedavg``
    to the maximum exposure (13.3 bits) within a few rounds, which leaves no room to see a leakier
    aggregation; here its exposure stays below the maximum, so the ``fedavg`` card (and its leaky
    twin) is measured on this scenario.
    """

    PRESETS = {
        name: {**cfg, "pattern": "my pin code is {digits:8}", "extra_copies": 0}
        for name, cfg in FL_DP_FEDAVG_PRESETS.items()
    }
