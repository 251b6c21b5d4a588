"""Slow reproductions (``make repro``): write cards/attacks/<name>/results.json for the cards.

Seeds 0, 1, 2; mean and a 95% t-interval over seeds (``privnlp.core.report.summarize``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (0, 1, 2)


def _summ(values):
    from privnlp.core.report import summarize

    s = summarize([float(v) for v in values])
    d = s.to_dict() if hasattr(s, "to_dict") else dict(vars(s))
    d["values"] = [float(v) for v in values]
    return d


def _write(name: str, payload: dict) -> None:
    from privnlp.core.report import atomic_write_text

    atomic_write_text(
        ROOT / "cards" / "attacks" / name / "results.json",
        json.dumps(payload, indent=2, sort_keys=True, default=float) + "\n",
    )


@pytest.mark.slow
def test_repro_canary_exposure_and_extraction():
    from privnlp.attacks.memorization import CanaryExposure, CanaryExtraction
    from privnlp.evaluation.scenarios.memorization import LMCanaryScenario
    from privnlp.mechanisms import get as get_mech

    settings = {"undefended": None, "dp_sgd(eps=8)": get_mech("dp_sgd").example("quick")}
    out: dict = {
        "scenario": "lm.canary (quick preset: 'my pin code is {digits:4}', 16 insertions)",
        "seeds": list(SEEDS),
        "settings": {},
    }
    for label, mech in settings.items():
        rows = []
        for seed in SEEDS:
            run = LMCanaryScenario("quick").run(mech, rng=np.random.default_rng(seed))
            tr = run.trials[0]
            row = dict(run.utility)
            row.update(CanaryExposure().run(tr.observation, rng=seed).score(tr.ground_truth))
            ex = CanaryExtraction().run(tr.observation, rng=seed).score(tr.ground_truth)
            row.update({f"extraction_{k}": v for k, v in ex.items()})
            rows.append(row)
        out["settings"][label] = {k: _summ([r[k] for r in rows]) for k in rows[0]}
    _write("canary_exposure", out)
    _write("canary_extraction", out)
    und, dp = out["settings"]["undefended"], out["settings"]["dp_sgd(eps=8)"]
    assert und["exposure"]["mean"] > dp["exposure"]["mean"] + 3.0


@pytest.mark.slow
def test_repro_eavesdropping_and_watermark():
    from privnlp.attacks.memorization import EavesdroppingAttack, WatermarkAttack
    from privnlp.evaluation.scenarios.memorization import FLSnapshotsScenario

    per: dict = {"eavesdropping": [], "watermark": []}
    util = []
    for seed in SEEDS:
        run = FLSnapshotsScenario("quick").run(None, rng=np.random.default_rng(seed))
        util.append(run.utility["heldout_loss"])
        for name, atk in (
            ("eavesdropping", EavesdroppingAttack()),
            ("watermark", WatermarkAttack()),
        ):
            scores = [atk.run(tr.observation, rng=seed).score(tr.ground_truth) for tr in run.trials]
            per[name].append({k: float(np.mean([s[k] for s in scores])) for k in scores[0]})
    for name, rows in per.items():
        _write(
            name,
            {
                "scenario": "fl.snapshots quick (4 clients, 2 per round, 30 rounds, SSN record x4 per client)",
                "seeds": list(SEEDS),
                "trials_per_seed": 4,
                "heldout_loss": _summ(util),
                "metrics": {k: _summ([r[k] for r in rows]) for k in rows[0]},
            },
        )
    ev = per["eavesdropping"]
    assert np.mean([r["top1_accuracy"] for r in ev]) > np.mean(
        [r["baseline_top1_accuracy"] for r in ev]
    )


@pytest.mark.slow
def test_repro_table1_grid_small():
    """A 2 x 2 p_u x p_e grid (Table 1 shape) on the bundled corpus: RS / BS counts grow with p_e."""
    from privnlp.attacks.memorization import count_memorized, federated_secret_sharer
    from privnlp.data import generate_corpus, make_canary
    from privnlp.evaluation.scenarios.memorization import digit_bpe_tokenizer
    from privnlp.models import tiny_gpt2, train_lm

    g = np.random.default_rng(0)
    corpus = generate_corpus(n_users=40, records_per_user=10, seed=0)
    grid = {}
    recs = list(corpus.records)
    canaries = {}
    for p_u in (0.05, 0.2):
        for p_e in (0.1, 1.0):
            cs = [make_canary("my pin code is {digits:4}", rng=g) for _ in range(3)]
            for c in cs:
                recs, _, n = federated_secret_sharer(recs, c, p_u=p_u, p_e=p_e, rng=g)
            canaries[(p_u, p_e)] = cs
    texts = [r.text for r in recs]
    tok = digit_bpe_tokenizer(texts, 600, model_max_length=64)
    eos = tok.eos_token_id
    model = tiny_gpt2(
        len(tok),
        n_layer=2,
        n_embd=64,
        n_head=2,
        n_positions=64,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    train_lm(model, tok, texts, steps=600, batch_size=16, lr=3e-3, max_length=48, rng=0)
    for (p_u, p_e), cs in canaries.items():
        grid[f"p_u={p_u},p_e={p_e}"] = count_memorized(model, tok, cs, n_samples=500, rng=0)
    _write(
        "canary_extraction",
        {
            **json.loads((ROOT / "cards/attacks/canary_extraction/results.json").read_text()),
            "table1_grid_seed0": grid,
        }
        if (ROOT / "cards/attacks/canary_extraction/results.json").exists()
        else {"table1_grid_seed0": grid},
    )
    assert sum(v["RS"] for v in grid.values()) >= 1
