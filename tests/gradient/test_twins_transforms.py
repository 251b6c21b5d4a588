"""The leaky twins of the update-transform defenses and frozen embeddings are caught.

Two kinds of checks per twin: the bug's behaviour on a transmitted update (direct), and that the
paired attack that the twin's docstring names scores the twin higher than the real defense on a
seeded run of the ``fedsgd.eavesdropper`` scenario (RLG on the multi-class ``labels`` trials,
FILM's bag of words on the LM trials).
"""

import numpy as np
import pytest
import torch

from privnlp.attacks import get as aget
from privnlp.core.registry import LEAKY_TWINS
from privnlp.evaluation.scenarios.gradient import FedSGDEavesdropper
from privnlp.mechanisms import get as mget

TRANSFORMS = ("gradient_pruning", "sign_sgd", "graddrop", "gaussian_noise_update", "random_masking")
ALL = ("frozen_embeddings",) + TRANSFORMS


def _pair(name):
    LEAKY_TWINS.load_all()
    real = mget(name).example("quick")
    twin_cls = LEAKY_TWINS.get(name)
    twin = twin_cls.example("quick")
    return real, twin


@pytest.mark.parametrize("name", ALL)
def test_twin_imitates_its_mechanism(name):
    real, twin = _pair(name)
    assert isinstance(twin, type(real)) and type(twin) is not type(real)
    assert twin.name == name and twin.params() == real.params()
    assert twin.claim() == real.claim()
    doc = type(twin).__doc__ or ""
    assert "Bug" in doc and "Caught by" in doc


def _grads(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "encoder.weight": torch.randn(200, 64, generator=g),  # >= 10,000 entries
        "classifier.weight": torch.randn(32, 64, generator=g),
        "classifier.bias": torch.randn(32, generator=g),
    }


@pytest.mark.parametrize("name", TRANSFORMS)
def test_twin_sends_the_update_the_defense_hides(name):
    real, twin = _pair(name)
    g = _grads()
    sent_real, sent_twin = real.apply(g, rng=1), twin.apply(g, rng=1)
    head = "classifier.weight"
    # the real defense changes the output layer's update, the twin leaves it (almost) intact
    assert not torch.equal(sent_real[head], g[head])
    if name == "gradient_pruning":  # keep 1% -> keeps 99%
        assert (sent_real[head] != 0).float().mean() < 0.05
        assert (sent_twin[head] != 0).float().mean() > 0.95
    elif name == "graddrop":  # small tensors sent dense, big ones still dropped
        assert torch.equal(sent_twin[head], g[head]) and torch.equal(
            sent_twin["classifier.bias"], g["classifier.bias"]
        )
        assert (sent_twin["encoder.weight"] != 0).float().mean() < 0.05
    else:  # sign / noise / masking: the raw gradient goes out
        for k in g:
            assert torch.equal(sent_twin[k], g[k]), k
    for k in g:  # the input is never mutated
        assert torch.equal(g[k], _grads()[k])


def _rlg_f1(mech, seed=0):
    run = FedSGDEavesdropper("quick", task="labels").run(mech, rng=seed)
    rlg = aget("rlg")()
    vals = [
        rlg.run(t.observation, rng=0).score(t.ground_truth)["f1"]
        for t in run.trials
        if rlg.applies_to(t.observation)
    ]
    assert len(vals) >= 3
    return float(np.mean(vals)), vals


@pytest.fixture(scope="module")
def undefended_rlg():
    return _rlg_f1(None)


def test_rlg_recovers_labels_undefended(undefended_rlg):
    mean, vals = undefended_rlg
    assert mean >= 0.95, vals


@pytest.mark.parametrize("name", TRANSFORMS)
def test_rlg_catches_the_twin(name, undefended_rlg):
    real, twin = _pair(name)
    d_mean, d_vals = _rlg_f1(real)
    t_mean, t_vals = _rlg_f1(twin)
    assert t_mean >= 0.95 and t_mean >= d_mean + 0.3, (name, d_vals, t_vals)
    assert t_mean >= undefended_rlg[0] - 0.05


def test_frozen_twin_still_sends_embedding_rows():
    from privnlp.models import tiny_gpt2

    real, twin = _pair("frozen_embeddings")
    sent = {}
    for key, mech in (("real", real), ("twin", twin)):
        model = tiny_gpt2(64, n_layer=1, n_embd=16, n_head=2, n_positions=16, seed=0)
        names = mech.apply(model)
        assert "transformer.wte.weight" in names  # both *report* the embeddings as frozen
        ids = torch.tensor([[3, 7, 11, 5]])
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        loss = model(input_ids=ids, labels=ids).loss
        grads = dict(zip([n for n, _ in params], torch.autograd.grad(loss, [p for _, p in params])))
        sent[key] = grads
    assert "transformer.wte.weight" not in sent["real"]
    rows = sent["twin"]["transformer.wte.weight"].abs().sum(1)
    assert (rows[[3, 7, 11, 5]] > 0).all()


def test_film_bag_catches_frozen_twin(lm_victim):
    from privnlp.attacks.gradient.film import recover_bag

    real, twin = _pair("frozen_embeddings")
    recall = {}
    for key, mech in (("real", real), ("twin", twin)):
        run = FedSGDEavesdropper(task="lm", batch_size=1).run(mech, rng=0)
        t = run.trials[0]
        bag = recover_bag(t.observation.gradients, t.observation.model)
        gold = set(t.ground_truth["token_ids"])
        recall[key] = len(gold & set(bag.token_ids)) / len(gold)
    assert recall["real"] == 0.0 and recall["twin"] >= 0.9, recall
