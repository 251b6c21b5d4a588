"""Embedding-obfuscation defenses (noised / dropout / adversarial embedding, LSTM dropout) in the
``fl.snapshots`` scenario: the record-level paper's countermeasures (Tables VII-XI of
``../shared/papers/record-level-privacy-leakage-in-fl.txt``) against the eavesdropping and
watermark attacks, on the asynchronous FedAvg engine and the tiny LSTM LM.

Fast tests use the ``smoke`` preset (plumbing: too short to memorize). The slow test reproduces
the shape of the countermeasure table and writes ``cards/attacks/eavesdropping/countermeasures.json``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DEFENSES = ("noised_embedding", "dropout_embedding", "adversarial_embedding", "lstm_dropout")


def _small_attacks():
    from privnlp.attacks.memorization import EavesdroppingAttack, WatermarkAttack

    return [
        EavesdroppingAttack(beam_width=4, n_samples=4),
        WatermarkAttack(beam_width=4, n_samples=4),
    ]


def test_tiny_lstm_lm_matches_the_hf_call_convention():
    import torch

    from privnlp.mechanisms.training.embedding import apply_lstm_dropout, input_embedding
    from privnlp.models import tiny_lstm_lm

    for tied in (False, True):
        m = tiny_lstm_lm(
            50, emb_dim=8, hidden=12, num_layers=2, tie_word_embeddings=tied, n_positions=16, seed=3
        )
        ids = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(0))
        out = m(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=None, labels=ids)
        assert out.logits.shape == (3, 7, 50)
        ref = torch.nn.functional.cross_entropy(
            out.logits[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1)
        )
        assert torch.allclose(out.loss, ref)
        assert input_embedding(m)[1] is m.embed and m.config.n_positions == 16
        # causal: the logits at t do not depend on tokens after t
        ids2 = ids.clone()
        ids2[:, -1] = (ids2[:, -1] + 1) % 50
        assert torch.allclose(m(input_ids=ids).logits[:, :-1], m(input_ids=ids2).logits[:, :-1])
    same = tiny_lstm_lm(50, emb_dim=8, hidden=12, seed=3).state_dict()
    assert all(
        torch.equal(v, tiny_lstm_lm(50, emb_dim=8, hidden=12, seed=3).state_dict()[k])
        for k, v in same.items()
    )
    # LSTM dropout wraps every layer (the paper drops the output of each LSTM layer)
    m = tiny_lstm_lm(50, emb_dim=8, hidden=12, num_layers=2, seed=0)
    apply_lstm_dropout(m, 0.5, rng=0)
    assert [type(x).__name__ for x in m.lstms] == ["LSTMOutputDropout"] * 2
    m.eval()
    ids = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(1))
    assert torch.equal(m(input_ids=ids).logits, m(input_ids=ids).logits)  # identity in eval mode


def test_scenario_model_selection():
    from privnlp.core.errors import InvalidArgument
    from privnlp.evaluation.audit import resolve_scenario
    from privnlp.evaluation.scenarios.memorization import (
        FLSnapshotsLSTMScenario,
        FLSnapshotsScenario,
    )
    from privnlp.mechanisms import get

    for name in DEFENSES:
        mech = get(name).example("quick")
        scen = resolve_scenario(None, mech, "quick")
        assert isinstance(scen, FLSnapshotsScenario)
        expect = "lstm" if name == "lstm_dropout" else "gpt2"
        assert (
            scen.model_for(mech) == expect and scen.model_for(None) == expect
        )  # baseline on the same model
    lstm = get("lstm_dropout").example("quick")
    assert isinstance(resolve_scenario(None, lstm, "quick"), FLSnapshotsLSTMScenario)
    assert FLSnapshotsScenario("quick").model_for(lstm) == "lstm"
    with pytest.raises(InvalidArgument, match="requires model='lstm'"):
        FLSnapshotsScenario("quick", model="gpt2").model_for(lstm)
    with pytest.raises(InvalidArgument, match="model must be one of"):
        FLSnapshotsScenario("quick", model="transformer")


def test_engine_rejects_unsupported_mechanism(tmp_path):
    from privnlp.core.errors import InvalidArgument
    from privnlp.evaluation.scenarios.memorization import async_fedavg_snapshots

    with pytest.raises(InvalidArgument, match="apply"):
        async_fedavg_snapshots(
            [["a"], ["b"]],
            object,
            None,
            rounds=1,
            per_round=1,
            local={"steps": 1, "batch_size": 1, "lr": 1e-3, "max_length": 8},
            out_dir=str(tmp_path),
            mechanism=object(),
            rng=0,
        )


@pytest.fixture(scope="module")
def smoke_reports():
    import torch

    torch.set_num_threads(1)
    from privnlp.evaluation import audit
    from privnlp.evaluation.scenarios.memorization import (
        FLSnapshotsLSTMScenario,
        FLSnapshotsScenario,
    )

    out = {}
    for name in DEFENSES:
        scen = (
            FLSnapshotsLSTMScenario("smoke")
            if name == "lstm_dropout"
            else FLSnapshotsScenario("smoke")
        )
        out[name] = audit(
            name, scen, _small_attacks(), seeds=[0], progress=False, figures=False
        ).to_dict()
    return out


@pytest.mark.parametrize("name", DEFENSES)
def test_defense_runs_through_audit(smoke_reports, name):
    d = smoke_reports[name]
    by = {a["attack"]: a for a in d["attacks"]}
    assert set(by) == {"eavesdropping", "watermark"}
    for a in by.values():
        for side in ("defended", "undefended"):
            for k in ("top1_accuracy", "baseline_top1_accuracy", "top1_edit_distance"):
                v = a[side][k]["mean"]
                assert not math.isnan(v), (name, side, k)
            assert 0.0 <= a[side]["top1_accuracy"]["mean"] <= 1.0
    util = d["utility"]
    loss = util["heldout_loss"]["mean"]
    base = d["utility_undefended"]["heldout_loss"]["mean"]
    assert math.isfinite(loss) and math.isfinite(base)
    # the defense changed local training (same seed, same data, same initial model otherwise)
    assert loss != base


# ----------------------------------------------------------------------------- slow reproduction
#: (label, registered name or None, constructor kwargs); one table per defense, as in Tables VII-X
SETTINGS = (
    ("none", None, {}),
    ("noised_embedding(sigma=0.01)", "noised_embedding", {"sigma": 0.01}),
    ("noised_embedding(sigma=1.0)", "noised_embedding", {"sigma": 1.0}),
    ("dropout_embedding(p=0.2)", "dropout_embedding", {"p": 0.2}),
    ("dropout_embedding(p=0.5)", "dropout_embedding", {"p": 0.5}),
    ("adversarial_embedding(eps=1.0)", "adversarial_embedding", {"epsilon": 1.0}),
    ("lstm_dropout(p=0.1)", "lstm_dropout", {"p": 0.1}),
    ("lstm_dropout(p=0.5)", "lstm_dropout", {"p": 0.5}),
)
SLOW_SEEDS = (0, 1)


@pytest.mark.slow
def test_repro_countermeasure_table():
    """Shape of Tables VII-X on fl.snapshots quick with the LSTM LM: per defense setting, the
    eavesdropping / watermark top-1 accuracy and smallest edit distance (ours and the Carlini
    baseline) and the held-out loss; writes cards/attacks/eavesdropping/countermeasures.json."""
    import torch

    torch.set_num_threads(1)
    from privnlp.attacks.memorization import EavesdroppingAttack, WatermarkAttack
    from privnlp.core.report import atomic_write_text, summarize
    from privnlp.evaluation.scenarios.memorization import FLSnapshotsScenario
    from privnlp.mechanisms import get

    keys = (
        "top1_accuracy",
        "top1_edit_distance",
        "baseline_top1_accuracy",
        "top5_accuracy",
        "candidate_recall",
    )
    table: dict = {}
    for label, name, kw in SETTINGS:
        mech = None if name is None else get(name)(**kw)
        rows: dict = {"eavesdropping": [], "watermark": [], "heldout_loss": []}
        for seed in SLOW_SEEDS:
            run = FLSnapshotsScenario("quick", model="lstm").run(
                mech, rng=np.random.default_rng(seed)
            )
            rows["heldout_loss"].append(run.utility["heldout_loss"])
            for atk_name, atk in (
                ("eavesdropping", EavesdroppingAttack()),
                ("watermark", WatermarkAttack()),
            ):
                sc = [atk.run(tr.observation, rng=seed).score(tr.ground_truth) for tr in run.trials]
                rows[atk_name].append({k: float(np.mean([s[k] for s in sc])) for k in keys})
        entry = {"heldout_loss": summarize(rows["heldout_loss"]).to_dict()}
        for atk_name in ("eavesdropping", "watermark"):
            entry[atk_name] = {k: summarize([r[k] for r in rows[atk_name]]).to_dict() for k in keys}
        table[label] = entry
    payload = {
        "scenario": "fl.snapshots quick, model=lstm (4 clients, 2 per round, 30 rounds, SSN record x4 "
        "+ watermark per client; async FedAvg, local Adam)",
        "paper": "record-level-privacy-leakage-in-fl.txt Tables VII-X",
        "seeds": list(SLOW_SEEDS),
        "trials_per_seed": 4,
        "settings": table,
    }
    atomic_write_text(
        ROOT / "cards" / "attacks" / "eavesdropping" / "countermeasures.json",
        json.dumps(payload, indent=2, sort_keys=True, default=float) + "\n",
    )
    und = table["none"]["eavesdropping"]
    assert und["top1_accuracy"]["mean"] > und["baseline_top1_accuracy"]["mean"]
