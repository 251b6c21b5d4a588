"""Full curves for the attack cards (``make repro``): each writes ``attacks/<name>/results.json``."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from privnlp.core.report import atomic_write_text

ROOT = Path(__file__).resolve().parents[2] / "attacks"
pytestmark = pytest.mark.slow


def _write(name, payload):
    atomic_write_text(ROOT / name / "results.json", json.dumps(payload, indent=2, sort_keys=True))


def _rlg_update(N, seed, act=torch.nn.Tanh, C=500, d=128, K=1):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(32, d), act(), torch.nn.Linear(d, C))
    x, y = torch.randn(N * K, 32), torch.randint(0, C, (N * K,))
    lr = 0.05
    theta0 = [p.detach().clone() for p in net.parameters()]
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for k in range(K):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x[k * N:(k + 1) * N]), y[k * N:(k + 1) * N]).backward()
        opt.step()
    W, b = [(t0 - p.detach()) / lr for t0, p in zip(theta0[2:], list(net.parameters())[2:])]
    return {"classifier.weight": W, "classifier.bias": b}, y.tolist()


@pytest.mark.slow
def test_rlg_results():
    from privnlp.attacks.gradient.rlg import RLG
    from privnlp.core.observations import GradientObservation
    from privnlp.mechanisms.training.transforms import GradDrop, SignSGD

    out = {"setup": "tanh/relu MLP classifier, C=500 labels, d=128, 5 updates per cell",
           "command": "OMP_NUM_THREADS=1 .venv/bin/python -m pytest -m slow -q tests/gradient/test_slow_repro.py -k rlg",
           "rows": []}
    for method in ("rlg", "sign"):
        for act_name, act in (("tanh", torch.nn.Tanh), ("relu", torch.nn.ReLU)):
            for N in (1, 4, 8, 16):
                s = []
                for seed in range(5):
                    g, y = _rlg_update(N, seed, act)
                    obs = GradientObservation(model=None, gradients=g, batch_size=N)
                    s.append(RLG(method=method).run(obs, rng=0).score(y))
                row = {"method": method, "features": act_name, "N": N, "K": 1,
                       **{k: float(np.mean([r[k] for r in s])) for k in s[0]}}
                out["rows"].append(row)
    for tname, t in (("sign_sgd", SignSGD()), ("graddrop_0.5", GradDrop(drop_fraction=0.5)),
                     ("graddrop_0.9", GradDrop(drop_fraction=0.9))):
        s = []
        for seed in range(5):
            g, y = _rlg_update(10, seed)
            obs = GradientObservation(model=None, gradients=t(g, rng=seed), batch_size=10)
            s.append(RLG().run(obs, rng=0).score(y))
        out["rows"].append({"method": "rlg", "features": "tanh", "N": 10, "K": 1, "defense": tname,
                            **{k: float(np.mean([r[k] for r in s])) for k in s[0]}})
    for N, K in ((4, 2), (4, 4)):
        s = []
        for seed in range(5):
            g, y = _rlg_update(N, seed, K=K)
            s.append(RLG().run(GradientObservation(model=None, gradients=g, batch_size=N, num_local_steps=K),
                               rng=0).score(y))
        out["rows"].append({"method": "rlg", "features": "tanh", "N": N, "K": K,
                            **{k: float(np.mean([r[k] for r in s])) for k in s[0]}})
    _write("rlg", out)
    tanh8 = [r for r in out["rows"] if r["method"] == "rlg" and r["features"] == "tanh" and r["N"] == 8 and "defense" not in r]
    assert tanh8[0]["precision"] == 1.0 and tanh8[0]["recall"] == 1.0


@pytest.mark.slow
def test_film_results():
    from privnlp.attacks.gradient.film import FILM
    from privnlp.evaluation.scenarios.gradient import FedSGDEavesdropper
    from privnlp.mechanisms import get as mget

    out = {"setup": "bundled tiny GPT-2 (quick) fine-tuned on 16 client records; 2 FedSGD updates per b; "
                    "FILM beam 16, 200 reordering steps; defenses at b=8 (beam 8, no reordering)",
           "command": "OMP_NUM_THREADS=1 .venv/bin/python -m pytest -m slow -q tests/gradient/test_slow_repro.py -k film",
           "batch_size": [], "defenses": []}
    for b in (1, 2, 4, 8):
        run = FedSGDEavesdropper(task="lm", batch_size=b).run(None, rng=b)
        scores = [FILM(beam_size=16, reorder_steps=200).run(t.observation, rng=0).score(t.ground_truth)
                  for t in run.trials]
        out["batch_size"].append({"b": b, "n_updates": len(scores),
                                  **{k: float(np.mean([s[k] for s in scores])) for k in scores[0]}})
    for name, mech in (("frozen_embeddings", mget("frozen_embeddings")()),
                       ("gradient_pruning_0.99", mget("gradient_pruning")(keep_fraction=0.01)),
                       ("dp_sgd_sigma1", mget("dp_sgd")(noise_multiplier=1.0, max_grad_norm=1.0))):
        run = FedSGDEavesdropper(task="lm", batch_size=8).run(mech, rng=7)
        scores = [FILM(beam_size=8, reorder_steps=0, bag_method="nonzero" if "pruning" in name else "auto")
                  .run(t.observation, rng=0).score(t.ground_truth) for t in run.trials]
        out["defenses"].append({"defense": name, "utility": dict(run.utility),
                                **{k: float(np.mean([s.get(k, 0.0) for s in scores]))
                                   for k in ("bag_precision", "bag_recall", "rougeL")}})
    _write("film", out)
    assert out["batch_size"][0]["rougeL"] > 0.8
    assert out["batch_size"][-1]["rougeL"] < out["batch_size"][0]["rougeL"]
    assert out["defenses"][0]["bag_recall"] == 0.0


def _short_sentence_trials(n, *, lo=7, hi=12):
    """B=1 FedSGD gradients of the bundled tiny BERT sentiment classifier on short sentences (lo..hi
    tokens with [CLS]/[SEP]: the first sentence of held-out synthetic reviews, the review's label)."""
    from privnlp.data import generate_sentiment
    from privnlp.evaluation.scenarios.gradient import classifier_victim, client_update
    from privnlp.core.observations import GradientObservation

    model, tok, _, _ = classifier_victim("quick", 0)
    data = generate_sentiment(300, seed=7)
    out = []
    for text, y in zip(data.texts, data.labels):
        s = text.split(". ")[0].rstrip(".") + "."
        enc = tok([s], return_tensors="pt")
        L = int(enc["input_ids"].shape[1])
        if not lo <= L <= hi or s in [t for t, _ in out]:
            continue
        batch = {**enc, "labels": torch.tensor([int(y)])}
        g, _ = client_update(model, batch, None, rng=0)
        out.append((s, GradientObservation(model=model, gradients=g, batch_size=1, tokenizer=tok, labels=[int(y)],
                                           lengths=[L], meta={"task": "classifier"})))
        if len(out) == n:
            break
    return out


@pytest.mark.slow
def test_lamp_tag_dlg_results():
    """LAMP Table 1 in miniature: B=1, 5 short sentences, same step budget (12 x 25 Adam steps) for all three."""
    from privnlp.attacks import get

    trials = _short_sentence_trials(5)
    steps = dict(iterations=12, n_c=25, lr=0.01)
    attacks = {"dlg": get("dlg")(**steps), "tag": get("tag")(**steps),
               "lamp": get("lamp")(n_init=50, n_perm=20, n_d=16, **steps)}
    res = {}
    for name, a in attacks.items():
        per = []
        for text, obs in trials:
            r = a.run(obs, rng=0)
            per.append({"reference": text, "reconstruction": r.reconstructions[0], **r.score({"texts": [text]})})
        res[name] = {k: float(np.mean([p[k] for p in per])) for k in ("rouge1", "rouge2", "rougeL")}
        _write(name, {"setup": "bundled tiny BERT sentiment classifier (quick: 2 layers, d=64), FedSGD B=1, "
                               "5 short held-out sentences (7-12 tokens incl. [CLS]/[SEP]), known label and length",
                      "attack_config": {k: getattr(a, k) for k in ("loss", "alpha_tag", "alpha_reg", "alpha_lm", "n_init",
                                                                    "n_perm", "iterations", "n_c", "n_d", "lr")},
                      "B": 1, "n_sentences": len(trials), **res[name], "per_sentence": per,
                      "command": "OMP_NUM_THREADS=1 .venv/bin/python -m pytest -m slow -q "
                                 "tests/gradient/test_slow_repro.py -k lamp_tag_dlg"})
    assert res["lamp"]["rouge2"] > res["tag"]["rouge2"] >= res["dlg"]["rouge2"], res
