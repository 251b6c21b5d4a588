"""LAMP/DLG/TAG engine, the fedsgd.eavesdropper scenario and the CLI (small settings)."""

import numpy as np
import pytest
import torch

from privnlp.attacks import get
from privnlp.core.errors import InvalidArgument
from privnlp.core.observations import GradientObservation


def _tiny_bert(vocab: list[str]):
    """(tokenizer, 1-layer 32-d BERT classifier in eval mode) on a word-level ``vocab``."""
    import os
    import tempfile

    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    d = tempfile.mkdtemp()
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab))
    tok = BertTokenizerFast(os.path.join(d, "vocab.txt"))
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
        num_labels=2,
    )
    return tok, BertForSequenceClassification(cfg).eval()


@pytest.fixture(scope="module")
def tiny_bert_obs():
    words = "the movie was great awful plot acting good bad boring fun".split()
    tok, model = _tiny_bert(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words)
    text = "the movie was great"
    enc = tok([text], return_tensors="pt")
    out = model(**enc, labels=torch.tensor([1]))
    names = [n for n, _ in model.named_parameters()]
    grads = dict(
        zip(names, [g.detach() for g in torch.autograd.grad(out.loss, list(model.parameters()))])
    )
    obs = GradientObservation(
        model=model,
        gradients=grads,
        batch_size=1,
        tokenizer=tok,
        labels=[1],
        lengths=[int(enc["input_ids"].shape[1])],
    )
    return obs, text


def test_presets_run_and_score(tiny_bert_obs):
    obs, text = tiny_bert_obs
    for name in ("dlg", "tag"):
        res = get(name)(iterations=2, n_c=10).run(obs, rng=0)
        s = res.score({"texts": [text]})
        assert set(s) >= {"rouge1", "rouge2", "rougeL"} and len(res.reconstructions) == 1
    res = get("lamp")(n_init=4, n_perm=4, iterations=2, n_c=10, n_d=4, aux_lm_steps=0).run(
        obs, rng=0
    )
    assert len(res.reconstructions[0].split()) <= 4
    kn = get("lamp")(n_init=4, n_perm=4, iterations=2, n_c=10, n_d=4, prior="kn-bigram").run(
        obs, rng=0
    )
    assert len(kn.raw["token_ids"][0]) == obs.lengths[0]


def test_batched_scoring_equals_loop(tiny_bert_obs):
    from privnlp.attacks.gradient.lamp import _Engine

    obs, _ = tiny_bert_obs
    eng = _Engine(
        obs.model,
        obs.gradients,
        obs.labels,
        obs.lengths,
        obs.tokenizer,
        loss="cos",
        alpha_tag=0.01,
        alpha_reg=1.0,
    )
    X = torch.randn(3, 1, obs.lengths[0], 32, generator=torch.Generator().manual_seed(0))
    a = eng.rec_batched(X)
    b = np.array([float(eng.rec(x, create_graph=False)) for x in X])
    assert np.allclose(a, b, atol=1e-4)


def test_lamp_refuses_without_labels(tiny_bert_obs):
    obs, _ = tiny_bert_obs
    bad = GradientObservation(model=obs.model, gradients=obs.gradients, tokenizer=obs.tokenizer)
    assert not get("lamp")().applies_to(bad)
    with pytest.raises(InvalidArgument):
        get("lamp")().run(bad, rng=0)
    with pytest.raises(InvalidArgument):
        get("lamp")(loss="huber")


def test_scenario_transforms_and_dp(lm_victim):
    from privnlp.evaluation.scenarios import get as sget
    from privnlp.mechanisms import get as mget

    sc = sget("fedsgd.eavesdropper")(task="lm", batch_size=2)
    r0 = sc.run(None, rng=0)
    assert len(r0.trials) == 2 and r0.utility["loss_decrease"] > 0
    r1 = sc.run(mget("sign_sgd")(), rng=0)
    g = r1.trials[0].observation.gradients
    assert all(set(torch.unique(v).tolist()) <= {-1.0, 0.0, 1.0} for v in g.values())
    dp = mget("dp_sgd")(noise_multiplier=1.0, max_grad_norm=1.0)
    r2 = sc.run(dp, rng=0)
    assert r2.trials[0].observation.noise_std == pytest.approx(0.5)
    fedavg = sget("fedsgd.eavesdropper")(task="lm", batch_size=1, local_steps=3, lr=0.01).run(
        None, rng=0
    )
    assert fedavg.trials[0].observation.meta["update_kind"] == "pseudo_gradient"


def test_cli_saved_observation(tmp_path, lm_victim):
    from typer.testing import CliRunner

    from privnlp.cli.attack import app
    from privnlp.evaluation.scenarios.gradient import _lm_batch_dict, client_update

    model, tok, recs = lm_victim
    batch = _lm_batch_dict(tok, [recs[0].text], 40)
    grads, _ = client_update(model, batch, None, rng=0)
    path = tmp_path / "obs.pt"
    torch.save({"model": model, "tokenizer": tok, "gradients": grads, "batch_size": 1}, path)
    res = CliRunner().invoke(
        app,
        [
            "film",
            "--observation",
            str(path),
            "--beam-size",
            "4",
            "--reorder-steps",
            "0",
            "--out",
            str(tmp_path / "r.json"),
        ],
    )
    assert res.exit_code == 0, res.output
    import json

    out = json.loads((tmp_path / "r.json").read_text())
    assert out["reconstructions"] and out["attack"] == "film"


# ---- fidelity to the reference code (eth-sri/lamp): TAG's distance, the baselines' defaults, the kept iterate,
# ---- the [unusedN] vocabulary entries


def test_tag_distance_is_squared_l2_plus_alpha_l1(tiny_bert_obs):
    """utilities.grad_dist of the reference code: sum((g1-g2)^2) + tag_factor * sum(|g1-g2|) per layer."""
    from privnlp.attacks.gradient.lamp import _Engine

    obs, _ = tiny_bert_obs
    eng = _Engine(
        obs.model,
        obs.gradients,
        obs.labels,
        obs.lengths,
        obs.tokenizer,
        loss="tag",
        alpha_tag=0.5,
        alpha_reg=0.0,
    )
    diffs = [torch.full_like(t, 0.1) for t in eng.target]
    got = float(eng.grad_dist([t + d for t, d in zip(eng.target, diffs)]))
    n = sum(t.numel() for t in eng.target)
    assert got == pytest.approx(
        n * 0.01 + 0.5 * n * 0.1, rel=1e-4
    )  # an unsquared L2 would give sqrt per layer


def test_tag_dlg_defaults_are_the_reference_baselines():
    """tag.sh / dlg.sh with --baseline: lr 0.1, no decay, one randn initialisation (not rescaled), no prior."""
    for name in ("tag", "dlg"):
        a = get(name)()
        assert (
            a.lr,
            a.lr_decay,
            a.init_std,
            a.n_init,
            a.n_perm,
            a.n_d,
            a.alpha_lm,
            a.alpha_reg,
        ) == (0.1, 1.0, 1.0, 1, 0, 0, 0.0, 0.0)
        assert a.keep_best
    assert get("lamp")().init_std is None  # LAMP: the embeddings' scale
    with pytest.raises(InvalidArgument, match="init_std"):
        get("tag")(init_std=0.0)


def test_keep_best_returns_the_lowest_loss_iterate(tiny_bert_obs):
    """A learning rate far too large makes the last iterate worse than earlier ones: keep_best (the reference
    code's best_final_x) returns the best seen; without it, the last."""
    from dataclasses import replace

    from privnlp.attacks.gradient.lamp import LampSearch, reconstruct

    obs, _ = tiny_bert_obs
    search = LampSearch(
        loss="cos",
        alpha_reg=0.0,
        alpha_lm=0.0,
        n_init=1,
        n_perm=0,
        iterations=1,
        n_c=5,
        n_d=0,
        lr=50.0,
        lr_decay=1.0,
        init_std=1.0,
        keep_best=True,
    )
    _, best = reconstruct(
        obs.model, obs.gradients, obs.labels, obs.lengths, obs.tokenizer, rng=0, search=search
    )
    _, last = reconstruct(
        obs.model,
        obs.gradients,
        obs.labels,
        obs.lengths,
        obs.tokenizer,
        rng=0,
        search=replace(search, keep_best=False),
    )
    assert best["returned_rec_loss"] <= min(best["history"]) + 1e-9
    assert best["returned_rec_loss"] <= best["best_rec_loss"] + 1e-9
    assert last["best_rec_loss"] is None
    assert best["returned_rec_loss"] < last["returned_rec_loss"] - 0.005  # measured 0.137 vs 0.153


def test_unused_vocabulary_entries_never_projected_to():
    """BERT's [unusedN] placeholders are excluded from the nearest-token projection (the reference code drops
    ids 1-99 and 104-998 of bert-base-uncased): an iterate sitting exactly on one projects elsewhere."""
    from privnlp.attacks.gradient.lamp import _Engine, unused_token_ids

    vocab = [
        "[PAD]",
        "[unused0]",
        "[unused1]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "good",
        "bad",
        "film",
    ]
    tok, model = _tiny_bert(vocab)
    assert unused_token_ids(tok, len(vocab)) == [1, 2]
    enc = tok(["good film"], return_tensors="pt")
    out = model(**enc, labels=torch.tensor([1]))
    names = [n for n, _ in model.named_parameters()]
    grads = dict(zip(names, torch.autograd.grad(out.loss, list(model.parameters()))))
    L = int(enc["input_ids"].shape[1])
    eng = _Engine(model, grads, [1], [L], tok, loss="cos", alpha_tag=0.01, alpha_reg=0.0)
    x = eng.E[torch.tensor([[4, 1, 2, 5]])].clone()
    ids = eng.project(x)[0]
    assert ids[0] == 4 and ids[-1] == 5 and not set(ids) & {1, 2}
