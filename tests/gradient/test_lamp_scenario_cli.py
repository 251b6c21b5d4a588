"""LAMP/DLG/TAG engine, the fedsgd.eavesdropper scenario and the CLI (small settings)."""
import numpy as np
import pytest
import torch

from privnlp.attacks import get
from privnlp.core.errors import InvalidArgument
from privnlp.core.observations import GradientObservation


@pytest.fixture(scope="module")
def tiny_bert_obs():
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast
    import tempfile, os

    words = "the movie was great awful plot acting good bad boring fun".split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab))
    tok = BertTokenizerFast(os.path.join(d, "vocab.txt"))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=16, num_labels=2)
    model = BertForSequenceClassification(cfg).eval()
    text = "the movie was great"
    enc = tok([text], return_tensors="pt")
    out = model(**enc, labels=torch.tensor([1]))
    names = [n for n, _ in model.named_parameters()]
    grads = dict(zip(names, [g.detach() for g in torch.autograd.grad(out.loss, list(model.parameters()))]))
    obs = GradientObservation(model=model, gradients=grads, batch_size=1, tokenizer=tok, labels=[1],
                              lengths=[int(enc["input_ids"].shape[1])])
    return obs, text


def test_presets_run_and_score(tiny_bert_obs):
    obs, text = tiny_bert_obs
    for name in ("dlg", "tag"):
        res = get(name)(iterations=2, n_c=10).run(obs, rng=0)
        s = res.score({"texts": [text]})
        assert set(s) >= {"rouge1", "rouge2", "rougeL"} and len(res.reconstructions) == 1
    res = get("lamp")(n_init=4, n_perm=4, iterations=2, n_c=10, n_d=4, aux_lm_steps=0).run(obs, rng=0)
    assert len(res.reconstructions[0].split()) <= 4
    kn = get("lamp")(n_init=4, n_perm=4, iterations=2, n_c=10, n_d=4, prior="kn-bigram").run(obs, rng=0)
    assert len(kn.raw["token_ids"][0]) == obs.lengths[0]


def test_batched_scoring_equals_loop(tiny_bert_obs):
    from privnlp.attacks.gradient.lamp import _Engine

    obs, _ = tiny_bert_obs
    eng = _Engine(obs.model, obs.gradients, obs.labels, obs.lengths, obs.tokenizer, loss="cos", alpha_tag=0.01,
                  alpha_reg=1.0)
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
    fedavg = sget("fedsgd.eavesdropper")(task="lm", batch_size=1, local_steps=3, lr=0.01).run(None, rng=0)
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
    res = CliRunner().invoke(app, ["film", "--observation", str(path), "--beam-size", "4", "--reorder-steps", "0",
                                   "--out", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    import json

    out = json.loads((tmp_path / "r.json").read_text())
    assert out["reconstructions"] and out["attack"] == "film"
