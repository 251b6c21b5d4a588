"""Fast plumbing: the temporary FedAvg snapshots + the correlation attacks end to end, and the CLI."""

from __future__ import annotations

import math


def test_fedavg_snapshots_and_attacks_run(tmp_path):
    from privnlp.attacks.memorization import (
        EavesdroppingAttack,
        WatermarkAttack,
        selection_indicator,
    )
    from privnlp.core.observations import ModelSnapshots
    from privnlp.evaluation.scenarios.memorization import digit_bpe_tokenizer, fedavg_snapshots
    from privnlp.models import tiny_gpt2

    texts = [
        [
            f"client {i} says hello number {i}{i}{i}",
            "my social security number is 123-45-678" + str(i),
        ]
        for i in range(4)
    ]
    tok = digit_bpe_tokenizer([t for c in texts for t in c], 300, model_max_length=32)
    eos = tok.eos_token_id

    def factory():
        return tiny_gpt2(
            len(tok),
            n_layer=1,
            n_embd=16,
            n_head=1,
            n_positions=32,
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
            seed=0,
        )

    paths, sel = fedavg_snapshots(
        texts,
        factory,
        tok,
        rounds=4,
        per_round=2,
        local={"steps": 2, "batch_size": 2, "lr": 1e-2, "max_length": 24},
        out_dir=str(tmp_path),
        rng=0,
    )
    assert len(paths) == 5 and sel[0] == () and all(len(s) == 2 for s in sel[1:])
    cands = [f"my social security number is 123-45-678{i}" for i in range(4)]
    obs = ModelSnapshots(
        paths=paths,
        selection=sel,
        model_factory=factory,
        tokenizer=tok,
        meta={"victim": 2, "watermark": texts[2][0], "candidates": cands},
    )
    s = selection_indicator(obs, 2)
    assert s.shape == (4,) and set(s) <= {-1.0, 1.0}
    for atk in (EavesdroppingAttack(), WatermarkAttack()):
        res = atk.run(obs, rng=0)
        assert sorted(res.reconstructions) == sorted(cands)
        sc = res.score(cands[2])
        assert sc["candidate_recall"] == 1.0 and sc["top5_accuracy"] == 1.0
        assert 0.0 <= sc["top1_accuracy"] <= 1.0 and not math.isnan(sc["baseline_top1_accuracy"])


def test_cli_registers_commands():
    import typer
    from typer.testing import CliRunner

    from privnlp.cli.attack_memorization import register

    app = register(typer.Typer())
    for cmd in ("canary", "eavesdrop", "watermark"):
        r = CliRunner().invoke(app, [cmd, "--help"])
        assert r.exit_code == 0, r.output
