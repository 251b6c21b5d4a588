"""Scenario ``mpc.inference``: Bob classifies his texts with Alice's TextCNN.

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt. With a mechanism (e.g.
``crypten_textcnn``) the classification runs under MPC and each party's recorded view becomes a
:class:`~privnlp.core.observations.PartyView` trial, whose ground truth is the *other* party's
private values (Bob's view -> Alice's weights; Alice's view -> Bob's embeddings). With ``None``
(the undefended baseline) Bob sends his embedding to Alice in the clear and gets the label back.
Utility: accuracy on the held-out texts and agreement with plaintext inference.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import numpy as np
import torch

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.observations import PartyView
from privnlp.core.protocols import Scenario, ScenarioRun, Trial
from privnlp.core.registry import SCENARIOS
from privnlp.core.rng import seed_of
from privnlp.mechanisms.mpc.crypten_model_state import weights_dict
from privnlp.mechanisms.mpc.textcnn import train_alice_model

PRESETS = {
    "quick": {"n": 400, "n_eval": 32, "epochs": 10},
    "full": {"n": 2000, "n_eval": 200, "epochs": 15},
}


@functools.lru_cache(maxsize=4)
def _alice(n: int, encoder: str, epochs: int, seed: int) -> Any:
    return train_alice_model(n=n, encoder=encoder, epochs=epochs, seed=seed)


def _fixed_point(x: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(x, np.float64) * 2**16).astype(np.int64)


@SCENARIOS.register("mpc.inference")
class MPCInferenceScenario(Scenario):
    threat_model: ClassVar[ThreatModel] = ThreatModel(
        adversary=Adversary.MPC_PARTY,
        observes=("what one party receives during inference",),
        knows=("the architecture", "the public encoder"),
        goal="learn the other party's private values",
    )
    utility_higher_is_better: ClassVar[dict[str, bool]] = {
        "accuracy": True,
        "agreement_with_plaintext": True,
        "seconds_per_instance": False,
    }

    def __init__(self, preset: str = "quick", encoder: str = "auto") -> None:
        super().__init__(preset)
        self.encoder = encoder

    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        cfg = PRESETS.get(self.preset, PRESETS["quick"])
        seed = seed_of(rng) % (2**31)
        alice, xt, yt = _alice(cfg["n"], self.encoder, cfg["epochs"], seed)
        x, y = xt[: cfg["n_eval"]], yt[: cfg["n_eval"]]
        plain = alice.model.predict(torch.tensor(x)).numpy()
        config = {
            "preset": self.preset,
            "encoder": alice.encoder.resolved,
            "embed_dim": int(x.shape[1]),
            "n_eval": int(len(x)),
            "model": alice.model.config(),
        }
        if mechanism is None:
            views = (
                PartyView(
                    party="alice",
                    received={"plain/bob_input/0000": _fixed_point(x).ravel()},
                    meta={"baseline": "plaintext inference"},
                ),
                PartyView(party="bob", received={}, opened={"label": plain}),
            )
            labels, seconds = plain, 0.0
        else:
            res = mechanism.classify(alice.model, x, rng=rng, record=True)
            views, labels, seconds = res.views, np.asarray(res.labels), res.seconds
            config["comm"] = {k: dict(v) for k, v in res.comm.items()}
        mode = getattr(mechanism, "mode", "batched")
        bob_truth = {
            f"bob_input/{i:04d}": (x.ravel() if mode == "batched" else x[i])
            for i in range(1 if mode == "batched" else len(x))
        }
        alice_truth = weights_dict(alice.model)
        trials = tuple(Trial(v, bob_truth if v.party == "alice" else alice_truth) for v in views)
        utility = {
            "accuracy": float((labels == y).mean()),
            "agreement_with_plaintext": float((labels == plain).mean()),
            "seconds_per_instance": float(seconds / max(1, len(x))),
        }
        return ScenarioRun(trials=trials, utility=utility, config=config)
